package worker

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/store"
)

func job(queue string, prio int, runAt time.Time, id int64) store.ClaimedJob {
	return store.ClaimedJob{ClaimedRow: store.ClaimedRow{Queue: queue, Priority: prio, RunAt: runAt, ID: id}}
}

// While claims from the front stay cheap the pool always claims from the
// front (exact priority order, today's behaviour); once they are expensive it
// claims after its bounds, with a claim from the front every 20× its cost.
func TestKeysetClaimsFromTheFrontWhileCheap(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	k := keyset{cheap: keysetCheap}
	require.Nil(t, k.bounds(t0, false), "no claim yet: from the front")

	k.observe(false, time.Millisecond, true, []store.ClaimedJob{job("q", 0, t0, 1), job("q", 0, t0, 2)}, t0)
	require.Nil(t, k.bounds(t0, false), "a cheap claim from the front: stay at the front")

	// The horizon is pinned: claims from the front get expensive.
	now := t0
	for i := 0; i < 10; i++ {
		now = now.Add(time.Millisecond)
		k.observe(false, 40*time.Millisecond, true, []store.ClaimedJob{job("q", 0, t0, int64(10+i))}, now)
	}
	b := k.bounds(now.Add(time.Millisecond), false)
	require.Equal(t, map[string]store.Bound{"q": {Priority: 0, RunAt: t0, ID: 19}}, b)
	require.Greater(t, k.gap(), 500*time.Millisecond)
	require.LessOrEqual(t, k.gap(), keysetMaxGap)
	require.Nil(t, k.bounds(now.Add(k.gap()), false), "the periodic claim from the front")
	require.Equal(t, b, k.bounds(now.Add(k.gap()), true), "after the bounds while that claim runs beside")

	// Deep into a pin a claim from the front costs a second: one every 2 s
	// would read dead entries a third of the time; the gap keeps them to a
	// tenth of it.
	deep := keyset{cheap: keysetCheap, fullCost: time.Second}
	require.Equal(t, 9*time.Second, deep.gap())
	deep.fullCost = 50 * time.Millisecond
	require.Equal(t, time.Second, deep.gap(), "20× a cheap claim's cost")

	// Claims after the bound advance it.
	k.observe(true, time.Millisecond, true, []store.ClaimedJob{job("q", 0, t0.Add(time.Second), 30), job("q", 0, t0, 25)}, now)
	require.Equal(t, int64(30), k.bounds(now, false)["q"].ID)
}

// One slow claim from the front among cheap ones (a connection planning the
// statement, a stall) keeps a pool at the front; slow ones in a row, as
// under a pin, send it after its bounds.
func TestKeysetOneSlowClaimKeepsThePoolAtTheFront(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	k := keyset{cheap: keysetCheapCapped}
	now := t0
	claim := func(took time.Duration) {
		now = now.Add(time.Millisecond)
		k.observe(false, took, true, []store.ClaimedJob{job("q", 0, t0, now.UnixMilli())}, now)
	}
	claim(200 * time.Millisecond) // the first: planned
	require.Nil(t, k.bounds(now, false))
	for i := 0; i < 20; i++ {
		claim(3 * time.Millisecond)
		if i%4 == 0 {
			claim(150 * time.Millisecond)
		}
		require.Nil(t, k.bounds(now, false), "claim %d", i)
	}
	for i := 0; i < 3; i++ {
		claim(150 * time.Millisecond)
	}
	require.NotNil(t, k.bounds(now, false), "slow claims in a row: after the bounds")
}

// A capped pool's claim of more than three batches is weighed pro rata:
// keysetCheapCapped holds for claims of three, and a healthy claim's cost
// grows with the jobs it takes.
func TestFrontCostOfALargeClaimIsPerThreeBatches(t *testing.T) {
	p := newFake(newFakeData(), newGate(), 4, 50).pools[0]
	require.Equal(t, 30*time.Millisecond, p.frontCost(30*time.Millisecond, 150))
	require.Equal(t, 30*time.Millisecond*150/time.Duration(batchesBound*50), p.frontCost(30*time.Millisecond, batchesBound*50))
	require.Equal(t, 3*time.Millisecond, p.frontCost(3*time.Millisecond, 10))
}

