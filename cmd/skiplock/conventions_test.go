package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/health"
	"github.com/skiplock/skiplock/internal/migrations"
)

// requireOnePrefix checks every line of stderr that carries "skiplock:"
// carries it once, at the start.
func requireOnePrefix(t *testing.T, stderr string) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if n := strings.Count(line, "skiplock:"); n > 0 {
			require.True(t, strings.HasPrefix(line, "skiplock: "), "prefix not at the start: %q", line)
			require.Equal(t, 1, n, "one skiplock: prefix per line: %q", line)
		}
	}
}

// Unknown subcommands and arguments are usage errors: exit 2, the error
// naming what was wrong, then the command's usage. None needs a database.
func TestUnknownCommandsExit2WithUsage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"queue", "bogus"}, `unknown command "bogus" for "skiplock queue"`},
		{[]string{"migrate", "bogus"}, `unknown command "bogus" for "skiplock migrate"`},
		{[]string{"dlq", "show", "5"}, `unknown command "show" for "skiplock dlq"`},
		{[]string{"schedule", "bogus"}, `unknown command "bogus" for "skiplock schedule"`},
		{[]string{"bogus"}, `unknown command "bogus" for "skiplock"`},
		{[]string{"stats", "extra"}, `unknown command "extra"`},
		{[]string{"queue", "pause", "a", "b"}, "QUEUE: exactly one expected"},
		{[]string{"queue", "pause"}, "QUEUE: required"},
		{[]string{"stats", "--nope"}, "--nope"},
	} {
		code, out, stderr := runCLI(t, c.args...)
		require.Equal(t, 2, code, "%v: %s", c.args, stderr)
		require.Empty(t, out, c.args)
		require.True(t, strings.HasPrefix(stderr, "skiplock: "), "%v: %s", c.args, stderr)
		require.Contains(t, stderr, c.want, c.args)
		require.Contains(t, stderr, "Usage:", "%v: the usage follows the error", c.args)
		requireOnePrefix(t, stderr)
	}

	// A bare group asks for its help: help on stdout, exit 0.
	code, out, stderr := runCLI(t, "queue")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "Available Commands")
	require.Contains(t, out, "pause")
}

func TestLogFlagsAreValidated(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		env  [2]string
		flag string
	}{
		{[]string{"--log-level", "verbose"}, [2]string{}, "--log-level"},
		{nil, [2]string{"SKIPLOCK_LOG_LEVEL", "verbose"}, "SKIPLOCK_LOG_LEVEL"},
		{[]string{"--log-format", "xml"}, [2]string{}, "--log-format"},
		{nil, [2]string{"SKIPLOCK_LOG_FORMAT", "logfmt"}, "SKIPLOCK_LOG_FORMAT"},
	} {
		t.Run(c.flag, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{}
			if c.env[0] != "" {
				env[c.env[0]] = c.env[1]
			}
			code, out, stderr := runCLIEnv(t, env, append(c.args, "migrate", "sql")...)
			require.Equal(t, 2, code, stderr)
			require.Empty(t, out, "nothing ran")
			require.Contains(t, stderr, c.flag)
			requireOnePrefix(t, stderr)
		})
	}
	code, out, stderr := runCLI(t, "--log-level", "WARN", "--log-format", "json", "migrate", "sql")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "schema_migrations")
}

func TestLoggerFormat(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	g := &globals{logLevel: "debug", logFormat: "json"}
	g.logger(&buf).Debug("skiplock: job failed", "job_id", 7)
	var rec map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &rec), buf.String())
	require.Equal(t, "DEBUG", rec["level"])
	require.Equal(t, "skiplock: job failed", rec["msg"])
	require.Equal(t, float64(7), rec["job_id"])

	buf.Reset()
	g = &globals{logLevel: "warn", logFormat: "text"}
	g.logger(&buf).Info("hidden")
	g.logger(&buf).Warn("shown", "job_id", 7)
	require.NotContains(t, buf.String(), "hidden")
	require.Contains(t, buf.String(), "level=WARN msg=shown job_id=7")
}

