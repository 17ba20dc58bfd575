package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/pgbouncertest"
)

// The CLI works through a transaction-mode PgBouncer with the URL users
// already have: repeated single enqueues (pgx's default statement cache
// failed here intermittently with 42P05), a COPY bulk load and the
// read-side commands.
func TestCLIThroughPgBouncer(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	b := pgbouncertest.Start(t)
	url := b.URL(t, db.URL)
	for i := range 40 {
		code, out, stderr := runCLI(t, "enqueue", "--database-url", url, "--queue", "q", "--kind", "k",
			"--payload", `{"i":1}`, "--json")
		require.Equal(t, 0, code, "enqueue %d through pgbouncer: %s", i, stderr)
		require.Contains(t, out, `"inserted":true`)
	}
	var lines bytes.Buffer
	for range 500 {
		lines.WriteString(`{"queue":"bulk","kind":"k","payload":{"n":2}}` + "\n")
	}
	file := filepath.Join(t.TempDir(), "jobs.ndjson")
	require.NoError(t, os.WriteFile(file, lines.Bytes(), 0o600))
	for range 2 {
		code, out, stderr := runCLI(t, "enqueue", "--database-url", url, "--file", file, "--batch", "100")
		require.Equal(t, 0, code, stderr)
		require.Contains(t, out, `"inserted":500`)
	}
	require.Equal(t, int64(40), opsCount(t, db, `SELECT count(*) FROM skiplock.jobs WHERE queue = 'q'`))
	require.Equal(t, int64(1000), opsCount(t, db, `SELECT count(*) FROM skiplock.jobs WHERE queue = 'bulk'`))

	for _, args := range [][]string{
		{"stats", "--json"}, {"dlq", "list", "--json"}, {"schedule", "list", "--json"},
		{"top", "--once"}, {"migrate", "status"}, {"queue", "pause", "q"}, {"queue", "resume", "q"},
	} {
		for range 3 {
			code, _, stderr := runCLI(t, append(args, "--database-url", url)...)
			require.Equal(t, 0, code, "%v through pgbouncer: %s", args, stderr)
		}
	}
}

// A worker behind the pooler with no --listen-url finds the pooler, says
// once at warn level that it polls and which flag fixes it, and drains
// every job; its scheduler fires a schedule added through the pooler too.
func TestWorkThroughPgBouncerPollOnly(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	b := pgbouncertest.Start(t)
	url := b.URL(t, db.URL)
	ctx := context.Background()
	const n = 300
	opsExec(t, db, `INSERT INTO skiplock.jobs (queue, kind, payload) SELECT 'default', 'k', '{}' FROM generate_series(1, $1)`, n)
	code, _, stderr := runCLI(t, "schedule", "add", "tick", "--every", "1s", "--queue", "default", "--kind", "tick",
		"--database-url", url)
	require.Equal(t, 0, code, stderr)

	kinds := filepath.Join(t.TempDir(), "kinds")
	bg := startCLI(ctx, t, "work", "--database-url", url, "--exec", `echo "$SKIPLOCK_JOB_KIND" >> `+kinds,
		"--poll-interval", "100ms", "--concurrency", "4")
	ticked := func() bool {
		data, _ := os.ReadFile(kinds)
		return strings.Contains(string(data), "tick")
	}
	require.Eventually(t, func() bool {
		return opsCount(t, db, `SELECT count(*) FROM skiplock.jobs WHERE kind = 'k'`) == 0 && ticked()
	}, 60*time.Second, 100*time.Millisecond, "the worker did not drain and fire the schedule through pgbouncer")
	data, err := os.ReadFile(kinds)
	require.NoError(t, err)
	ran := 0
	for _, line := range strings.Split(string(data), "\n") {
		if line == "k" {
			ran++
		}
	}
	require.Equal(t, n, ran, "every job ran once")

	bg.terminate(t)
	select {
	case code := <-bg.done:
		require.Equal(t, 0, code)
	case <-time.After(30 * time.Second):
		t.Fatal("work did not exit after SIGTERM")
	}
	logs, _ := os.ReadFile(bg.stderr)
	require.Equal(t, 1, strings.Count(string(logs), "POLLING ONLY"), "said once: %s", logs)
	require.Contains(t, string(logs), "level=WARN")
	require.Contains(t, string(logs), "--listen-url")
	require.NotContains(t, string(logs), "SQLSTATE", "no statement failed through the pooler")
}

