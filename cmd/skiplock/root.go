package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/migrations"
)

// globals are one invocation's flags that every command shares, and the
// process it runs in. newCommandTree builds a fresh one with each command
// tree, so two trees (two tests in parallel) share nothing.
type globals struct {
	// databaseURLs are the --database-url values in order: `work` serves
	// every one, `stats`, `top` and `serve` add them up and `doctor` checks
	// each; every other command refuses more than one (manyDatabases).
	databaseURLs []string
	schema       string
	jsonOut      bool
	logLevel     string
	logFormat    string
	// encryptionKeys is the --encryption-keys file of the commands that
	// take it (addEncryptionKeys).
	encryptionKeys string
	process
}

// process is what an invocation takes from the process it runs in: the
// environment and the termination signals. main passes the real ones
// (osProcess); a test gives each in-process invocation its own, so that
// invocations can run in parallel and a signal reaches only the one it is
// meant for.
type process struct {
	// getenv reads the environment ($DATABASE_URL, SKIPLOCK_*).
	getenv func(string) string
	// notify relays the signals sig to c until stopNotify(c), as
	// signal.Notify and signal.Stop do.
	notify     func(c chan<- os.Signal, sig ...os.Signal)
	stopNotify func(c chan<- os.Signal)
}

// osProcess is the process's own environment and signals.
func osProcess() process {
	return process{getenv: os.Getenv, notify: signal.Notify, stopNotify: signal.Stop}
}

// notifyContext is signal.NotifyContext through the invocation's signals:
// the context ends at the first of sig, or when stop is called.
func (p process) notifyContext(parent context.Context, sig ...os.Signal) (ctx context.Context, stop context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	c := make(chan os.Signal, 1)
	p.notify(c, sig...)
	go func() {
		select {
		case <-c:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		cancel()
		p.stopNotify(c)
	}
}

// manyDatabases are the commands that take --database-url more than once.
var manyDatabases = map[string]bool{"skiplock work": true, "skiplock stats": true, "skiplock doctor": true,
	"skiplock serve": true, "skiplock top": true}

// subcommands are the constructors of the top-level commands (`skiplock
// --help` lists them sorted by name); each takes the invocation's options.
var subcommands = []func(*globals) *cobra.Command{
	newBenchCmd, newDevCmd, newDLQCmd, newDoctorCmd, newEnqueueCmd, newFailoverCmd, newHistoryCmd, newImportCmd, newJobCmd,
	newKeysCmd, newLimitCmd, newMigrateCmd, newQueueCmd, newRolesCmd, newScheduleCmd, newServeCmd, newSignalCmd,
	newStatsCmd, newTenantCmd, newTopCmd,
	newWorkCmd, newWorkflowCmd,
}

// newRootCmd returns the whole command tree with every command, flag and
// default as `skiplock` has them. It has no side effects: nothing runs until
// the tree is executed, and each call returns a tree that shares no state
// with another (docs/reference/cli.md can be generated from one).
func newRootCmd() *cobra.Command {
	root, _ := newCommandTree(osProcess())
	return root
}

// newCommandTree builds the command tree for one invocation in process p,
// and returns with it the options its flags fill in.
func newCommandTree(p process) (*cobra.Command, *globals) {
	g := &globals{process: p}
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
	pf.StringVar(&g.schema, "schema", g.envOr("SKIPLOCK_SCHEMA", "skiplock"), "schema holding skiplock's tables")
	pf.StringVar(&g.logLevel, "log-level", g.envOr("SKIPLOCK_LOG_LEVEL", "info"), "log level: debug, info, warn, error")
	pf.StringVar(&g.logFormat, "log-format", g.envOr("SKIPLOCK_LOG_FORMAT", "text"), "log format on stderr: text or json (one object per line)")
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return syntaxError(err) })
	for _, f := range subcommands {
		root.AddCommand(f(g))
	}
	strictGroups(root)
	return root, g
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

// envOr is the environment variable k, or def when it is unset or empty.
func (g *globals) envOr(k, def string) string {
	if v := g.getenv(k); v != "" {
		return v
	}
	return def
}

// addJSON adds the --json flag to a command that reports something.
func (g *globals) addJSON(cmd *cobra.Command) {
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
func (g *globals) logger(w io.Writer) *slog.Logger {
	lvl, err := parseLevel(g.logLevel)
	if err != nil {
		lvl = slog.LevelInfo // unreachable after PersistentPreRunE
	}
	return g.loggerAt(w, lvl)
}

// loggerAt is a logger in --log-format at a fixed level. In JSON every
// duration is a number of seconds (a float), not slog's nanoseconds.
func (g *globals) loggerAt(w io.Writer, lvl slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: lvl}
	if g.logFormat == "json" {
		opts.ReplaceAttr = durationSeconds
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// durationSeconds writes a duration as seconds (slog's JSON handler writes
// integer nanoseconds).
func durationSeconds(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.Float64Value(a.Value.Duration().Seconds())
	}
	return a
}

// say writes one progress line on w (serve's and dev's "dashboard on …"):
// the line as is in text, one JSON record with attrs under --log-format
// json, so that every line on stderr parses.
func (g *globals) say(w io.Writer, line string, attrs ...slog.Attr) {
	if g.logFormat == "json" {
		g.loggerAt(w, slog.LevelInfo).LogAttrs(context.Background(), slog.LevelInfo, line, attrs...)
		return
	}
	fmt.Fprintln(w, line)
}

// databaseURL resolves the connection: --database-url, $DATABASE_URL, or
// "" (pgx then reads the libpq PG* variables).
func (g *globals) databaseURL() string {
	if n := len(g.databaseURLs); n > 0 && g.databaseURLs[n-1] != "" {
		return g.databaseURLs[n-1] // the only one: more are refused where not served
	}
	return g.getenv("DATABASE_URL")
}

// listenURLFlag adds --listen-url to a command that runs workers.
func listenURLFlag(cmd *cobra.Command, v *string) {
	cmd.Flags().StringVar(v, "listen-url", "", "direct PostgreSQL URL used only for LISTEN, when --database-url goes through a transaction-mode pooler such as PgBouncer (default $SKIPLOCK_LISTEN_URL)")
}

// listenURL resolves --listen-url, then $SKIPLOCK_LISTEN_URL.
func (g *globals) listenURL(flag string) string {
	if flag != "" {
		return flag
	}
	return g.getenv("SKIPLOCK_LISTEN_URL")
}

// connect opens a pool sized for CLI use, with a connect timeout, and checks
// the server answers. Errors never include the URL (it may hold a password).
// The statement mode suits a transaction-mode pooler when the URL leads to
// one (see skiplock.ParsePoolConfig).
func (g *globals) connect(ctx context.Context, maxConns int32) (*pgxpool.Pool, error) {
	return connectTo(ctx, g.databaseURL(), "--database-url", maxConns, nil)
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