// skiplock work --log-format json: every line the worker logs on stderr is a
// JSON object (for log pipelines), from start to drain.
func TestWorkLogFormatJSON(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	bg := startCLI(context.Background(), t, "work", "--database-url", db.URL, "--exec", "true",
		"--log-format", "json", "--metrics-addr", freeAddr(t))
	// The metrics server logs once it is up, after the signal handler.
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(bg.stderr)
		return len(b) > 0
	}, 20*time.Second, 20*time.Millisecond)
	bg.terminate(t)
	select {
	case code := <-bg.done:
		require.Equal(t, 0, code)
	case <-time.After(30 * time.Second):
		t.Fatal("work did not drain after SIGTERM")
	}
	b, _ := os.ReadFile(bg.stderr)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	require.GreaterOrEqual(t, len(lines), 2, "started and draining: %s", b)
	for _, line := range lines {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec), "not JSON: %q", line)
		require.Contains(t, rec, "level")
		require.Contains(t, rec, "msg")
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	code, out, stderr := runCLI(t, "--version")
	require.Equal(t, 0, code, stderr)
	require.True(t, strings.HasPrefix(out, "skiplock "), out)
	require.Contains(t, out, "go1.")

	bi := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123"},
		{Key: "vcs.time", Value: "2026-11-23T10:00:00Z"},
		{Key: "vcs.modified", Value: "true"},
	}}
	require.Equal(t, "v1.2.3 (commit 0123456789ab, 2026-11-23T10:00:00Z, dirty) go1.26.0", describeBuild(bi))
	bi = &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}}
	require.Equal(t, "(devel) go1.26.0", describeBuild(bi))
}

// Before the first migration, errors say so and name the fix, with one
// prefix; they are runtime errors (exit 1), not usage errors.
func TestNotMigratedHint(t *testing.T) {
	t.Parallel()
	db := dbtest.NewEmpty(t)
	for _, c := range []struct {
		args []string
		fix  string
	}{
		{[]string{"enqueue", "--kind", "k"}, "run `skiplock migrate up`"},
		{[]string{"schedule", "list"}, "run `skiplock migrate up`"},
		{[]string{"stats"}, "`skiplock migrate up`"},
		{[]string{"queue", "pause", "q"}, "`skiplock migrate up`"},
		{[]string{"--schema", "other", "schedule", "list"}, "run `skiplock migrate up --schema other`"},
	} {
		code, out, stderr := runCLI(t, append(c.args, "--database-url", db.URL)...)
		require.Equal(t, 1, code, "%v: %s", c.args, stderr)
		require.Empty(t, out)
		require.Contains(t, stderr, c.fix, c.args)
		requireOnePrefix(t, stderr)
	}
}

// Pausing a queue nothing has seen works (a queue may be paused before its
// first job) but warns on stderr, naming it, in case it is a typo.
func TestQueuePauseUnseenWarns(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	paused := func(q string) bool {
		return opsCount(t, db, `SELECT count(*) FROM skiplock.queues WHERE name = $1 AND paused`, q) == 1
	}
	code, out, stderr := runCLI(t, "queue", "pause", "nosuch", "--database-url", db.URL)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "queue nosuch paused")
	require.Contains(t, stderr, `warning: queue "nosuch" has no jobs`)
	requireOnePrefix(t, stderr)
	require.True(t, paused("nosuch"))

	opsReady(t, db, "mail", 1, time.Hour)
	opsDead(t, db, "reports", "build", 1, time.Minute, func(int) string { return "boom" })
	for _, q := range []string{"mail", "reports", "nosuch"} {
		code, _, stderr = runCLI(t, "queue", "pause", q, "--database-url", db.URL)
		require.Equal(t, 0, code, stderr)
		require.NotContains(t, stderr, "warning", q)
		require.True(t, paused(q))
	}
	code, _, stderr = runCLI(t, "queue", "resume", "other", "--database-url", db.URL)
	require.Equal(t, 0, code, stderr)
	require.Empty(t, stderr, "resuming is harmless: no warning")
}