// The dashboard's pages read through a transaction-mode PgBouncer.
func TestServeThroughPgBouncer(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	b := pgbouncertest.Start(t)
	var id int64
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT skiplock.enqueue(queue => 'default', kind => 'k', payload => '{}'::jsonb)`).Scan(&id))
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	bg := startCLI(ctx, t, "serve", "--database-url", b.URL(t, db.URL), "--http-addr", addr)
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	require.Eventually(t, func() bool { c, _ := get("/healthz"); return c == http.StatusOK },
		10*time.Second, 20*time.Millisecond, "serve did not come up")
	for range 3 {
		for _, path := range []string{"/", "/overview/panels", "/api/series", "/queues", "/jobs",
			"/jobs/" + strconv.FormatInt(id, 10), "/dead", "/schedules", "/workers", "/health", "/readyz"} {
			code, body := get(path)
			require.Equal(t, http.StatusOK, code, "%s through pgbouncer: %s", path, body)
			require.NotContains(t, body, "SQLSTATE", path)
		}
	}
	cancel()
	select {
	case code := <-bg.done:
		require.Equal(t, 0, code)
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop")
	}
}

// skiplock dev's client logs errors only, but never hides that its
// workers poll behind a pooler.
func TestDevClientLogShowsPolling(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(devClientLog{slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})}).With("pool", "p")
	log.Warn("job failed; retrying")
	log.Info("worker started")
	require.Empty(t, buf.String())
	log.Warn("skiplock: pooler: POLLING ONLY, set --listen-url")
	log.Error("skiplock: dead-lettered")
	require.Contains(t, buf.String(), "POLLING ONLY")
	require.Contains(t, buf.String(), "dead-lettered")
	require.Contains(t, buf.String(), "pool=p")
	require.NotContains(t, buf.String(), "retrying")
}

// skiplock work behind the pooler with --listen-url: LISTEN runs on the
// direct URL, so with a one-hour poll interval jobs still arrive.
func TestWorkThroughPgBouncerWithListenURL(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	b := pgbouncertest.Start(t)
	ctx := context.Background()
	addr := freeAddr(t)
	bg := startCLIEnv(ctx, t, map[string]string{"SKIPLOCK_LISTEN_URL": db.URL}, // the env form of --listen-url
		"work", "--database-url", b.URL(t, db.URL), "--exec", "cat >/dev/null",
		"--poll-interval", "1h", "--metrics-addr", addr)
	scrape := func() string {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body)
	}
	require.Eventually(t, func() bool { return strings.Contains(scrape(), "skiplock_process_listener_up 1") },
		20*time.Second, 20*time.Millisecond, "the listener on the direct URL never came up")
	for range 5 { // through the pooler: the enqueue's NOTIFY goes that way too
		code, _, stderr := runCLI(t, "enqueue", "--database-url", b.URL(t, db.URL), "--kind", "k")
		require.Equal(t, 0, code, stderr)
	}
	require.Eventually(t, func() bool { return opsCount(t, db, `SELECT count(*) FROM skiplock.jobs`) == 0 },
		30*time.Second, 20*time.Millisecond, "jobs announced by NOTIFY were not picked up (poll interval 1h)")

	bg.terminate(t)
	select {
	case code := <-bg.done:
		require.Equal(t, 0, code)
	case <-time.After(30 * time.Second):
		t.Fatal("work did not exit after SIGTERM")
	}
	logs, _ := os.ReadFile(bg.stderr)
	require.NotContains(t, string(logs), "POLLING ONLY", "%s", logs)
	require.NotContains(t, string(logs), "SQLSTATE", "%s", logs)
}

// skiplock work over two databases behind the pooler, with --listen-url
// once per --database-url: each database LISTENs on its own direct URL,
// so with a one-hour poll interval both databases' jobs still arrive.
// Counts that do not match are a usage error naming --listen-url.
func TestWorkManyDatabasesThroughPgBouncerWithListenURLs(t *testing.T) {
	t.Parallel()
	dbs := []*dbtest.DB{dbtest.New(t), dbtest.New(t)}
	b := pgbouncertest.Start(t)
	ctx := context.Background()

	pooled := []string{b.URL(t, dbs[0].URL), b.URL(t, dbs[1].URL)}
	for _, c := range []struct {
		listens []string
		want    string
	}{
		{[]string{dbs[0].URL}, "--listen-url: given 1 times for 2 --database-url"},
		{[]string{dbs[0].URL, dbs[1].URL, dbs[1].URL}, "--listen-url: given 3 times for 2 --database-url"},
		{[]string{dbs[0].URL, "postgres://%zz"}, "--listen-url: the one for --database-url number 2"},
	} {
		args := []string{"work", "--exec", "true", "--database-url", pooled[0], "--database-url", pooled[1]}
		for _, l := range c.listens {
			args = append(args, "--listen-url", l)
		}
		code, _, stderr := runCLI(t, args...)
		require.Equal(t, 2, code, stderr)
		require.Contains(t, stderr, c.want)
	}
	code, _, stderr := runCLIEnv(t, map[string]string{"SKIPLOCK_LISTEN_URL": dbs[0].URL}, "work", "--exec", "true", "--database-url", pooled[0], "--database-url", pooled[1])
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, "SKIPLOCK_LISTEN_URL: not with several --database-url")

	addr := freeAddr(t)
	bg := startCLI(ctx, t, "work", "--exec", "cat >/dev/null", "--poll-interval", "1h", "--metrics-addr", addr,
		"--database-url", pooled[0], "--database-url", pooled[1],
		"--listen-url", dbs[0].URL, "--listen-url", dbs[1].URL)
	listenersUp := regexp.MustCompile(`(?m)^skiplock_process_listener_up\{database="[^"]+"\} 1$`)
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return len(listenersUp.FindAllString(string(body), -1)) == 2
	}, 20*time.Second, 20*time.Millisecond, "both databases' listeners on their direct URLs")
	for i := range dbs {
		for range 3 { // through the pooler: the NOTIFY goes that way too
			code, _, stderr := runCLI(t, "enqueue", "--database-url", pooled[i], "--kind", "k")
			require.Equal(t, 0, code, stderr)
		}
	}
	for _, db := range dbs {
		require.Eventually(t, func() bool { return opsCount(t, db, `SELECT count(*) FROM skiplock.jobs`) == 0 },
			30*time.Second, 20*time.Millisecond, "jobs announced by NOTIFY were not picked up (poll interval 1h)")
		require.EqualValues(t, 3, opsCount(t, db, `SELECT count(*) FROM skiplock.jobs_done`))
	}
	bg.terminate(t)
	select {
	case code := <-bg.done:
		require.Equal(t, 0, code)
	case <-time.After(30 * time.Second):
		t.Fatal("work did not exit after SIGTERM")
	}
	logs, _ := os.ReadFile(bg.stderr)
	require.NotContains(t, string(logs), "POLLING ONLY", "%s", logs)
}
