// Command skiplock is the CLI, polyglot worker, dashboard and benchmark of
// the skiplock job queue. Data goes to stdout, logs and progress to stderr.
// Exit codes: 0 ok, 1 runtime error, 2 usage error, 3 check failed.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run executes the CLI in this process and maps errors to exit codes.
func run(ctx context.Context, args []string, stdout, stderr *os.File) int {
	return runIn(ctx, osProcess(), args, stdout, stderr)
}

// runIn is run with the environment and signals of p.
func runIn(ctx context.Context, p process, args []string, stdout, stderr *os.File) int {
	root, g := newCommandTree(p)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	code, usage := 1, false
	var ee *exitError
	if errors.As(err, &ee) {
		code, usage, err = ee.code, ee.usage, ee.err
	} else if isSyntax(err) {
		code, usage = 2, true
	}
	if g.logFormat == "json" {
		// One JSON record, usage included, so that a log pipeline parses
		// every line of stderr to the last.
		attrs := []slog.Attr{slog.Int("exit_code", code)}
		if usage && cmd != nil {
			attrs = append(attrs, slog.String("usage", cmd.UsageString()))
		}
		g.printErrorJSON(stderr, err, attrs)
		return code
	}
	if err != nil {
		g.printError(stderr, err)
	}
	if usage && cmd != nil {
		fmt.Fprint(stderr, cmd.UsageString())
	}
	return code
}

// printErrorJSON is printError under --log-format json: one record at
// error level, the message as printError words it, the fix (if any) in
// "hint", and attrs.
func (g *globals) printErrorJSON(w io.Writer, err error, attrs []slog.Attr) {
	msg := "exit"
	if err != nil {
		msg = errorLine(err)
		if hint := g.migrateHint(err); hint != "" {
			attrs = append(attrs, slog.String("hint", hint))
		}
	}
	g.loggerAt(w, slog.LevelError).LogAttrs(context.Background(), slog.LevelError, "skiplock: "+msg, attrs...)
}

// errorLine is an error's text with exactly one "skiplock:" prefix removed
// from its start and none inside.
func errorLine(err error) string {
	msg := strings.TrimSpace(err.Error())
	for strings.HasPrefix(msg, "skiplock: ") {
		msg = strings.TrimPrefix(msg, "skiplock: ")
	}
	return strings.ReplaceAll(msg, ": skiplock: ", ": ")
}

// printError writes one error line with exactly one "skiplock:" prefix (the
// library's errors carry their own), plus the fix when the error says the
// schema was never migrated.
func (g *globals) printError(w io.Writer, err error) {
	fmt.Fprintln(w, "skiplock:", termSafeLines(errorLine(err)))
	if hint := g.migrateHint(err); hint != "" {
		fmt.Fprintln(w, "skiplock:", hint)
	}
}

// sqlstateRe finds the SQLSTATE the library keeps in an error's text when it
// drops the *pgconn.PgError (to strip row values from its detail).
var sqlstateRe = regexp.MustCompile(`\(SQLSTATE ([0-9A-Z]{5})\)`)

// migrateHint recognises the errors PostgreSQL returns before skiplock's
// schema exists (3F000 invalid_schema_name, 42P01 undefined_table, 42883
// undefined_function, each naming our schema) and says how to fix them.
func (g *globals) migrateHint(err error) string {
	msg := err.Error()
	if strings.Contains(msg, "migrate up") {
		return "" // the error already says it
	}
	code := ""
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		code, msg = pe.Code, pe.Message
	} else if m := sqlstateRe.FindStringSubmatch(msg); m != nil {
		code = m[1]
	}
	switch code {
	case "3F000", "42P01", "42883":
	default:
		return ""
	}
	if !strings.Contains(msg, `"`+g.schema+`"`) && !strings.Contains(msg, g.schema+".") {
		return ""
	}
	cmd := "skiplock migrate up"
	if g.schema != "skiplock" {
		cmd += " --schema " + g.schema
	}
	return fmt.Sprintf("schema %s is not migrated (or is behind this binary): run `%s`", g.schema, cmd)
}
