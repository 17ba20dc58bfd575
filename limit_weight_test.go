package skiplock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/store"
)

// A weight out of 1..MaxLimitWeight is refused naming limit_weight, alone
// and in a bulk enqueue, and nothing is written; 0 means 1.
func TestLimitWeightValidationNamesTheField(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{Logger: quietLogger()})
	for _, w := range []int{-1, skiplock.MaxLimitWeight + 1} {
		_, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "k", LimitWeight: w})
		var fe *skiplock.FieldError
		require.ErrorAs(t, err, &fe, "weight %d", w)
		require.Equal(t, "limit_weight", fe.Field)
		require.ErrorIs(t, err, skiplock.ErrInvalidJob)
		_, err = c.EnqueueMany(ctx, []skiplock.EnqueueParams{{Kind: "k"}, {Kind: "k", LimitWeight: w}})
		require.ErrorAs(t, err, &fe)
		require.Equal(t, "jobs[1].limit_weight", fe.Field)
	}
	// The SQL entry point refuses the same, naming the same field.
	_, err := db.Pool.Exec(ctx, `SELECT skiplock.enqueue(queue => 'q', kind => 'k', limit_weight => 0)`)
	require.ErrorContains(t, err, "skiplock: limit_weight: must be between 1 and 1000000")
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM skiplock.jobs`).Scan(&n))
	require.Zero(t, n, "nothing written")

	// Stored: NULL for 0 and 1 (weight 1), the weight otherwise, through
	// every enqueue path (one, COPY, the idempotent path, SQL).
	_, err = c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "k", LimitWeight: 1})
	require.NoError(t, err)
	_, err = c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "k", LimitWeight: 5})
	require.NoError(t, err)
	_, err = c.EnqueueMany(ctx, []skiplock.EnqueueParams{{Kind: "k"}, {Kind: "k", LimitWeight: 6},
		{Kind: "k", LimitWeight: 7, UniqueKey: "u"}})
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `SELECT skiplock.enqueue(queue => 'default', kind => 'k', limit_weight => 8)`)
	require.NoError(t, err)
	rows, err := db.Pool.Query(ctx, `SELECT coalesce(limit_weight, 0) FROM skiplock.jobs ORDER BY id`)
	require.NoError(t, err)
	var got []int
	for rows.Next() {
		var w int
		require.NoError(t, rows.Scan(&w))
		got = append(got, w)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []int{0, 5, 0, 6, 7, 8}, got)
}

// Two clients drain weighted jobs under a rate limit of 10 per second: in
// no one-second window do the recorded starts weigh more than 10, each
// start is recorded with its job's weight, the limit binds, and a job
// heavier than the rate never runs (LimitList reports it).
func TestWeightedRateLimitIsNeverExceeded(t *testing.T) {
	skipInShort(t, "runs for seconds of wall time")
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	admin := schedClient(t, db.URL, skiplock.Config{Logger: quietLogger()})
	require.NoError(t, admin.LimitSet(ctx, skiplock.Limit{Name: "api", Kind: "call", Rate: 10, Per: time.Second}))
	const calls = 24
	total := 0
	var ps []skiplock.EnqueueParams
	for i := 0; i < calls; i++ {
		w := 1 + i%4 // 1, 2, 3, 4: 60 units, at least 6 windows
		total += w
		ps = append(ps, skiplock.EnqueueParams{Kind: "call", LimitWeight: w})
	}
	ps = append(ps, skiplock.EnqueueParams{Kind: "call", LimitWeight: 11, Priority: 5}) // never fits
	_, err := admin.EnqueueMany(ctx, ps)
	require.NoError(t, err)

	var done atomic.Int64
	var mu sync.Mutex
	runs := map[int64]int{}
	var clients []*skiplock.Client
	for i := 0; i < 2; i++ {
		c := schedClient(t, db.URL, skiplock.Config{Logger: quietLogger(), PollInterval: 100 * time.Millisecond,
			Pools: []skiplock.WorkerPool{{Queues: []string{"default"}, Concurrency: 8, BatchSize: 10}}})
		require.NoError(t, skiplock.Handle(c, "call", func(ctx context.Context, j *skiplock.Job[struct{}]) error {
			mu.Lock()
			runs[j.ID]++
			mu.Unlock()
			done.Add(1)
			return nil
		}))
		clients = append(clients, c)
	}
	start := time.Now()
	for _, c := range clients {
		require.NoError(t, c.Start(ctx))
	}
	require.Eventually(t, func() bool { return done.Load() == calls }, 30*time.Second, 20*time.Millisecond)
	elapsed := time.Since(start)
	for _, c := range clients {
		require.NoError(t, c.Stop(ctx))
	}
	t.Logf("%d weighted jobs (%d units) in %v", calls, total, elapsed.Round(time.Millisecond))
	require.Greater(t, elapsed, 4*time.Second, "60 units at 10/s take over 5 s: the limit must bind")
	require.Len(t, runs, calls)
	for id, n := range runs {
		require.Equal(t, 1, n, "job %d ran %d times", id, n)
	}

	var recorded, worst int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT sum(weight) FROM skiplock.limit_starts`).Scan(&recorded))
	require.Equal(t, total, recorded, "each start recorded with its job's weight")
	require.NoError(t, db.Pool.QueryRow(ctx, `
		SELECT max((SELECT sum(o.weight) FROM skiplock.limit_starts AS o
		            WHERE o.name = s.name AND o.at > s.at - interval '1 second' AND o.at <= s.at))
		FROM skiplock.limit_starts AS s`).Scan(&worst))
	t.Logf("heaviest one-second window: %d of 10", worst)
	require.LessOrEqual(t, worst, 10, "a window weighs more than the rate")
	require.GreaterOrEqual(t, worst, 8, "the limit binds near its rate")

	var heavy int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM skiplock.jobs WHERE state = 'ready' AND limit_weight = 11`).Scan(&heavy))
	require.Equal(t, 1, heavy, "heavier than the rate: never started")
	ls, err := admin.LimitList(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), ls[0].TooHeavy)
}

// A job's weight survives what a job goes through: a failed attempt and
// its retry, the move to the dead-letter table, JobRetry back from it, the
// dead-letter replay, and a completed job's retry from the history.
func TestLimitWeightSurvivesRetryAndDeadLetter(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{Logger: quietLogger()})
	var fail atomic.Bool
	fail.Store(true)
	require.NoError(t, skiplock.Handle(c, "w", func(ctx context.Context, j *skiplock.Job[struct{}]) error {
		if fail.Load() {
			return errors.New("partner said no")
		}
		return nil
	}))
	// JobGet finds the job wherever it is: in flight, dead or in the history.
	weightOf := func(table string, id int64) int {
		rec, err := c.JobGet(ctx, id)
		require.NoError(t, err)
		want := map[string][]skiplock.JobState{"jobs": {skiplock.JobStateReady, skiplock.JobStateScheduled},
			"jobs_dead": {skiplock.JobStateDead}, "jobs_done": {skiplock.JobStateCompleted}}[table]
		require.Contains(t, want, rec.State, "job %d is not in %s", id, table)
		return rec.LimitWeight
	}
	res, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "w", LimitWeight: 4, MaxAttempts: 2})
	require.NoError(t, err)
	_, err = c.Drain(ctx, skiplock.DrainOptions{Limit: 1})
	require.NoError(t, err)
	require.Equal(t, 4, weightOf("jobs", res.ID), "after a failed attempt, waiting to retry")
	_, err = c.Drain(ctx, skiplock.DrainOptions{IncludeScheduled: true})
	require.NoError(t, err)
	require.Equal(t, 4, weightOf("jobs_dead", res.ID), "dead-lettered")

	retried, err := c.JobRetry(ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, 4, weightOf("jobs", retried), "retried from the dead-letter table")

	_, err = c.JobCancel(ctx, retried) // ready → dead again
	require.NoError(t, err)
	require.Equal(t, 4, weightOf("jobs_dead", retried))
	st := store.New("skiplock")
	n, err := st.ReplayDead(ctx, db.Pool, store.ReplayFilter{IDs: []int64{retried}}, 0, nil)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	var replayed int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT id FROM skiplock.jobs WHERE kind = 'w'`).Scan(&replayed))
	require.Equal(t, 4, weightOf("jobs", replayed), "replayed from the dead-letter table")

	fail.Store(false)
	_, err = c.Drain(ctx, skiplock.DrainOptions{})
	require.NoError(t, err)
	require.Equal(t, 4, weightOf("jobs_done", replayed), "archived on completion")
	again, err := c.JobRetry(ctx, replayed)
	require.NoError(t, err)
	require.Equal(t, 4, weightOf("jobs", again), "retried from the history")
}

