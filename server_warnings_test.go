package skiplock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
)

// A working client makes the server warn about nothing. Every warning the
// server sends a client it also writes to its log, and a statement on the
// job's path runs hundreds of times a second: the claim pipelines once
// logged two WARNING lines per claim (SET LOCAL outside a transaction
// block). This runs the paths a production client takes (plain, tenant-
// capped and limited pools, checkpointed steps, a snooze, the dead-letter
// table, a workflow, enqueue in bulk) on a pool that records every notice
// its connections receive, and expects no warning among them.
func TestAWorkingClientMakesTheServerWarnNothing(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	pcfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	pcfg.MaxConns = 12
	dbtest.TrimIdle(pcfg)
	var mu sync.Mutex
	var warnings []string
	pcfg.ConnConfig.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		if n.Severity == "WARNING" {
			mu.Lock()
			defer mu.Unlock()
			warnings = append(warnings, n.Message)
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	c, err := skiplock.NewClient(pool, skiplock.Config{PollInterval: 20 * time.Millisecond, Pools: []skiplock.WorkerPool{
		{Queues: []string{"default"}, Concurrency: 4, BatchSize: 10},
		{Queues: []string{"capped"}, Concurrency: 4, BatchSize: 10, TenantCap: 2},
		{Queues: []string{"limited"}, Concurrency: 4, BatchSize: 5},
	}})
	require.NoError(t, err)
	require.NoError(t, c.LimitSet(ctx, skiplock.Limit{Name: "few", Queue: "limited", Concurrency: 3}))
	require.NoError(t, c.LimitSet(ctx, skiplock.Limit{Name: "pace", Queue: "limited", Rate: 1000, Per: time.Second}))

	var mu2 sync.Mutex
	attempts := map[int64]int{}
	ok := func(context.Context, *skiplock.Job[struct{}]) error { return nil }
	require.NoError(t, skiplock.Handle(c, "ok", ok))
	require.NoError(t, skiplock.Handle(c, "paced", ok))
	require.NoError(t, skiplock.Handle(c, "steps", func(ctx context.Context, j *skiplock.Job[struct{}]) error {
		for i := range 2 {
			if _, err := skiplock.Step(ctx, fmt.Sprint("s", i), func(context.Context) (int, error) { return i, nil }); err != nil {
				return err
			}
		}
		return nil
	}))
	require.NoError(t, skiplock.Handle(c, "flaky", func(ctx context.Context, j *skiplock.Job[struct{}]) error {
		mu2.Lock()
		defer mu2.Unlock()
		attempts[j.ID]++
		if attempts[j.ID] == 1 {
			return skiplock.Snooze(10 * time.Millisecond)
		}
		return nil
	}))
	require.NoError(t, skiplock.Handle(c, "doomed", func(context.Context, *skiplock.Job[struct{}]) error {
		return errors.New("always fails")
	}))

	var ps []skiplock.EnqueueParams
	for i := range 40 {
		ps = append(ps,
			skiplock.EnqueueParams{Kind: "ok"},
			skiplock.EnqueueParams{Queue: "capped", Kind: "ok", Tenant: fmt.Sprint("t", i%5)},
			skiplock.EnqueueParams{Queue: "limited", Kind: "paced", LimitWeight: 1 + i%2})
	}
	for range 10 {
		ps = append(ps, skiplock.EnqueueParams{Kind: "steps"}, skiplock.EnqueueParams{Kind: "flaky"})
	}
	ps = append(ps, skiplock.EnqueueParams{Kind: "doomed", MaxAttempts: 1})
	_, err = c.EnqueueMany(ctx, ps)
	require.NoError(t, err)
	_, err = c.EnqueueWorkflow(ctx, skiplock.Workflow{Name: "wf", Tasks: []skiplock.Task{
		{Name: "a", Kind: "ok"}, {Name: "b", Kind: "ok", DependsOn: []string{"a"}}}})
	require.NoError(t, err)

	require.NoError(t, c.Start(ctx))
	require.Eventually(t, func() bool { return countJobs(t, pool, "true") == 0 }, 30*time.Second, 20*time.Millisecond,
		"every job finished")
	require.NoError(t, c.Stop(ctx))
	require.Equal(t, 1, countDead(t, pool), "the doomed job reached the dead-letter table")

	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, warnings, "the server warned")
}
