package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/store"
)

// jobs_ready keeps the jobs without a tenant and those with one in two
// ranges (migration 027); every claim that takes a queue in claim order
// merges them. Jobs of both kinds interleaved in priority and run time: the
// plain claim from the front and after a bound, the claim within the
// limits' room and claim_limited each take the next jobs in claim order,
// whatever their tenant.
func TestClaimOrderAcrossTenants(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	st := store.New("skiplock")
	// Three priorities, run_at spread over the past (some equal, so id
	// breaks ties), a tenant on every other job and on runs of them.
	seed(t, db, `INSERT INTO skiplock.jobs (queue, kind, priority, run_at, tenant)
		SELECT 'a', 'k', g % 3, now() - (g / 2) * interval '1 second',
		       CASE WHEN g % 2 = 0 OR g % 7 < 3 THEN 't' || (g % 5) END
		FROM generate_series(1, 90) AS g`)
	require.NoError(t, st.SetLimit(ctx, db.Pool, store.Limit{Name: "a", Queue: "a", Concurrency: 1000}))
	order := claimOrder(t, db.Pool, "a")
	require.Len(t, order, 90)
	var tenants int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM skiplock.jobs WHERE tenant IS NOT NULL`).Scan(&tenants))
	require.True(t, tenants > 20 && tenants < 70, "both ranges hold jobs: %d with a tenant", tenants)

	claim := func(r store.ClaimRequest) []store.ClaimedJob {
		t.Helper()
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }() // each case sees the same jobs
		r.Queues, r.Batch, r.WorkerID, r.Lease = []string{"a"}, 8, benchWorker, time.Minute
		jobs, err := claimJobs(ctx, st, tx, r)
		require.NoError(t, err)
		return jobs
	}
	for _, c := range []struct {
		name string
		r    store.ClaimRequest
	}{
		{"plain", store.ClaimRequest{}},
		{"within the limits' room", store.ClaimRequest{Strategy: store.ClaimWithinRoom, Limits: []string{"a"}}},
		{"claim_limited", store.ClaimRequest{Strategy: store.ClaimLimited, Limits: []string{"a"}}},
	} {
		require.Equal(t, boundIDs(order[:8]), claimedIDs(claim(c.r)), "%s, from the front", c.name)
	}
	for _, pos := range []int{0, 13, 29, 31, 59, 75, 85} {
		got := claim(store.ClaimRequest{After: map[string]store.Bound{"a": order[pos]}})
		want := order[pos+1 : min(pos+9, len(order))]
		require.Equal(t, boundIDs(want), claimedIDs(got), "bound at position %d (priority %d)", pos, order[pos].Priority)
	}
}