// A team that applies `migrate sql` with its own tool (here psql, as goose,
// golang-migrate or atlas would run it) ends with a schema the CLI calls
// migrated: status all applied, up a no-op, doctor's schema check passes.
func TestMigrateSQLAppliedByPsql(t *testing.T) {
	t.Parallel()
	db := dbtest.NewEmpty(t)
	code, script, stderr := runCLI(t, "--schema", "ecosql", "migrate", "sql")
	require.Equal(t, 0, code, stderr)
	if psql, err := exec.LookPath("psql"); err == nil {
		cmd := exec.Command(psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "--single-transaction", "-o", "/dev/null", db.URL)
		cmd.Stdin = strings.NewReader(script)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
	} else {
		t.Log("psql not on PATH: applying the script over pgx")
		_, err := db.Pool.Exec(context.Background(), script)
		require.NoError(t, err)
	}

	code, out, stderr := runCLI(t, "--schema", "ecosql", "migrate", "status", "--check", "--json", "--database-url", db.URL)
	require.Equal(t, 0, code, stderr)
	var st struct{ Pending int }
	decodeJSON(t, out, &st)
	require.Equal(t, 0, st.Pending)

	code, out, stderr = runCLI(t, "--schema", "ecosql", "migrate", "up", "--json", "--database-url", db.URL)
	require.Equal(t, 0, code, stderr)
	require.JSONEq(t, `{"schema":"ecosql","applied":[]}`, out)

	code, out, stderr = runCLI(t, "--schema", "ecosql", "doctor", "--json", "--database-url", db.URL)
	require.Contains(t, []int{0, 3}, code, stderr)
	var d doctorOut
	decodeJSON(t, out, &d)
	var schema *health.Check
	for i := range d.Checks {
		if d.Checks[i].Name == "schema" {
			schema = &d.Checks[i]
		}
	}
	require.NotNil(t, schema, out)
	require.Equal(t, health.StatusOK, schema.Status, schema.Figure)

	// And it works: the SQL enqueue function of the exported schema.
	var id int64
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT ecosql.enqueue(queue => 'q', kind => 'k')`).Scan(&id))
	require.Positive(t, id)
}

// A schema built by an export that did not record its versions: up fails
// (the tables exist) and says how to get out.
func TestMigrateUpOverUnrecordedSchema(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	opsExec(t, db, `DELETE FROM skiplock.schema_migrations`)
	code, _, stderr := runCLI(t, "migrate", "up", "--database-url", db.URL)
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stderr, "without their recorded versions")
	require.Contains(t, stderr, "docs/migrations.md")
	requireOnePrefix(t, stderr)
}

// migrate up --to a version from 017 on below the latest is a usage error
// that names the version and the way there, before connecting; such a
// version is reached by migrate down, and migrate up goes on from it. The up
// script to it is refused alike.
func TestMigrateUpToAVersionWithoutItsFunctions(t *testing.T) {
	t.Parallel()
	latest := migrations.Latest()
	below := latest - 1
	code, _, stderr := runCLI(t, "migrate", "up", "--to", strconv.Itoa(below), "--database-url", "postgres://nobody@127.0.0.1:1/none")
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, fmt.Sprintf("--to: migrations: target: cannot go up to version %d:", below))
	require.Contains(t, stderr, fmt.Sprintf("this binary carries the functions of version %d: migrate to %d, or down from it", latest, latest))
	requireOnePrefix(t, stderr)
	code, _, stderr = runCLI(t, "migrate", "sql", "--to", strconv.Itoa(migrations.FunctionFilesSince))
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, fmt.Sprintf("--to: migrations: target: cannot go up to version %d:", migrations.FunctionFilesSince))

	db := dbtest.New(t)
	code, out, stderr := runCLI(t, "migrate", "down", "--to", strconv.Itoa(below), "--json", "--database-url", db.URL)
	require.Equal(t, 0, code, stderr)
	require.JSONEq(t, fmt.Sprintf(`{"schema":"skiplock","reverted":[%d]}`, latest), out)
	code, out, stderr = runCLI(t, "migrate", "up", "--json", "--database-url", db.URL)
	require.Equal(t, 0, code, stderr)
	require.JSONEq(t, fmt.Sprintf(`{"schema":"skiplock","applied":[%d]}`, latest), out)
}

// skiplock work keeps retrying on a schema that is not migrated yet (a deploy
// may migrate while workers start) but says so once, with the fix.
func TestWarnNotMigrated(t *testing.T) {
	t.Parallel()
	g := testGlobals()
	var buf bytes.Buffer
	g.warnNotMigrated(context.Background(), dbtest.NewEmpty(t).Pool, g.logger(&buf))
	require.Contains(t, buf.String(), "schema is not fully migrated")
	require.Contains(t, buf.String(), `fix="skiplock migrate up"`)

	buf.Reset()
	g.warnNotMigrated(context.Background(), dbtest.New(t).Pool, g.logger(&buf))
	require.Empty(t, buf.String())
}
