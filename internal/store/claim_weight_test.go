package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/store"
)

// Under a rate limit a job counts its weight (migration 014): a heavy job
// that does not fit the window's room stays ready while light ones behind
// it that fit are claimed, even when more heavy jobs than a batch wait
// ahead of them; limit_next_start then says when the window frees; a job
// heavier than the rate is never claimed and limit_list counts it; a
// concurrency limit counts one per running job whatever its weight.
func TestWeightedRateLimitClaim(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	st := store.New("skiplock")
	require.NoError(t, st.SetLimit(ctx, db.Pool, store.Limit{Name: "api", Kind: "call", Rate: 10, Per: time.Hour}))
	claim := func() []store.ClaimedJob {
		jobs, err := claimJobs(ctx, st, db.Pool, store.ClaimRequest{Strategy: store.ClaimLimited, Queues: []string{"q"}, Batch: 10,
			WorkerID: benchWorker, Lease: time.Minute, Limits: []string{"api"}})
		require.NoError(t, err)
		return jobs
	}
	used := func() int {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT coalesce(sum(weight), 0) FROM skiplock.limit_starts`).Scan(&n))
		return n
	}
	// A weight-7 job starts first (the window: 7 of 10).
	seed(t, db, `INSERT INTO skiplock.jobs (queue, kind, limit_weight) VALUES ('q', 'call', 7)`)
	require.Len(t, claim(), 1)
	require.Equal(t, 7, used())
	// Twelve weight-5 jobs ahead of five light ones in claim order: none of
	// the heavy fits (7 + 5 > 10), three light ones do.
	seed(t, db, `INSERT INTO skiplock.jobs (queue, kind, priority, limit_weight)
		SELECT 'q', 'call', 10, 5 FROM generate_series(1, 12)`)
	seed(t, db, `INSERT INTO skiplock.jobs (queue, kind) SELECT 'q', 'call' FROM generate_series(1, 5)`)
	got := claim()
	require.Len(t, got, 3, "the light jobs that fit, behind more heavy ones than a batch")
	for _, j := range got {
		require.Equal(t, 0, j.Priority, "only light jobs")
	}
	require.Equal(t, 10, used())
	require.Empty(t, claim(), "full: nothing more")
	wait, full, err := st.LimitNextStart(ctx, db.Pool, []string{"api"})
	require.NoError(t, err)
	require.True(t, full)
	require.InDelta(t, time.Hour.Seconds(), wait.Seconds(), 60, "the weight-7 start leaving frees the window")

	// An hour later the weight-7 start has left (3 of 10 used): one
	// weight-5 job fits. The heavy ones refused after it still count in
	// this batch's order (a batch may take fewer than it could, never
	// more), so the light ones wait for the next claim, which skips the
	// heavy ones (8 + 5 > 10) and takes two light ones (8 + 1 + 1).
	seed(t, db, `UPDATE skiplock.limit_starts SET at = at - interval '2 hours' WHERE weight = 7`)
	_, full, err = st.LimitNextStart(ctx, db.Pool, []string{"api"})
	require.NoError(t, err)
	require.False(t, full, "3 of 10: not full")
	got = claim()
	require.Len(t, got, 1)
	require.Equal(t, 10, got[0].Priority)
	// 8 of 10: not full, but the waiting weight-5 jobs are held back until
	// the three light starts leave (8 - 3 + 5 <= 10), an hour from now.
	wait, full, err = st.LimitNextStart(ctx, db.Pool, []string{"api"})
	require.NoError(t, err)
	require.True(t, full, "a waiting weight-5 job is held back")
	require.InDelta(t, time.Hour.Seconds(), wait.Seconds(), 60)
	got = claim()
	require.Len(t, got, 2)
	require.Equal(t, 0, got[0].Priority)
	require.Equal(t, 10, used()-7)
	// Full again: the window frees when the oldest weights leave it, the
	// three light starts (1 + 1 + 1 gone leaves 7 < 10), an hour from now.
	wait, full, err = st.LimitNextStart(ctx, db.Pool, []string{"api"})
	require.NoError(t, err)
	require.True(t, full)
	require.InDelta(t, time.Hour.Seconds(), wait.Seconds(), 60)
	// The window is read oldest first: with the weight-5 start half an
	// hour older than the rest, its leaving alone drops the window below
	// the rate (5 of 10 left), half an hour from now.
	seed(t, db, `UPDATE skiplock.limit_starts SET at = at - interval '30 minutes'
		WHERE ctid = (SELECT ctid FROM skiplock.limit_starts WHERE weight = 5)`)
	wait, full, err = st.LimitNextStart(ctx, db.Pool, []string{"api"})
	require.NoError(t, err)
	require.True(t, full)
	require.InDelta(t, (30 * time.Minute).Seconds(), wait.Seconds(), 60, "the weight-5 start, the oldest now, frees it")

	// Heavier than the rate: never claimed, counted by limit_list.
	seed(t, db, `DELETE FROM skiplock.jobs WHERE state = 'ready'`)
	seed(t, db, `DELETE FROM skiplock.limit_starts`)
	seed(t, db, `INSERT INTO skiplock.jobs (queue, kind, limit_weight) VALUES ('q', 'call', 11)`)
	require.Empty(t, claim(), "weight 11 never fits a rate of 10")
	ls, err := st.ListLimits(ctx, db.Pool, true)
	require.NoError(t, err)
	require.Len(t, ls, 1)
	require.Equal(t, int64(1), ls[0].TooHeavy)
	require.Equal(t, int64(0), ls[0].Used)
	// Exactly the rate fits an empty window.
	seed(t, db, `UPDATE skiplock.jobs SET limit_weight = 10 WHERE state = 'ready'`)
	require.Len(t, claim(), 1)
	require.Equal(t, 10, used())

	// A concurrency limit counts jobs, not weights.
	require.NoError(t, st.SetLimit(ctx, db.Pool, store.Limit{Name: "api", Kind: "call", Concurrency: 3}))
	seed(t, db, `UPDATE skiplock.jobs SET state = 'ready', locked_by = NULL, lease_token = NULL, lease_expires_at = NULL
		WHERE state = 'running'`)
	seed(t, db, `DELETE FROM skiplock.jobs`)
	seed(t, db, `INSERT INTO skiplock.jobs (queue, kind, limit_weight) SELECT 'q', 'call', 50 FROM generate_series(1, 5)`)
	require.Len(t, claim(), 3)
}

// Weighted starts from several claimers at once never take a window past
// the rate: the claims run under the limit's lock, each counting the
// weights recorded before it.
func TestWeightedClaimersTogetherStayWithinTheRate(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	st := store.New("skiplock")
	require.NoError(t, st.SetLimit(ctx, db.Pool, store.Limit{Name: "api", Queue: "q", Partition: "tenant", Rate: 20, Per: time.Hour}))
	seed(t, db, `INSERT INTO skiplock.jobs (queue, kind, tenant, limit_weight)
		SELECT 'q', 'k', 't' || (g % 3), nullif(1 + g % 4, 1) FROM generate_series(1, 300) AS g`)
	errs := make(chan error, 4)
	for w := 0; w < 4; w++ {
		go func() {
			var err error
			for i := 0; i < 15 && err == nil; i++ {
				_, err = st.Claim(ctx, db.Pool, store.ClaimRequest{Strategy: store.ClaimLimited, Queues: []string{"q"}, Batch: 7,
					WorkerID: benchWorker, Lease: time.Minute, Limits: []string{"api"}})
			}
			errs <- err
		}()
	}
	for w := 0; w < 4; w++ {
		require.NoError(t, <-errs)
	}
	rows, err := db.Pool.Query(ctx, `
		SELECT s.key, sum(s.weight)::int, (SELECT sum(coalesce(j.limit_weight, 1))::int FROM skiplock.jobs AS j
		                                   WHERE j.state = 'running' AND j.tenant = s.key)
		FROM skiplock.limit_starts AS s GROUP BY s.key ORDER BY s.key`)
	require.NoError(t, err)
	defer rows.Close()
	n := 0
	for rows.Next() {
		var key string
		var started, running int
		require.NoError(t, rows.Scan(&key, &started, &running))
		require.LessOrEqual(t, started, 20, "tenant %s", key)
		require.GreaterOrEqual(t, started, 20-3, "tenant %s: the window is used up to what the next job's weight allows", key)
		require.Equal(t, started, running, "tenant %s: each start recorded with its job's weight", key)
		n++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, 3, n)
}
