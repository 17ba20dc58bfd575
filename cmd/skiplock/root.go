package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/migrations"
)

// globals are the flags every command shares.
type globals struct {
	// databaseURLs are the --database-url values in order: `work` serves
	// every one, `stats`, `top` and `serve` add them up and `doctor` checks
	// each; every other command refuses more than one (manyDatabases).
	databaseURLs []string
	schema       string
	jsonOut      bool
	logLevel     string
	logFormat    string
}

var g globals

// manyDatabases are the commands that take --database-url more than once.
var manyDatabases = map[string]bool{"skiplock work": true, "skiplock stats": true, "skiplock doctor": true,
	"skiplock serve": true, "skiplock top": true}

// commands registers subcommand constructors; each command file adds itself
// in init so commands can be written independently.
var commands []func() *cobra.Command

func register(f func() *cobra.Command) { commands = append(commands, f) }

func newRootCmd() *cobra.Command {
	g = globals{}
	root := &cobra.Command{
		Use:           "skiplock",
		Short:         "A PostgreSQL job queue: CLI, polyglot worker, dashboard and benchmark",
		Version:       version(),
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if err := migrations.ValidateSchema(g.schema); err != nil {
				return usageError("--schema: %v", err)
			}
			if _, err := parseLevel(g.logLevel); err != nil {
				return usageError("--log-level (or SKIPLOCK_LOG_LEVEL): %v", err)
			}
			if g.logFormat != "text" && g.logFormat != "json" {
				return usageError("--log-format (or SKIPLOCK_LOG_FORMAT): must be text or json, got %q", g.logFormat)
			}
			if len(g.databaseURLs) > 1 && !manyDatabases[cmd.CommandPath()] {
				return usageError("--database-url: given %d times; only work, stats, doctor, serve and top take several databases", len(g.databaseURLs))
			}
			return nil
		},
	}
	root.SetVersionTemplate("{{.Name}} {{.Version}}\n")
	pf := root.PersistentFlags()
	pf.StringArrayVar(&g.databaseURLs, "database-url", nil, "PostgreSQL URL (default $DATABASE_URL, else the libpq PG* variables); "+
		"work, stats, doctor, serve and top take it repeated, one per database")
	pf.StringVar(&g.schema, "schema", envOr("SKIPLOCK_SCHEMA", "skiplock"), "schema holding skiplock's tables")
	pf.StringVar(&g.logLevel, "log-level", envOr("SKIPLOCK_LOG_LEVEL", "info"), "log level: debug, info, warn, error")
	pf.StringVar(&g.logFormat, "log-format", envOr("SKIPLOCK_LOG_FORMAT", "text"), "log format on stderr: text or json (one object per line)")
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return syntaxError(err) })
	for _, f := range commands {
		root.AddCommand(f())
	}
	strictGroups(root)
	return root
}

// strictGroups makes every command that only groups subcommands (queue,
// migrate, dlq, ...) reject what it does not know: cobra would print the
// help and exit 0 for `skiplock queue bogus`. Bare, it prints its help.
func strictGroups(cmd *cobra.Command) {
	for _, c := range cmd.Commands() {
		strictGroups(c)
	}
	if cmd.HasParent() && cmd.HasSubCommands() && !cmd.Runnable() {
		cmd.Args = cobra.ArbitraryArgs
		cmd.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			return syntaxError(fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath()))
		}
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// addJSON adds the --json flag to a command that reports something.
func addJSON(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&g.jsonOut, "json", false, "print machine-readable JSON")
}

// exitError carries an exit code; err (may be nil) is printed to stderr.
type exitError struct {
	code  int
	err   error
	usage bool // print the command's usage after the error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

func usageError(format string, args ...any) error {
	return &exitError{code: 2, err: fmt.Errorf(format, args...)}
}

// syntaxError is a usage error in the command line's shape (an unknown
// command, flag or argument): the command's usage is printed after it.
func syntaxError(err error) error { return &exitError{code: 2, err: err, usage: true} }

// checkFailed is exit code 3: a check (doctor, migrate status --check) failed.
func checkFailed(err error) error { return &exitError{code: 3, err: err} }

// isSyntax reports the argument errors cobra's own validators return
// (cobra.NoArgs, ExactArgs, required flags).
func isSyntax(err error) bool {
	msg := err.Error()
	return strings.HasPrefix(msg, "unknown command") || strings.HasPrefix(msg, "unknown flag") ||
		strings.Contains(msg, "accepts ") || strings.Contains(msg, "required flag")
}

// parseLevel accepts slog's level names (debug, info, warn, error, any case,
// with an optional offset such as warn+2).
func parseLevel(s string) (slog.Level, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("must be debug, info, warn or error, got %q", s)
	}
	return lvl, nil
}

// logger is the process's slog logger on w, at --log-level, in --log-format.
func logger(w io.Writer) *slog.Logger {
	lvl, err := parseLevel(g.logLevel)
	if err != nil {
		lvl = slog.LevelInfo // unreachable after PersistentPreRunE
	}
	return loggerAt(w, lvl)
}

// loggerAt is a logger in --log-format at a fixed level.
func loggerAt(w io.Writer, lvl slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: lvl}
	if g.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// databaseURL resolves the connection: --database-url, $DATABASE_URL, or
// "" (pgx then reads the libpq PG* variables).
func databaseURL() string {
	if n := len(g.databaseURLs); n > 0 && g.databaseURLs[n-1] != "" {
		return g.databaseURLs[n-1] // the only one: more are refused where not served
	}
	return os.Getenv("DATABASE_URL")
}

// listenURLFlag adds --listen-url to a command that runs workers.
func listenURLFlag(cmd *cobra.Command, v *string) {
	cmd.Flags().StringVar(v, "listen-url", "", "direct PostgreSQL URL used only for LISTEN, when --database-url goes through a transaction-mode pooler such as PgBouncer (default $SKIPLOCK_LISTEN_URL)")
}

// listenURL resolves --listen-url, then $SKIPLOCK_LISTEN_URL.
func listenURL(flag string) string {
	if flag != "" {
		return flag
	}
	return os.Getenv("SKIPLOCK_LISTEN_URL")
}

// connect opens a pool sized for CLI use, with a connect timeout, and checks
// the server answers. Errors never include the URL (it may hold a password).
// The statement mode suits a transaction-mode pooler when the URL leads to
// one (see skiplock.ParsePoolConfig).
func connect(ctx context.Context, maxConns int32) (*pgxpool.Pool, error) {
	return connectTo(ctx, databaseURL(), "--database-url", maxConns, nil)
}

// connectTo is connect for the URL given with flag; tune, when set, edits
// the pool's configuration before it connects.
func connectTo(ctx context.Context, dbURL, flag string, maxConns int32, tune func(*pgxpool.Config)) (*pgxpool.Pool, error) {
	if _, err := pgxpool.ParseConfig(dbURL); err != nil {
		return nil, usageError("%s: cannot parse the connection string", flag)
	}
	cfg, err := skiplock.ParsePoolConfig(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 10 * time.Second
	}
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = "skiplock"
	}
	if tune != nil {
		tune(cfg)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", cfg.ConnConfig.Host, err)
	}
	pctx, cancel := context.WithTimeout(ctx, cfg.ConnConfig.ConnectTimeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to %s:%d/%s: %w", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database, err)
	}
	return pool, nil
}

// printJSON writes v as one line of JSON to stdout.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // error signatures hold <n>, <str>: keep them readable
	return enc.Encode(v)
}
