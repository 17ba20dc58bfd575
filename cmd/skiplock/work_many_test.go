package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
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
	code, _, stderr = runCLI(t, "work", "--database-url", a.URL, "--database-url", b.URL, "--exec", "true", "--metrics-addr", "127.0.0.1:0")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--metrics-addr")

	outF, err := os.CreateTemp(t.TempDir(), "out")
	require.NoError(t, err)
	errF, err := os.CreateTemp(t.TempDir(), "err")
	require.NoError(t, err)
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"work", "--database-url", a.URL, "--database-url", b.URL,
			"--exec", "cat >/dev/null; sleep 0.05", "--concurrency", "2", "--poll-interval", "100ms"}, outF, errF)
	}()
	require.Eventually(t, func() bool {
		return count(b.Pool, "SELECT count(*) FROM skiplock.jobs_done") == few
	}, 20*time.Second, 20*time.Millisecond, "the small database's jobs complete")
	left := count(a.Pool, "SELECT count(*) FROM skiplock.jobs")
	require.Greater(t, left, backlog/2, "the small database finished while the big one still had most of its backlog")
	require.Eventually(t, func() bool {
		return count(a.Pool, "SELECT count(*) FROM skiplock.jobs") == 0
	}, 60*time.Second, 50*time.Millisecond, "the backlog drains")

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