// A pool that a rate limit covers, with nothing to claim, claims at its
// poll interval, not in a loop: limit_next_start says "none full" as NULL
// (it used to say 0, "claim again now", and an idle pool claimed every
// millisecond).
func TestIdleRateLimitedPoolDoesNotSpin(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c, claims := rateLimitedClient(t, db.URL)
	require.NoError(t, c.LimitSet(ctx, skiplock.Limit{Name: "api", Kind: "call", Rate: 5, Per: time.Minute}))
	require.NoError(t, skiplock.Handle(c, "call", func(ctx context.Context, j *skiplock.Job[struct{}]) error { return nil }))
	// One start in the window (not full), then an empty backlog.
	_, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "call", LimitWeight: 2})
	require.NoError(t, err)
	require.NoError(t, c.Start(ctx))
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	require.Eventually(t, func() bool {
		var n int
		_ = db.Pool.QueryRow(ctx, `SELECT count(*) FROM skiplock.limit_starts`).Scan(&n)
		return n == 1
	}, 10*time.Second, 10*time.Millisecond)
	before := claims.n.Load()
	time.Sleep(300 * time.Millisecond) // an upper bound on claims: fewer never fails
	require.LessOrEqual(t, claims.n.Load()-before, int64(3), "an idle rate-limited pool claims in a loop")
}

