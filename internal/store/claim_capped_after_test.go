package store_test

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/store"
)

// tenantOrder returns one tenant's ready jobs of queue q ("" = the jobs
// without a tenant) as bounds, in claim order.
func tenantOrder(t *testing.T, pool *pgxpool.Pool, q, tenant string) []store.Bound {
	return readyOrder(t, pool, "queue = $1 AND tenant IS NOT DISTINCT FROM nullif($2, '')", q, tenant)
}

// A capped claim with tenant bounds reads each tenant after its bound, in
// the tenant's claim order (crossing into lower priorities), a tenant
// without a bound from its front, and the jobs without a tenant after
// theirs; what sorts behind a bound is not taken. Spare capacity follows
// the same rule: a tenant draining alone fills the batch with its next
// jobs after its bound, not with the queue's front.
func TestCappedClaimAfterTenantBounds(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	st := store.New("skiplock")
	// Tenants a, b, c and untenanted jobs: 12 each, two priorities, run_at
	// spread over the past with ties (id breaks them).
	seed(t, db, `INSERT INTO skiplock.jobs (queue, kind, tenant, priority, run_at)
		SELECT 'q', 'k', nullif(v.t, ''), g % 2, now() - (g / 2) * interval '1 second'
		FROM generate_series(1, 12) AS g, (VALUES ('a'), ('b'), ('c'), ('')) AS v(t)`)
	order := map[string][]store.Bound{}
	for _, tn := range []string{"a", "b", "c", ""} {
		order[tn] = tenantOrder(t, db.Pool, "q", tn)
		require.Len(t, order[tn], 12)
	}

	claim := func(batch, capPer int, after map[string]store.Bound) map[string][]int64 {
		t.Helper()
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }() // each case sees the same jobs
		jobs, err := claimJobs(ctx, st, tx, store.ClaimRequest{Strategy: store.ClaimCappedAfter, Queues: []string{"q"}, Batch: batch,
			WorkerID: benchWorker, Lease: time.Minute, TenantCap: capPer, TenantAfter: map[string]map[string]store.Bound{"q": after}})
		require.NoError(t, err)
		got := map[string][]int64{}
		for _, j := range jobs {
			got[j.Tenant] = append(got[j.Tenant], j.ID)
		}
		for tn := range got {
			slices.Sort(got[tn])
		}
		return got
	}
	ids := func(bs []store.Bound) []int64 {
		out := make([]int64, len(bs))
		for i, b := range bs {
			out[i] = b.ID
		}
		slices.Sort(out)
		return out
	}

	// a after its 4th job (its priority-1 jobs run out at the 6th: the
	// claim crosses into priority 0), c after its 10th, the untenanted
	// jobs after their 2nd, b without a bound: cap 3 each, a batch the
	// shares fill (3 + 3 + 2 + 3).
	got := claim(11, 3, map[string]store.Bound{"a": order["a"][3], "c": order["c"][9], "": order[""][1]})
	require.Equal(t, ids(order["a"][4:7]), got["a"], "a: the 3 jobs after its bound")
	require.Equal(t, ids(order["b"][:3]), got["b"], "b: no bound, from its front")
	require.Equal(t, ids(order["c"][10:12]), got["c"], "c: the 2 jobs after its bound")
	require.Equal(t, ids(order[""][2:5]), got[""], "untenanted: the 3 after their bound")

	// Nothing after a tenant's bound: it takes nothing, and the others
	// still get their shares (the visit goes on past the empty tenant).
	got = claim(12, 3, map[string]store.Bound{"a": order["a"][11], "b": order["b"][11]})
	require.Empty(t, got["a"])
	require.Empty(t, got["b"])
	require.GreaterOrEqual(t, len(got["c"]), 3, "c: its shares at least")
	require.Equal(t, ids(order["c"][:len(got["c"])]), got["c"], "c: from its front, in its order")
	require.Equal(t, ids(order[""][:len(got[""])]), got[""], "untenanted: from their front, in their order")
	require.Equal(t, 12, len(got["c"])+len(got[""]), "spare capacity fills the batch from the tenants with work")

	// A tenant draining alone: its shares, then its next jobs after its
	// bound as spare capacity, in its order; nothing behind the bound.
	seed(t, db, `DELETE FROM skiplock.jobs WHERE tenant IS DISTINCT FROM 'a'`)
	got = claim(6, 2, map[string]store.Bound{"a": order["a"][2]})
	require.Equal(t, ids(order["a"][3:9]), got["a"])
}

