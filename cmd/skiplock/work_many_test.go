package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
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
	t.Parallel()
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

	addr := freeAddr(t)
	bg := startCLI(ctx, t, "work", "--database-url", a.URL, "--database-url", b.URL,
		"--exec", "cat >/dev/null; sleep 0.05", "--concurrency", "2", "--poll-interval", "100ms",
		"--metrics-addr", addr, "--fleet-metrics")
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
		// skiplock_up is the last read of each database's health views (cached
		// for a second): a read that timed out on a loaded machine reads 0
		// until the next one, so it is waited for with the counters.
		return strings.Contains(body, fmt.Sprintf(`skiplock_process_jobs_completed_total{database=%q} %d`, labels[0], backlog)) &&
			strings.Contains(body, fmt.Sprintf(`skiplock_process_jobs_completed_total{database=%q} %d`, labels[1], few)) &&
			strings.Contains(body, fmt.Sprintf(`skiplock_up{database=%q} 1`, labels[0])) &&
			strings.Contains(body, fmt.Sprintf(`skiplock_up{database=%q} 1`, labels[1]))
	}, 20*time.Second, 50*time.Millisecond, "per-database metrics:\n%s", body)

	bg.terminate(t)
	select {
	case code := <-bg.done:
		errb, _ := os.ReadFile(bg.stderr)
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
	errb, _ := os.ReadFile(bg.stderr)
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
	t.Parallel()
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
	t.Parallel()
	a, b := dbtest.New(t), dbtest.New(t)
	opsExec(t, b, `DROP INDEX skiplock.jobs_ready`)
	code, out, stderr := runCLI(t, "doctor", "--database-url", a.URL, "--database-url", b.URL, "--json")
	require.Equal(t, 3, code, stderr)
	var got doctorManyOut
	decodeJSON(t, out, &got)
	require.False(t, got.OK)
	require.Len(t, got.Databases, 2)
	require.Len(t, got.Databases[0].Checks, 14)
	// A is healthy: it fails only what the server it runs on makes true of
	// every database (autovacuum off server-wide, as an image leaves it).
	serverWide := serverWideFailures(t, a, got.Databases[0].Checks)
	require.ElementsMatch(t, serverWide, got.Databases[0].Failed)
	require.ElementsMatch(t, append(serverWide, "claim_index"), got.Databases[1].Failed)
	require.Contains(t, stderr, got.Databases[1].Database+" ("+strings.Join(got.Databases[1].Failed, ", ")+")")
	if len(serverWide) == 0 {
		require.NotContains(t, stderr, got.Databases[0].Database+" (")
	} else {
		require.Contains(t, stderr, got.Databases[0].Database+" ("+strings.Join(serverWide, ", ")+")")
	}

	code, out, _ = runCLI(t, "doctor", "--database-url", a.URL, "--database-url", b.URL)
	require.Equal(t, 3, code)
	require.Len(t, regexp.MustCompile(`(?m)^database `).FindAllString(out, -1), 2, out)
	require.Contains(t, out, "[FAIL] claim_index: ")
}

// TestManyDatabaseURLsRefused: a command that serves one database refuses
// several --database-url instead of silently using one.
func TestManyDatabaseURLsRefused(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"enqueue", "--kind", "k"}, {"migrate", "up"}, {"queue", "pause", "q"}} {
		code, _, stderr := runCLI(t, append(args, "--database-url", "postgres://127.0.0.1:1/a", "--database-url", "postgres://127.0.0.1:1/b")...)
		require.Equal(t, 2, code, "%v: %s", args, stderr)
		require.Contains(t, stderr, "--database-url: given 2 times; only work, stats, doctor, serve and top", args)
	}
	for _, args := range [][]string{{"top", "--once"}, {"serve"}} {
		code, _, stderr := runCLI(t, append(args, "--database-url", "postgres://127.0.0.1:1/a", "--database-url", "postgres://127.0.0.1:1/a")...)
		require.Equal(t, 2, code, "%v: %s", args, stderr)
		require.Contains(t, stderr, "--database-url: the same URL is given twice", args)
		code, _, stderr = runCLI(t, append(args, "--database-url", "postgres://127.0.0.1:1/a", "--database-url", "postgres://127.0.0.1:1/b",
			"--replica-url", "postgres://127.0.0.1:1/c")...)
		require.Equal(t, 2, code, "%v: %s", args, stderr)
		require.Contains(t, stderr, "--replica-url: not with several --database-url", args)
	}
}

