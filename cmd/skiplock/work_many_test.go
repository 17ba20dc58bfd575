package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/health"
)

// TestWorkManyDatabases runs one `skiplock work` over two databases, each
// with its own skiplock schema: a backlog in one does not hold up the
// other (each database has its own slots), every job of both completes
// exactly once, and the log lines say which database they are about.
func TestWorkManyDatabases(t *testing.T) {
	a, b := dbtest.New(t), dbtest.New(t)
	ctx := context.Background()
	enqueue := func(db *dbtest.DB, n int) {
		t.Helper()
		c, err := skiplock.NewClient(db.Pool, skiplock.Config{Schema: db.Schema})
		require.NoError(t, err)
		for range n {
			_, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "k"})
			require.NoError(t, err)
		}
	}
	count := func(pool *pgxpool.Pool, q string) int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, q).Scan(&n))
		return n
	}
	const backlog, few = 120, 10
	enqueue(a, backlog)
	enqueue(b, few)

	// Usage errors first: nothing starts.
	code, _, stderr := runCLI(t, "work", "--database-url", a.URL, "--database-url", a.URL, "--exec", "true")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--database-url: the same URL is given twice")

	outF, err := os.CreateTemp(t.TempDir(), "out")
	require.NoError(t, err)
	errF, err := os.CreateTemp(t.TempDir(), "err")
	require.NoError(t, err)
	done := make(chan int, 1)
	addr := freeAddr(t)
	go func() {
		done <- run(ctx, []string{"work", "--database-url", a.URL, "--database-url", b.URL,
			"--exec", "cat >/dev/null; sleep 0.05", "--concurrency", "2", "--poll-interval", "100ms",
			"--metrics-addr", addr}, outF, errF)
	}()
	require.Eventually(t, func() bool {
		return count(b.Pool, "SELECT count(*) FROM skiplock.jobs_done") == few
	}, 20*time.Second, 20*time.Millisecond, "the small database's jobs complete")
	left := count(a.Pool, "SELECT count(*) FROM skiplock.jobs")
	require.Greater(t, left, backlog/2, "the small database finished while the big one still had most of its backlog")
	require.Eventually(t, func() bool {
		return count(a.Pool, "SELECT count(*) FROM skiplock.jobs") == 0
	}, 60*time.Second, 50*time.Millisecond, "the backlog drains")

	// /metrics: each database's series, labelled.
	labels := make([]string, 2)
	for i, db := range []*dbtest.DB{a, b} {
		cfg, err := pgxpool.ParseConfig(db.URL)
		require.NoError(t, err)
		labels[i] = fmt.Sprintf("%s:%d/%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
	}
	var body string
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		bb, _ := io.ReadAll(resp.Body)
		body = string(bb)
		return strings.Contains(body, fmt.Sprintf(`skiplock_process_jobs_completed_total{database=%q} %d`, labels[0], backlog)) &&
			strings.Contains(body, fmt.Sprintf(`skiplock_process_jobs_completed_total{database=%q} %d`, labels[1], few))
	}, 10*time.Second, 50*time.Millisecond, "per-database metrics:\n%s", body)
	require.Contains(t, body, fmt.Sprintf(`skiplock_up{database=%q} 1`, labels[0]))

	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	select {
	case code := <-done:
		errb, _ := os.ReadFile(errF.Name())
		require.Equal(t, 0, code, "stderr: %s", errb)
	case <-time.After(30 * time.Second):
		t.Fatal("work did not drain and exit after SIGTERM")
	}
	for _, c := range []struct {
		db *dbtest.DB
		n  int
	}{{a, backlog}, {b, few}} {
		require.Equal(t, c.n, count(c.db.Pool, "SELECT count(DISTINCT id) FROM skiplock.jobs_done WHERE attempts = 1"))
		require.Equal(t, c.n, count(c.db.Pool, "SELECT count(*) FROM skiplock.jobs_done"), "each job completed once")
		require.Zero(t, count(c.db.Pool, "SELECT count(*) FROM skiplock.jobs_dead"))
	}
	errb, _ := os.ReadFile(errF.Name())
	for _, db := range []*dbtest.DB{a, b} {
		cfg, err := pgxpool.ParseConfig(db.URL)
		require.NoError(t, err)
		require.Contains(t, string(errb), fmt.Sprintf("database=%s:%d/%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database))
	}
	require.Equal(t, 2, strings.Count(string(errb), "skiplock: worker started"), "one client per database")
	t.Logf("two databases: %d and %d jobs, each completed once; the small one finished with %d of the big one's left", backlog, few, left)
}

// TestStatsManyDatabases: `stats` over two databases prints each one's
// figures and their sums, and the sums equal the parts added up.
func TestStatsManyDatabases(t *testing.T) {
	a, b := dbtest.New(t), dbtest.New(t)
	opsReady(t, a, "mail", 3, -90*time.Second)
	opsRunning(t, a, "mail", 2)
	opsReady(t, b, "mail", 4, -10*time.Second)
	opsReady(t, b, "mail", 1, time.Hour)
	opsReady(t, b, "reports", 2, -time.Second)
	opsDead(t, b, "reports", "build", 1, time.Minute, func(int) string { return "boom" })
	opsExec(t, b, "INSERT INTO skiplock.queues (name, paused) VALUES ('reports', true)")

	code, out, stderr := runCLI(t, "stats", "--database-url", a.URL, "--database-url", b.URL, "--json")
	require.Equal(t, 0, code, stderr)
	require.NotContains(t, out, opsSecret)
	var got statsOut
	decodeJSON(t, out, &got)
	require.Len(t, got.Databases, 2)
	for i, db := range []*dbtest.DB{a, b} {
		cfg, err := pgxpool.ParseConfig(db.URL)
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("%s:%d/%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database), got.Databases[i].Database)
	}
	// The sums equal the parts added up.
	var parts [4]int64
	for _, d := range got.Databases {
		for _, q := range d.Queues {
			parts[0] += q.Ready
			parts[1] += q.Scheduled
			parts[2] += q.Running
			parts[3] += q.Dead
		}
	}
	var sums [4]int64
	for _, q := range got.Queues {
		sums[0] += q.Ready
		sums[1] += q.Scheduled
		sums[2] += q.Running
		sums[3] += q.Dead
	}
	require.Equal(t, parts, sums)
	require.Len(t, got.Queues, 2)
	mail, reports := got.Queues[0], got.Queues[1]
	require.Equal(t, [4]int64{7, 1, 2, 0}, [4]int64{mail.Ready, mail.Scheduled, mail.Running, mail.Dead})
	require.InDelta(t, 90, mail.OldestReadyAgeSeconds, 10, "the oldest wait of either database")
	require.False(t, mail.Paused)
	require.Equal(t, [4]int64{2, 0, 0, 1}, [4]int64{reports.Ready, reports.Scheduled, reports.Running, reports.Dead})
	require.True(t, reports.Paused, "paused in one database")
	require.Equal(t, []health.UnhandledKind{{Queue: "mail", Kind: "k", Ready: 7}, {Queue: "reports", Kind: "k", Ready: 2}},
		zeroAges(got.UnhandledKinds), "summed over the databases")

	code, out, stderr = runCLI(t, "stats", "--database-url", a.URL, "--database-url", b.URL)
	require.Equal(t, 0, code, stderr)
	require.Len(t, regexp.MustCompile(`(?m)^database `).FindAllString(out, -1), 2, out)
	require.Contains(t, out, "all 2 databases")
	require.Contains(t, out, "warning: no live worker handles kind \"k\" in queue mail of ")

	code, _, stderr = runCLI(t, "stats", "--database-url", a.URL, "--database-url", b.URL, "--replica-url", a.URL)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--replica-url")
}

// TestDoctorManyDatabases: `doctor` over two databases checks each, and a
// failure in one fails the run (exit 3), naming that database.
func TestDoctorManyDatabases(t *testing.T) {
	a, b := dbtest.New(t), dbtest.New(t)
	opsExec(t, b, `DROP INDEX skiplock.jobs_ready`)
	code, out, stderr := runCLI(t, "doctor", "--database-url", a.URL, "--database-url", b.URL, "--json")
	require.Equal(t, 3, code, stderr)
	var got doctorManyOut
	decodeJSON(t, out, &got)
	require.False(t, got.OK)
	require.Len(t, got.Databases, 2)
	require.NotContains(t, got.Databases[0].Failed, "claim_index")
	require.Contains(t, got.Databases[1].Failed, "claim_index")
	require.Len(t, got.Databases[0].Checks, 13)
	require.Contains(t, stderr, got.Databases[1].Database+" (")
	require.NotContains(t, stderr, got.Databases[0].Database+" (")

	code, out, _ = runCLI(t, "doctor", "--database-url", a.URL, "--database-url", b.URL)
	require.Equal(t, 3, code)
	require.Len(t, regexp.MustCompile(`(?m)^database `).FindAllString(out, -1), 2, out)
	require.Contains(t, out, "[FAIL] claim_index: ")
}

// TestManyDatabaseURLsRefused: a command that serves one database refuses
// several --database-url instead of silently using one.
func TestManyDatabaseURLsRefused(t *testing.T) {
	for _, args := range [][]string{{"top", "--once"}, {"enqueue", "--kind", "k"}, {"serve"}, {"migrate", "up"}} {
		code, _, stderr := runCLI(t, append(args, "--database-url", "postgres://127.0.0.1:1/a", "--database-url", "postgres://127.0.0.1:1/b")...)
		require.Equal(t, 2, code, "%v: %s", args, stderr)
		require.Contains(t, stderr, "--database-url: given 2 times; only work, stats and doctor", args)
	}
}
