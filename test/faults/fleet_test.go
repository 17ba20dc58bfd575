package faults

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/devdb"
)

// TestFleetOverThreeClusters runs one `skiplock work` process over three
// local clusters, each with its own skiplock schema, while they fail one at
// a time: the third is down when the process starts, and the first crashes
// (immediate) mid-run. The databases that answer are served throughout; a
// database that comes back is served without a restart of the process; every
// job of every database completes exactly once.
func TestFleetOverThreeClusters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if _, err := devdb.BinDir(); errors.Is(err, devdb.ErrNoServer) {
		t.Skip("no PostgreSQL server binaries for a private cluster:", err)
	}
	type shard struct {
		c        *devdb.Cluster
		pool     *pgxpool.Pool
		client   *skiplock.Client
		enqueued int
	}
	shards := make([]*shard, 3)
	for i := range shards {
		c, err := devdb.Start(ctx, devdb.Options{Settings: failoverSettings})
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Remove() })
		cfg, err := pgxpool.ParseConfig(c.URL("postgres"))
		require.NoError(t, err)
		cfg.ConnConfig.ConnectTimeout = 2 * time.Second
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		_, err = skiplock.Migrate(ctx, pool, "skiplock")
		require.NoError(t, err)
		client, err := skiplock.NewClient(pool, skiplock.Config{})
		require.NoError(t, err)
		shards[i] = &shard{c: c, pool: pool, client: client}
	}
	enqueue := func(s *shard, n int) {
		t.Helper()
		for range n {
			_, err := s.client.Enqueue(ctx, skiplock.EnqueueParams{Kind: "job"})
			require.NoError(t, err)
		}
		s.enqueued += n
	}
	count := func(s *shard, q string) (int, error) {
		var n int
		qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		err := s.pool.QueryRow(qctx, q).Scan(&n)
		return n, err
	}
	drained := func(s *shard) bool {
		n, err := count(s, "SELECT count(*) FROM skiplock.jobs")
		return err == nil && n == 0
	}
	a, b, c := shards[0], shards[1], shards[2]
	for _, s := range shards {
		enqueue(s, 20)
	}
	require.NoError(t, c.c.Stop(ctx)) // down before the fleet starts

	e := &env{t: t, owners: map[string]func(string) bool{}, gen: map[string]int{}, logDir: t.TempDir()}
	t.Cleanup(func() {
		for _, p := range e.procs {
			if !p.exited() {
				p.signal(syscall.SIGKILL)
				p.wait(10 * time.Second)
			}
			if t.Failed() {
				t.Logf("---- log of %s ----\n%s", p.name, tail(p.logText(), 4000))
			}
		}
	})
	args := []string{program(t, "skiplock"), "work", "--exec", "cat >/dev/null; sleep 0.02", "--concurrency", "4",
		"--poll-interval", "200ms", "--lease", "2s", "--drain-timeout", "10s"}
	for _, s := range shards {
		args = append(args, "--database-url", s.c.URL("postgres"))
	}
	w := e.start("fleet", "fleet", "fleet", args)

	waitFor(t, 60*time.Second, "the two databases that answer to drain", func() bool { return drained(a) && drained(b) })
	require.NoError(t, c.c.Restart(ctx))
	waitFor(t, 60*time.Second, "the database that was down at start to drain once it answers", func() bool { return drained(c) })

	// The first database crashes: the others keep being served meanwhile.
	require.NoError(t, a.c.Crash(ctx))
	crashedAt := time.Now()
	enqueue(b, 20)
	enqueue(c, 20)
	waitFor(t, 30*time.Second, "the others to drain while the first is down", func() bool { return drained(b) && drained(c) })
	servedWhileDown := time.Since(crashedAt)
	require.NoError(t, a.c.Restart(ctx))
	a.pool.Reset()
	enqueue(a, 20)
	waitFor(t, 30*time.Second, "the first to drain after it came back", func() bool { return drained(a) })

	require.False(t, w.exited(), "the fleet died: %s", tail(w.logText(), 2000))
	w.signal(syscall.SIGTERM)
	require.True(t, w.wait(20*time.Second), "the fleet did not drain")
	require.NoError(t, w.err)
	for i, s := range shards {
		done, err := count(s, "SELECT count(*) FROM skiplock.jobs_done")
		require.NoError(t, err)
		distinct, err := count(s, "SELECT count(DISTINCT id) FROM skiplock.jobs_done")
		require.NoError(t, err)
		dead, err := count(s, "SELECT count(*) FROM skiplock.jobs_dead")
		require.NoError(t, err)
		require.Equal(t, s.enqueued, done, "database %d: every job completed", i+1)
		require.Equal(t, done, distinct, "database %d: no job completed twice", i+1)
		require.Zero(t, dead, "database %d", i+1)
	}
	log := w.logText()
	require.Contains(t, log, "database unreachable at start")
	require.Equal(t, 3, strings.Count(log, "skiplock: worker started"), "one client per database")
	t.Logf("fleet over 3 clusters: %d, %d and %d jobs completed once each; one cluster down at start, one crashed (the other two drained %s after the crash)",
		a.enqueued, b.enqueued, c.enqueued, servedWhileDown.Round(time.Millisecond))
}
