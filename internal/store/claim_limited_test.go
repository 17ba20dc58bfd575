package store_test

import (
	"context"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/store"
)

// A limited claimer whose limits have room for a whole batch claims it with
// the plain claim (limit_room, then claim); once a batch would overflow a
// limit it falls back to claim_limited in the same call, remembers that
// (Tight), and never takes more than the limit allows either way.
func TestLimitedClaimUsesRoomThenFallsBack(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	st := store.New("skiplock")
	seed(t, db, `INSERT INTO skiplock.jobs (queue, kind, run_at)
		SELECT 'q', 'k', now() - g * interval '1 second' FROM generate_series(1, 100) AS g`)
	require.NoError(t, st.SetLimit(ctx, db.Pool, store.Limit{Name: "q", Queue: "q", Concurrency: 25}))
	running := func() int {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM skiplock.jobs WHERE state = 'running'`).Scan(&n))
		return n
	}
	tight := false // as a pool keeps it: the limits had no room at the last look
	claim := func(batch int) int {
		res, err := st.Claim(ctx, db.Pool, limitedClaim(tight, batch))
		require.NoError(t, err)
		tight = tight || res.Tight
		return len(res.Jobs)
	}
	// 0 running + 10 <= 25: room, the plain claim.
	require.Equal(t, 10, claim(10))
	require.False(t, tight)
	require.Equal(t, 10, claim(10))
	require.False(t, tight)
	// 20 running + 10 > 25: no room; claim_limited takes the 5 left.
	require.Equal(t, 5, claim(10))
	require.True(t, tight)
	require.Equal(t, 25, running())
	// Tight: claim_limited directly, which takes nothing more.
	require.Equal(t, 0, claim(10))
	require.Equal(t, 25, running())
	// A cap below the batch has no room even with nothing running.
	tight = false
	require.NoError(t, st.SetLimit(ctx, db.Pool, store.Limit{Name: "q", Queue: "q", Partition: "tenant", Concurrency: 1}))
	seed(t, db, `DELETE FROM skiplock.jobs WHERE state = 'ready'`) // jobs without a tenant: not limited by it
	seed(t, db, `INSERT INTO skiplock.jobs (queue, kind, tenant) SELECT 'q', 'k', 't' || (g % 3) FROM generate_series(1, 30) AS g`)
	require.Equal(t, 3, claim(10))
	require.True(t, tight)
}

// Concurrent limited claimers, each starting with the plain claim under
// limit_room, never take more than the limit together, and reach it.
func TestLimitedClaimersTogetherStayWithinTheLimit(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	st := store.New("skiplock")
	seed(t, db, `INSERT INTO skiplock.jobs (queue, kind) SELECT 'q', 'k' FROM generate_series(1, 500)`)
	require.NoError(t, st.SetLimit(ctx, db.Pool, store.Limit{Name: "q", Queue: "q", Concurrency: 23}))
	var wg sync.WaitGroup
	var claimed atomic.Int64
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				tight := i%3 == 0 && i > 0 // look again now and then, as a pool does
				res, err := st.Claim(ctx, db.Pool, limitedClaim(tight, 5))
				if !assert.NoError(t, err) {
					return
				}
				claimed.Add(int64(len(res.Jobs)))
			}
		}()
	}
	wg.Wait()
	var running int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM skiplock.jobs WHERE state = 'running'`).Scan(&running))
	require.Equal(t, int64(23), running)
	require.Equal(t, int64(23), claimed.Load())
}

// What a limit that never binds costs a claim: the plain claim, the limited
// claim with limit_room (the fast path) and claim_limited alone, interleaved
// on one table with 80 running jobs, each rolled back; medians logged, not
// asserted (timings are for SKIPLOCK_MEASURE=1 runs).
func TestLimitedClaimCost(t *testing.T) {
	if os.Getenv("SKIPLOCK_MEASURE") == "" {
		t.Skip("set SKIPLOCK_MEASURE=1 to measure")
	}
	db := dbtest.New(t)
	ctx := context.Background()
	st := store.New("skiplock")
	seed(t, db, `INSERT INTO skiplock.jobs (queue, kind, priority, run_at)
		SELECT 'q', 'k', g % 11, now() - interval '1 hour' + g * interval '1 millisecond' FROM generate_series(1, 20000) AS g`)
	seed(t, db, `UPDATE skiplock.jobs SET state = 'running', locked_by = 'w', lease_token = nextval('skiplock.lease_tokens'),
		lease_expires_at = now() + interval '1 hour', attempts = 1, attempted_at = now()
		WHERE id IN (SELECT id FROM skiplock.jobs ORDER BY id LIMIT 80)`)
	seed(t, db, `ANALYZE skiplock.jobs`)
	require.NoError(t, st.SetLimit(ctx, db.Pool, store.Limit{Name: "q", Queue: "q", Concurrency: 1000}))
	variants := []struct {
		name string
		p    func() store.ClaimRequest
	}{
		{"plain", func() store.ClaimRequest { return store.ClaimRequest{} }},
		{"limited, limit_room", func() store.ClaimRequest {
			return store.ClaimRequest{Strategy: store.ClaimWithinRoom, Limits: []string{"q"}}
		}},
		{"claim_limited", func() store.ClaimRequest {
			return store.ClaimRequest{Strategy: store.ClaimLimited, Limits: []string{"q"}}
		}},
	}
	times := make([][]time.Duration, len(variants))
	for i := 0; i < 60; i++ {
		for v, variant := range variants {
			p := variant.p()
			p.Queues, p.Batch, p.WorkerID, p.Lease = []string{"q"}, 50, benchWorker, time.Minute
			times[v] = append(times[v], timedClaim(t, db, st, p, 50))
		}
	}
	plain := median(times[0])
	for v, variant := range variants {
		m := median(times[v])
		t.Logf("%-20s claim of 50: median %v over %d (%.2fx plain)", variant.name, m.Round(time.Microsecond), len(times[v]), float64(m)/float64(plain))
	}
}

// limitedClaim is a claim of batch jobs of queue "q" under limit "q", as a
// pool makes it: claim_limited while the limits had no room at its last
// look (tight), else the plain claim within their room.
func limitedClaim(tight bool, batch int) store.ClaimRequest {
	strategy := store.ClaimWithinRoom
	if tight {
		strategy = store.ClaimLimited
	}
	return store.ClaimRequest{Strategy: strategy, Queues: []string{"q"}, Batch: batch, WorkerID: benchWorker,
		Lease: time.Minute, Limits: []string{"q"}}
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