// labelOf is a test database's label: host:port/name.
func labelOf(t *testing.T, db *dbtest.DB) string {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	return fmt.Sprintf("%s:%d/%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
}

// TestTopManyDatabases: `top` over three databases prints a line per
// database, and its figures are the sums of those lines.
func TestTopManyDatabases(t *testing.T) {
	t.Parallel()
	dbs := []*dbtest.DB{dbtest.New(t), dbtest.New(t), dbtest.New(t)}
	args := []string{"top", "--once"}
	setUp := time.Now()
	for i, db := range dbs {
		opsReady(t, db, "mail", i+1, -time.Duration(10*(i+1))*time.Second)
		opsRunning(t, db, "mail", i)
		opsDead(t, db, "mail", "send", 2*i+1, time.Hour, func(int) string { return "boom" })
		opsExec(t, db, `INSERT INTO skiplock.workers (id, hostname, pid, queues, concurrency, running, claimed_total,
			completed_total, failed_total, claim_p99_ms) VALUES ('w1', 'h', 1, '{mail}', 10, $1, 100, 90, 9, $2)`, i, 1.0+float64(i))
		args = append(args, "--database-url", db.URL)
	}
	code, out, stderr := runCLI(t, append(args, "--json")...)
	sinceSetUp := time.Since(setUp).Seconds()
	require.Equal(t, 0, code, stderr)
	require.NotContains(t, out, opsSecret)
	var f topFrame
	decodeJSON(t, out, &f)
	require.Len(t, f.Databases, 3)
	var ready, running, dead, live, claimed, deadLetters int64
	for i, d := range f.Databases {
		require.Equal(t, labelOf(t, dbs[i]), d.Database)
		require.Equal(t, int64(i+1), d.Ready)
		require.Equal(t, int64(i), d.Running)
		require.Equal(t, int64(2*i+1), d.Dead)
		ready, running, dead, live, claimed = ready+d.Ready, running+d.Running, dead+d.Dead, live+d.Workers.Live, claimed+d.Workers.Claimed
		deadLetters += d.DeadLast24h
	}
	require.Len(t, f.Queues, 1)
	require.Equal(t, [3]int64{ready, running, dead}, [3]int64{f.Queues[0].Ready, f.Queues[0].Running, f.Queues[0].Dead}, "the sums are the parts added up")
	require.Equal(t, [3]int64{6, 3, 9}, [3]int64{ready, running, dead})
	// The oldest job was made ready 30 s in the past while the databases
	// were set up; by the time top reads it, it has waited that long more.
	// A fixed ±5 s failed on a loaded CI machine, where the set-up and the
	// command took 6 s.
	age := f.Queues[0].OldestReadyAgeSeconds
	require.GreaterOrEqual(t, age, 29.0, "the oldest wait of any database")
	require.LessOrEqual(t, age, 30+sinceSetUp+1, "the oldest wait of any database")
	require.Equal(t, live, f.Workers.Live)
	require.Equal(t, int64(3), live)
	require.Equal(t, claimed, f.Workers.Claimed)
	require.Equal(t, int64(300), claimed)
	require.Equal(t, 3.0, *f.Workers.ClaimP99MS, "the worst database's claim p99")
	require.Equal(t, deadLetters, f.DeadLetters.Last24h)
	require.Equal(t, int64(9), f.DeadLetters.Total)
	require.Len(t, f.LongRunners, 3)
	for _, r := range f.LongRunners {
		require.NotEmpty(t, r.Database, "a long runner names its database (ids are per database)")
	}
	require.NotEmpty(t, f.VacuumDatabase)

	code, out, stderr = runCLI(t, args...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "DATABASES (3; every figure below adds them up)")
	for _, db := range dbs {
		require.Regexp(t, regexp.QuoteMeta(labelOf(t, db))+`\s+\d+\s+0\s+\d+\s+\d+`, out)
	}
	require.Contains(t, out, "WORKERS  3 live process(es), 3 job(s) running")
	require.Contains(t, out, "DEAD LETTERS  9 kept")
	require.NotContains(t, out, opsSecret)
}

// TestServeManyDatabases: `serve` over three databases adds the overview
// up, scopes a page to one database and labels /metrics by database.
func TestServeManyDatabases(t *testing.T) {
	t.Parallel()
	dbs := []*dbtest.DB{dbtest.New(t), dbtest.New(t), dbtest.New(t)}
	addr := freeAddr(t)
	args := []string{"serve", "--http-addr", addr}
	for i, db := range dbs {
		opsReady(t, db, "mail", i+1, -time.Second)
		args = append(args, "--database-url", db.URL)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bg := startCLI(ctx, t, args...)
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	require.Eventually(t, func() bool { code, _ := get("/readyz"); return code == http.StatusOK }, 20*time.Second, 50*time.Millisecond)

	code, body := get("/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `id="database-table"`)
	require.Regexp(t, `tfoot><tr data-db="">\s*<th>all 3</th><td></td>\s*<td class="num" data-col="ready">6</td>`, body)
	for i, db := range dbs {
		require.Contains(t, body, `data-db="`+labelOf(t, db)+`"`)
		code, page := get("/db/" + url.PathEscape(labelOf(t, db)) + "/jobs")
		require.Equal(t, http.StatusOK, code, page)
		require.Equal(t, i+1, strings.Count(page, `href="/db/`+url.PathEscape(labelOf(t, db))+`/jobs/`), "database %d's jobs only", i)
	}
	require.NotContains(t, body, "postgres://", "no URL (it may hold a password) on the page")
	code, metricsBody := get("/metrics")
	require.Equal(t, http.StatusOK, code)
	for _, db := range dbs {
		require.Contains(t, metricsBody, fmt.Sprintf(`skiplock_up{database=%q} 1`, labelOf(t, db)))
	}
	cancel()
	select {
	case code := <-bg.done:
		errb, _ := os.ReadFile(bg.stderr)
		require.Equal(t, 0, code, "stderr: %s", errb)
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop")
	}
}