func TestKeysetBoundsAfterAClaimFromTheFront(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	k := keyset{cheap: keysetCheap, fullCost: time.Second, after: map[string]store.Bound{"q": {Priority: 0, RunAt: t0, ID: 100}}}
	// A claim from the front that did not fill its batch took everything
	// due: the bound keeps the furthest position.
	k.observe(false, time.Second, false, []store.ClaimedJob{job("q", 5, t0, 200)}, t0)
	require.Equal(t, store.Bound{Priority: 0, RunAt: t0, ID: 100}, k.after["q"])
	// One that filled it with jobs behind the bound (a burst of a higher
	// priority) may have left more of them: read on from where it ended.
	k.observe(false, time.Second, true, []store.ClaimedJob{job("q", 5, t0, 201), job("q", 5, t0, 202)}, t0)
	require.Equal(t, store.Bound{Priority: 5, RunAt: t0, ID: 202}, k.after["q"])
	// Other queues keep their own bounds.
	k.observe(true, time.Millisecond, true, []store.ClaimedJob{job("r", 0, t0, 7)}, t0)
	require.Equal(t, store.Bound{Priority: 5, RunAt: t0, ID: 202}, k.after["q"])
	require.Equal(t, store.Bound{Priority: 0, RunAt: t0, ID: 7}, k.after["r"])
}

// End to end with the horizon pinned and the pool claiming after its bounds
// from its second claim on: every job runs exactly once, and a job that
// sorts behind the bound (a higher priority, enqueued mid-drain with an old
// run_at) is found by the periodic claim from the front within its gap.
func TestKeysetUnderAPinnedHorizon(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	const n = 2000
	_, err := db.Pool.Exec(ctx, `INSERT INTO skiplock.jobs (queue, kind, run_at)
		SELECT 'q', 'k', now() - interval '1 hour' + g * interval '1 millisecond' FROM generate_series(1, $1::int) AS g`, n)
	require.NoError(t, err)
	db.Pin(t)

	var (
		mu       sync.Mutex
		runs     = map[int64]int{}
		urgentID atomic.Int64
		enqueued time.Time
		ranAfter = make(chan time.Duration, 1)
	)
	handler := func(ctx context.Context, j *Job) Result {
		mu.Lock()
		runs[j.ID]++
		count := len(runs)
		mu.Unlock()
		if j.ID == urgentID.Load() {
			ranAfter <- time.Since(enqueued)
		}
		if count == n/4 && urgentID.Load() == 0 {
			var id int64
			enqueued = time.Now()
			err := db.Pool.QueryRow(ctx, `INSERT INTO skiplock.jobs (queue, kind, priority, run_at)
				VALUES ('q', 'k', 100, now() - interval '2 hours') RETURNING id`).Scan(&id)
			if err == nil {
				urgentID.Store(id)
			}
		}
		time.Sleep(time.Millisecond)
		return Result{}
	}
	r := New(Config{Pool: db.Pool, Store: store.New("skiplock"), WorkerID: "w-pin", Lease: time.Minute,
		HeartbeatInterval: 10 * time.Second, PollInterval: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Handler: handler,
		Pools: []PoolConfig{{Name: "p", Queues: []string{"q"}, Concurrency: 4, BatchSize: 20}}})
	r.pools[0].keys.cheap = -1 // after the bounds whatever the cost
	require.NoError(t, r.Start(ctx))
	defer func() { _ = r.Stop(ctx) }()

	select {
	case d := <-ranAfter:
		t.Logf("the job behind the bound ran %v after it was enqueued", d)
		require.Less(t, d, keysetMaxGap+time.Second)
	case <-time.After(30 * time.Second):
		t.Fatal("the job enqueued behind the bound never ran")
	}
	require.Eventually(t, func() bool {
		var left int
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM skiplock.jobs").Scan(&left))
		return left == 0
	}, 30*time.Second, 50*time.Millisecond)
	require.NoError(t, r.Stop(ctx))
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, runs, n+1)
	for id, c := range runs {
		require.Equal(t, 1, c, "job %d ran %d times", id, c)
	}
}