// The point of the tenant bounds: with the vacuum horizon pinned, every job
// claimed since the pin leaves a dead entry at the front of its tenant's
// range of the per-tenant index, where a capped claim's probe lands and its
// shares start reading. A capped claim from the front reads all of them; a
// capped claim after the tenants' bounds reads none.
func TestCappedClaimAfterTenantBoundsSkipsPinnedDeadEntries(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	st := store.New("skiplock")
	// Statistics of a healthy queue, which autovacuum's last ANALYZE saw:
	// a few ready jobs. The claim's generic plan is made from them.
	seed(t, db, `INSERT INTO skiplock.jobs (queue, kind, tenant, run_at)
		SELECT 'q', 'k', 't' || lpad((g % 100)::text, 2, '0'), now() - interval '2 hours' FROM generate_series(1, 100) AS g`)
	seed(t, db, "VACUUM ANALYZE skiplock.jobs")

	db.Pin(t)
	seed(t, db, `INSERT INTO skiplock.jobs (queue, kind, tenant, run_at)
		SELECT 'q', 'k', 't' || lpad((g % 100)::text, 2, '0'), now() - interval '1 hour' + g * interval '1 millisecond'
		FROM generate_series(1, 12000) AS g`)

	last := map[string]store.Bound{}
	cursor := map[string]string{}
	// 11,800 of the 12,100 claimed and finished since the pin.
	for done := 0; done < 11800; {
		res, err := st.Claim(ctx, db.Pool, store.ClaimRequest{Strategy: store.ClaimCapped, Queues: []string{"q"},
			Batch: min(200, 11800-done), WorkerID: benchWorker, Lease: time.Minute, TenantCap: 5, TenantCursor: cursor})
		require.NoError(t, err)
		jobs := res.Jobs
		maps.Copy(cursor, res.Cursors)
		require.NotEmpty(t, jobs)
		ids := make([]int64, len(jobs))
		for i, j := range jobs {
			ids[i] = j.ID
			if b, ok := last[j.Tenant]; !ok || b.Before(store.BoundOf(j)) {
				last[j.Tenant] = store.BoundOf(j)
			}
		}
		_, err = db.Pool.Exec(ctx, "DELETE FROM skiplock.jobs WHERE id = ANY ($1)", ids)
		require.NoError(t, err)
		done += len(jobs)
	}
	seed(t, db, "VACUUM skiplock.jobs") // removes nothing: pinned

	front, frontRows := cappedClaimBuffers(t, db.Pool, st, nil)
	after, afterRows := cappedClaimBuffers(t, db.Pool, st, last)
	t.Logf("capped claim of 50 over 100 tenants, 11,800 jobs processed since the pin: the tenant indexes read %d buffers from the front, %d after the tenants' bounds",
		front, after)
	require.Equal(t, 50, frontRows)
	require.Equal(t, 50, afterRows)
	require.Greater(t, front, 150, "the pin should leave dead entries at the front of every tenant")
	require.Less(t, after*10, front, "a claim after the tenants' bounds must not read the pinned dead entries")
}