// A heavy job held back by a window that still has room for light jobs
// starts right when enough of the window's weight has left it, though the
// poll interval is 10 s: limit_next_start knows the waiting job's weight.
func TestHeavyJobWakesWhenItsWeightFits(t *testing.T) {
	skipInShort(t, "runs for seconds of wall time")
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := schedClient(t, db.URL, skiplock.Config{Logger: quietLogger(), PollInterval: 10 * time.Second,
		Pools: []skiplock.WorkerPool{{Queues: []string{"default"}, Concurrency: 4, BatchSize: 10}}})
	const per = 2 * time.Second
	require.NoError(t, c.LimitSet(ctx, skiplock.Limit{Name: "api", Kind: "call", Rate: 3, Per: per}))
	var done atomic.Int64
	require.NoError(t, skiplock.Handle(c, "call", func(ctx context.Context, j *skiplock.Job[struct{}]) error {
		done.Add(1)
		return nil
	}))
	// The light job first (priority), then one of weight 3: 1 + 3 > 3.
	_, err := c.EnqueueMany(ctx, []skiplock.EnqueueParams{{Kind: "call", Priority: 1}, {Kind: "call", LimitWeight: 3}})
	require.NoError(t, err)
	require.NoError(t, c.Start(ctx))
	require.Eventually(t, func() bool { return done.Load() == 2 }, 8*time.Second, 10*time.Millisecond)
	require.NoError(t, c.Stop(ctx))
	var light, heavy time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT min(at) FILTER (WHERE weight = 1), min(at) FILTER (WHERE weight = 3)
		FROM skiplock.limit_starts`).Scan(&light, &heavy))
	late := heavy.Sub(light.Add(per))
	t.Logf("the weight-3 job started %v after the light start left the window", late.Round(time.Millisecond))
	require.GreaterOrEqual(t, late, time.Duration(0), "started while the window had no room for it")
	// Woken by the limit's next start, not the poll (10 s away): the bound is
	// far from both, so a loaded machine's scheduling does not decide it.
	require.Less(t, late, 3*time.Second, "woke late: by the poll (interval 10 s), not at the limit's next start")
}