func tenantJob(queue, tenant string, runAt time.Time, id int64) store.ClaimedJob {
	j := job(queue, 0, runAt, id)
	j.Tenant = tenant
	return j
}

// A tenant-capped pool keeps a bound per tenant: claims after the bounds
// move a tenant's bound forward, a claim from the front sets it to where
// that claim ended in the tenant's jobs (so jobs left between there and
// the old bound are read next), and tenants the claim took nothing of keep
// theirs.
func TestKeysetTenantBounds(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	k := keyset{cheap: keysetCheap, perTenant: true}
	k.observe(false, time.Millisecond, true, []store.ClaimedJob{
		tenantJob("q", "a", t0, 5), tenantJob("q", "a", t0, 3), tenantJob("q", "b", t0, 4), tenantJob("q", "", t0, 6),
	}, t0)
	require.Equal(t, map[string]store.Bound{"a": {RunAt: t0, ID: 5}, "b": {RunAt: t0, ID: 4}, "": {RunAt: t0, ID: 6}},
		k.tenants["q"].at)
	require.Equal(t, []string{"a", "b"}, k.tenants["q"].names)

	k.observe(true, time.Millisecond, true, []store.ClaimedJob{tenantJob("q", "a", t0, 9), tenantJob("q", "b", t0, 2)}, t0)
	require.Equal(t, int64(9), k.tenants["q"].at["a"].ID, "after the bounds: forward")
	require.Equal(t, int64(4), k.tenants["q"].at["b"].ID, "after the bounds: never back")

	k.observe(false, time.Millisecond, true, []store.ClaimedJob{tenantJob("q", "a", t0, 7), tenantJob("q", "a", t0, 6)}, t0)
	require.Equal(t, int64(7), k.tenants["q"].at["a"].ID, "from the front: where that claim ended in a's jobs")
	require.Equal(t, int64(4), k.tenants["q"].at["b"].ID, "b was not in that claim")

	plain := keyset{cheap: keysetCheap}
	plain.observe(false, time.Millisecond, true, []store.ClaimedJob{tenantJob("q", "a", t0, 1)}, t0)
	require.Nil(t, plain.tenants, "a pool without a tenant cap keeps no tenant bounds")
}

// The capped claim gets the bounds of the next tenants after its cursor
// (wrapping), at most n of them, and always the untenanted jobs' bound.
func TestKeysetTenantWindow(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	k := keyset{cheap: keysetCheap, perTenant: true}
	var jobs []store.ClaimedJob
	for i, tn := range []string{"e", "a", "c", "", "b", "d"} {
		jobs = append(jobs, tenantJob("q", tn, t0, int64(i+1)))
	}
	k.observe(false, time.Millisecond, true, jobs, t0)
	names := func(w map[string]map[string]store.Bound) []string {
		var out []string
		for tn := range w["q"] {
			out = append(out, tn)
		}
		slices.Sort(out)
		return out
	}
	require.Equal(t, []string{"", "c", "d"}, names(k.tenantWindow(map[string]string{"q": "b"}, 2)))
	require.Equal(t, []string{"", "a", "e"}, names(k.tenantWindow(map[string]string{"q": "d"}, 2)), "wrapping")
	require.Equal(t, []string{"", "a", "b"}, names(k.tenantWindow(nil, 2)), "no cursor: from the first")
	require.Equal(t, []string{"", "d", "e"}, names(k.tenantWindow(map[string]string{"q": "cc"}, 2)), "a cursor without a bound")
	require.Equal(t, []string{"", "a", "b", "c", "d", "e"}, names(k.tenantWindow(nil, 100)))
	require.Equal(t, k.tenants["q"].at["c"], k.tenantWindow(map[string]string{"q": "b"}, 1)["q"]["c"])
}