// cappedClaimBuffers runs the capped claim (cap 10, batch 50, from the
// first tenant; claim_capped_after with after's bounds, claim_capped
// without) under EXPLAIN (ANALYZE, BUFFERS), rolled back, and returns
// the buffers its scans of the ready indexes touched and the rows claimed.
func cappedClaimBuffers(t *testing.T, pool *pgxpool.Pool, st *store.Store, after map[string]store.Bound) (int, int) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	// The claim's pipeline: its settings, then the statement, under its
	// generic plan (the plan every claim after the first runs).
	_, err = tx.Exec(ctx, st.SQL("claim_settings"))
	require.NoError(t, err)
	_, err = tx.Exec(ctx, st.SQL("claim_capped_settings"))
	require.NoError(t, err)
	args := []any{[]string{"q"}, nil, 50, benchWorker, int64(time.Minute / time.Microsecond), 10, []*string{nil}}
	stmt := "claim_capped"
	if after != nil {
		stmt = "claim_capped_after"
		args = append(args, store.TenantBoundArgs(map[string]map[string]store.Bound{"q": after})...)
	}
	var plan []byte
	require.NoError(t, tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+st.SQL(stmt), args...).Scan(&plan))
	var out []struct {
		Plan planNode `json:"Plan"`
	}
	require.NoError(t, json.Unmarshal(plan, &out))
	if os.Getenv("PLAN") != "" {
		t.Logf("%s", plan)
	}
	n := out[0].Plan.indexScans("jobs_ready_keyed", "jobs_ready_tenant_keyed")
	require.Positive(t, n, "no scan of the ready indexes in the plan:\n%s", plan)
	return n, out[0].Plan.Rows
}

// A capped claim whose visit passes only tenants with nothing after their
// bounds claims nothing, and its cursor moves past them all the same: the
// next claim visits the tenants after them. The claim says when its visit
// stopped at its step limit (VisitCut), so the claimer goes on. A cursor that stayed where it
// was sent every claim through the same empty tenants while the jobs
// waited further on (a pinned 1,000-tenant queue: 100 ms of claims that
// found nothing, then jobs 330 ms old).
func TestCappedClaimMovesItsCursorPastEmptyTenants(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	st := store.New("skiplock")
	// Tenants t00..t19 with one job each; the claimer took every one of
	// t00..t11 before (their bounds are their jobs), so only t12..t19 have
	// jobs after their bounds.
	seed(t, db, `INSERT INTO skiplock.jobs (queue, kind, tenant)
		SELECT 'q', 'k', 't' || lpad(g::text, 2, '0') FROM generate_series(0, 19) AS g`)
	after := map[string]store.Bound{}
	for g := range 12 {
		tn := "t" + string(rune('0'+g/10)) + string(rune('0'+g%10))
		order := tenantOrder(t, db.Pool, "q", tn)
		require.Len(t, order, 1)
		after[tn] = order[0]
	}
	cursor := map[string]string{}
	var cut bool
	claim := func() []store.ClaimedJob {
		t.Helper()
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		// Batch 2: a visit of at most 4 × 2 = 8 tenants.
		res, err := st.Claim(ctx, tx, store.ClaimRequest{Strategy: store.ClaimCappedAfter, Queues: []string{"q"}, Batch: 2,
			WorkerID: benchWorker, Lease: time.Minute, TenantCap: 1, TenantCursor: cursor,
			TenantAfter: map[string]map[string]store.Bound{"q": after}})
		require.NoError(t, err)
		maps.Copy(cursor, res.Cursors)
		cut = res.VisitCut
		return res.Jobs
	}
	require.Empty(t, claim(), "t00..t07: nothing after their bounds")
	require.Equal(t, "t07", cursor["q"], "the cursor moved past the empty tenants visited")
	require.True(t, cut, "the visit stopped at its step limit: tenants after t07 unvisited")
	jobs := claim()
	require.Len(t, jobs, 2)
	tenants := []string{jobs[0].Tenant, jobs[1].Tenant}
	slices.Sort(tenants)
	require.Equal(t, []string{"t12", "t13"}, tenants, "the next visit: t08..t11 empty, then the first tenants with jobs")
	require.Equal(t, "t13", cursor["q"])
	require.False(t, cut, "the visit met its 2 tenants with jobs")
}
