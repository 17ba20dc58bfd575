package worker

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/store"
)

// claimCall is one Claim the fake received; the test answers on reply
// (give, for jobs alone).
type claimCall struct {
	req   store.ClaimRequest
	reply chan store.ClaimResult
}

// give answers the claim with jobs js and nothing learned.
func (c claimCall) give(js []store.ClaimedJob) { c.reply <- store.ClaimResult{Jobs: js} }

// fakeData is the runtime's database, driven by the test through channels:
// every Claim waits for the test's answer, every outcome write is handed
// to the test. Leases are held but for those in gone.
type fakeData struct {
	gone     map[int64]bool // leases Heartbeat finds gone (read by the test's own calls only)
	inTx     []store.Lease  // the ended leases the last Heartbeat was given apart (the test's own calls only)
	claims   chan claimCall
	writes   chan store.Outcomes
	reapSlow time.Duration         // each Reap takes this long
	defers   chan time.Duration    // ReapDefer's delays, when not nil
	limits   []store.CoveringLimit // what LimitsCovering returns
	// waiters answers WaitersListening when not nil (else: none listen).
	waiters func() bool
}

func newFakeData() *fakeData {
	return &fakeData{claims: make(chan claimCall), writes: make(chan store.Outcomes, 64)}
}

func (f *fakeData) Claim(ctx context.Context, r store.ClaimRequest) (store.ClaimResult, error) {
	c := claimCall{req: r, reply: make(chan store.ClaimResult, 1)}
	select {
	case f.claims <- c:
	case <-ctx.Done():
		return store.ClaimResult{}, ctx.Err()
	}
	select {
	case res := <-c.reply:
		return res, nil
	case <-ctx.Done():
		return store.ClaimResult{}, ctx.Err()
	}
}

func (f *fakeData) LimitNextStart(context.Context, []string) (time.Duration, bool, error) {
	return 0, false, nil
}

func (f *fakeData) LimitsCovering(context.Context, []string, []string) ([]store.CoveringLimit, error) {
	return f.limits, nil
}

func (f *fakeData) Heartbeat(_ context.Context, ls, inTx []store.Lease, _ time.Duration, _ string) (map[int64]bool, error) {
	f.inTx = inTx
	alive := map[int64]bool{} // id → cancel requested
	for _, l := range slices.Concat(ls, inTx) {
		if !f.gone[l.ID] {
			alive[l.ID] = false
		}
	}
	return alive, nil
}

func (f *fakeData) WriteOutcomes(_ context.Context, o store.Outcomes, _ string, _ bool) (map[int64]bool, error) {
	f.writes <- o
	held := map[int64]bool{}
	for _, l := range o.Done {
		held[l.ID] = true
	}
	for _, r := range o.Resched {
		held[r.ID] = true
	}
	for _, d := range o.Deads {
		held[d.ID] = true
	}
	return held, nil
}

func (f *fakeData) Reap(ctx context.Context, _ int) (int, int, error) {
	select { // reapSlow: a reap through a running set a pin filled
	case <-time.After(f.reapSlow):
	case <-ctx.Done():
	}
	return 0, 0, nil
}
func (f *fakeData) ReapTurn(context.Context, time.Duration, string) (bool, error) {
	return true, nil
}
func (f *fakeData) ReapDefer(_ context.Context, d time.Duration) error {
	select {
	case f.defers <- d:
	default: // nil or full: the test has what it needs
	}
	return nil
}
func (f *fakeData) RotateRing(context.Context, time.Duration) (int64, int, error) {
	return 0, -1, nil
}
func (f *fakeData) BeatWorker(context.Context, store.WorkerBeat) error { return nil }
func (f *fakeData) NotifyQueues(context.Context, []string) error       { return nil }
func (f *fakeData) WaitersListening(context.Context) (bool, error) {
	if f.waiters != nil {
		return f.waiters(), nil
	}
	return false, nil
}

func (f *fakeData) WriteProgress(_ context.Context, ps []store.Progress, _ string) (map[int64]bool, error) {
	held := make(map[int64]bool, len(ps))
	for _, p := range ps {
		held[p.ID] = true
	}
	return held, nil
}

// recv waits for the next value on ch; what says what did not come.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal(what)
		var zero T
		return zero
	}
}

// nextClaim waits for the producer's next Claim.
func (f *fakeData) nextClaim(t *testing.T) claimCall {
	t.Helper()
	return recv(t, f.claims, "the producer did not claim")
}

// noClaim asserts the producer is not claiming: it waits for nothing, it
// only looks, after the test made sure the producer is idle (every claim
// answered, every wake-up consumed).
func (f *fakeData) noClaim(t *testing.T) {
	t.Helper()
	select {
	case c := <-f.claims:
		t.Fatalf("unexpected claim of %d", c.req.Batch)
	default:
	}
}

// nextWrite waits for the completer's next outcome write.
func (f *fakeData) nextWrite(t *testing.T) store.Outcomes {
	t.Helper()
	return recv(t, f.writes, "the completer wrote nothing")
}

// nextDone waits for the completer's writes until n completions are
// written, and returns their ids, sorted.
func (f *fakeData) nextDone(t *testing.T, n int) []int64 {
	t.Helper()
	var done []int64
	for len(done) < n {
		for _, l := range f.nextWrite(t).Done {
			done = append(done, l.ID)
		}
	}
	slices.Sort(done)
	return done
}

func jobs(ids ...int64) []store.ClaimedJob {
	out := make([]store.ClaimedJob, len(ids))
	for i, id := range ids {
		out[i] = store.ClaimedJob{ClaimedRow: store.ClaimedRow{ID: id, Queue: "q", Kind: "k", Attempt: 1, MaxAttempts: 3, LeaseToken: id}}
	}
	return out
}

// gate is a handler that reports each job it starts and finishes a job only
// when the test releases it.
type gate struct {
	started chan int64
	release map[int64]chan struct{}
}

func newGate(ids ...int64) *gate {
	g := &gate{started: make(chan int64, 16), release: map[int64]chan struct{}{}}
	for _, id := range ids {
		g.release[id] = make(chan struct{})
	}
	return g
}

func (g *gate) handle(ctx context.Context, j *Job) Result {
	g.started <- j.ID
	select {
	case <-g.release[j.ID]:
	case <-ctx.Done():
	}
	return Result{}
}

func (g *gate) waitStarted(t *testing.T) int64 {
	t.Helper()
	return recv(t, g.started, "no job started")
}

func startFake(t *testing.T, f *fakeData, g *gate, concurrency, batch int) *Runner {
	t.Helper()
	r := newFake(f, g, concurrency, batch)
	require.NoError(t, r.Start(context.Background()))
	return r
}

// newFake is a runner on f with one pool of queue "q" running g, not
// started; only the test drives its claims (PollInterval an hour).
func newFake(f *fakeData, g *gate, concurrency, batch int) *Runner {
	return New(Config{Data: f, WorkerID: "w", Handler: g.handle, Lease: time.Minute, HeartbeatInterval: time.Hour,
		PollInterval: time.Hour, PollOnly: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Pools: []PoolConfig{{Name: "p", Queues: []string{"q"}, Concurrency: concurrency, BatchSize: batch}}})
}

// A lease the handler's own transaction ended (NoteEndedInTx, as CompleteTx
// and WaitSignal's sleep do before their commit) is not lost when a
// heartbeat finds it gone: that was the commit, and the handler's context
// stays alive. A heartbeat that finds it still there (the transaction
// rolled back) drops the mark, and the lease gone after that is lost: the
// handler is cancelled with ErrLeaseLost.
func TestHeartbeatAfterTheHandlersTransactionEndedTheLease(t *testing.T) {
	f := newFakeData()
	r := newFake(f, newGate(), 1, 1)
	r.track([]Job{{ClaimedRow: store.ClaimedRow{ID: 7, LeaseToken: 70}}})
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	r.mu.Lock()
	r.jobs[7].cancel, r.jobs[7].started = cancel, true // as execute does
	r.mu.Unlock()
	require.False(t, NoteEndedInTx(ctx, 7, 70), "not a handler's context")
	require.True(t, NoteEndedInTx(context.WithValue(ctx, progressKey{}, r), 7, 70))

	f.gone = map[int64]bool{7: true}
	r.heartbeat(context.Background())
	require.NoError(t, context.Cause(ctx), "the handler's own commit ended the lease")
	require.Equal(t, []store.Lease{{ID: 7, Token: 70}}, f.inTx, "its row is not waited for (its transaction may hold it)")

	f.gone = nil
	r.heartbeat(context.Background()) // still there: rolled back
	require.NoError(t, context.Cause(ctx))
	f.gone = map[int64]bool{7: true}
	r.heartbeat(context.Background())
	require.Empty(t, f.inTx, "found: the mark is dropped, the row waited for as any other")
	require.ErrorIs(t, context.Cause(ctx), ErrLeaseLost)
}

// The producer claims full batches while they come back full, stops at a
// short one, claims again on a wake-up for what is free, and the completer
// writes each finished job's outcome; nothing is claimed beyond
// Concurrency + BatchSize in hand.
func TestProduceClaimsWhatIsFreeAndWritesOutcomes(t *testing.T) {
	f := newFakeData()
	g := newGate(1, 2, 3)
	r := startFake(t, f, g, 2, 2)

	c := f.nextClaim(t) // at start: the poll timer fires at once
	require.Equal(t, 2, c.req.Batch)
	require.Equal(t, []string{"q"}, c.req.Queues)
	c.give(jobs(1, 2)) // full: more is probably waiting
	c = f.nextClaim(t)
	require.Equal(t, 2, c.req.Batch, "two of four slots in hand are free")
	c.give(nil)        // short: wait for a wake-up
	c = f.nextClaim(t) // the first poll tick (its timer started at zero) was pending
	require.Equal(t, 2, c.req.Batch)
	c.give(nil)
	started := []int64{g.waitStarted(t), g.waitStarted(t)}
	slices.Sort(started)
	require.Equal(t, []int64{1, 2}, started)
	f.noClaim(t)

	r.pools[0].wake()
	c = f.nextClaim(t)
	require.Equal(t, 2, c.req.Batch)
	c.give(jobs(3)) // held until an executor is free

	close(g.release[1])
	o := f.nextWrite(t)
	require.Equal(t, []store.Lease{{ID: 1, Token: 1}}, o.Done)
	require.Equal(t, int64(3), g.waitStarted(t), "the freed executor takes the job claimed ahead")

	close(g.release[2])
	close(g.release[3])
	require.Equal(t, []int64{2, 3}, f.nextDone(t, 2))
	require.NoError(t, r.Stop(context.Background()))
	s := r.Stats()
	require.EqualValues(t, 3, s.Claimed)
	require.EqualValues(t, 3, s.Completed)
	require.Zero(t, s.Running)
}

// Stopping hands back at once a job claimed ahead but not started (a
// release that refunds the attempt), and waits for the running one, whose
// completion is written.
func TestStopHandsBackJobsClaimedAhead(t *testing.T) {
	f := newFakeData()
	g := newGate(1, 2)
	r := startFake(t, f, g, 1, 2)

	c := f.nextClaim(t)
	require.Equal(t, 2, c.req.Batch)
	c.give(jobs(1, 2))
	c = f.nextClaim(t)
	require.Equal(t, 1, c.req.Batch, "one slot of three is free")
	c.give(nil)
	c = f.nextClaim(t) // the first poll tick
	c.give(nil)
	first := g.waitStarted(t)

	stopped := make(chan error, 1)
	go func() { stopped <- r.Stop(context.Background()) }()
	o := f.nextWrite(t)
	second := 3 - first
	require.Empty(t, o.Done)
	require.Equal(t, []store.Reschedule{{Lease: store.Lease{ID: second, Token: second}, Refund: true}}, o.Resched,
		"handed back, attempt refunded")

	close(g.release[first])
	o = f.nextWrite(t)
	require.Equal(t, []store.Lease{{ID: first, Token: first}}, o.Done)
	require.NoError(t, <-stopped)
	f.noClaim(t)
}

// A slow reap (a pinned horizon fills the running set with dead entries)
// puts the fleet's next turn off by reapBackoff times its duration, at most
// half a lease; a fast one does not.
func TestSlowReapPutsTheNextTurnOff(t *testing.T) {
	for _, tc := range []struct {
		name     string
		slow     time.Duration
		interval time.Duration // ReaperInterval: a reap over interval/40 defers the next
		want     time.Duration // 0: no deferral
	}{
		{"slow", 30 * time.Millisecond, 20 * time.Millisecond, 500 * time.Millisecond}, // 20 × 30 ms, capped at Lease/2
		// A reap that returns at once still takes scheduling time: with a 20
		// ms interval, 0.5 ms of it (a loaded 2-core CI machine under -race)
		// deferred the next turn. At 200 ms it would take 5 ms.
		{"fast", 0, 200 * time.Millisecond, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeData()
			f.reapSlow, f.defers = tc.slow, make(chan time.Duration, 64)
			r := New(Config{Data: f, WorkerID: "w", Handler: newGate().handle, Lease: time.Second, HeartbeatInterval: time.Hour,
				PollInterval: time.Hour, PollOnly: true, ReaperInterval: tc.interval,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
				Pools:  []PoolConfig{{Name: "p", Queues: []string{"q"}, Concurrency: 1, BatchSize: 1}}})
			served := make(chan struct{}) // answer every claim: nothing to run
			go func() {
				for {
					select {
					case c := <-f.claims:
						c.give(nil)
					case <-served:
						return
					}
				}
			}()
			defer close(served)
			require.NoError(t, r.Start(context.Background()))
			defer func() { require.NoError(t, r.Stop(context.Background())) }()
			if tc.want > 0 {
				require.Equal(t, tc.want, recv(t, f.defers, "a slow reap deferred nothing"))
				return
			}
			require.Eventually(t, func() bool { return r.Stats().Reaps >= 5 }, 5*time.Second, 5*time.Millisecond)
			require.Empty(t, f.defers, "fast reaps put nothing off")
		})
	}
}

// serveClaims answers the pool's claims after the bounds from replies (nil
// once they run out) and hands its claims from the front to the test.
func serveClaims(f *fakeData, replies ...[]store.ClaimedJob) (front <-chan claimCall, stop func()) {
	fronts := make(chan claimCall, 4)
	quit := make(chan struct{})
	go func() {
		for {
			select {
			case c := <-f.claims:
				if c.req.After == nil && c.req.TenantAfter == nil {
					fronts <- c
					continue
				}
				var reply []store.ClaimedJob
				if len(replies) > 0 {
					reply, replies = replies[0], replies[1:]
				}
				c.give(reply)
			case <-quit:
				return
			}
		}
	}()
	return fronts, func() { close(quit) }
}

// startPinned starts a pool whose claims from the front are expensive (a
// pinned horizon) and due: it claims after its bound, and from the front
// beside those claims.
// slowFront has k observe claims from the front that cost a second each,
// enough in a row to send the pool after its bounds (frontTypical).
func slowFront(k *keyset, now time.Time) {
	for range 3 {
		k.observe(false, time.Second, true, nil, now)
	}
}

func startPinned(t *testing.T, f *fakeData, g *gate) *Runner {
	t.Helper()
	r := newFake(f, g, 2, 2)
	k := &r.pools[0].keys
	k.after = map[string]store.Bound{"q": {ID: 10}}
	k.fullCost = time.Second // a claim from the front took a second: one is due now, and then every 9 s
	require.NoError(t, r.Start(context.Background()))
	return r
}

// A tenant-capped pool's claim from the front runs beside its claims after
// the tenants' bounds too, from a copy of its cursors: the producer's own
// go on moving meanwhile.
func TestCappedFrontClaimRunsBesideClaimsAfterTheBounds(t *testing.T) {
	f := newFakeData()
	g := newGate(1, 2)
	fronts, stop := serveClaims(f, jobs(1))
	defer stop()
	r := New(Config{Data: f, WorkerID: "w", Handler: g.handle, Lease: time.Minute, HeartbeatInterval: time.Hour,
		PollInterval: time.Hour, PollOnly: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Pools: []PoolConfig{{Name: "p", Queues: []string{"q"}, Concurrency: 2, BatchSize: 2, TenantCap: 1}}})
	p := r.pools[0]
	p.keys.observe(false, time.Second, true, []store.ClaimedJob{tenantJob("q", "t1", time.Unix(0, 0), 10)}, time.Now())
	slowFront(&p.keys, time.Now()) // a second's claims from the front: a pinned horizon
	p.keys.lastFull = time.Time{}  // and one is due
	p.tenantCursor["q"] = "t1"
	require.NoError(t, r.Start(context.Background()))

	front := recv(t, fronts, "no claim from the front")
	require.Equal(t, 1, front.req.TenantCap)
	require.Equal(t, map[string]string{"q": "t1"}, front.req.TenantCursor, "from the producer's cursor")
	require.Equal(t, int64(1), g.waitStarted(t), "a job claimed after the tenants' bounds ran while the front claim was in flight")
	front.req.TenantCursor["q"] = "t9"                                                     // the claim reads its own copy
	front.reply <- store.ClaimResult{Jobs: jobs(2), Cursors: map[string]string{"q": "t9"}} // and its cursors are dropped
	require.Equal(t, int64(2), g.waitStarted(t), "the front claim's job runs once it ends")
	close(g.release[1])
	close(g.release[2])
	require.NoError(t, r.Stop(context.Background()))
	require.EqualValues(t, 2, r.Stats().Claimed)
	require.NotEqual(t, "t9", p.tenantCursor["q"], "the front claim's cursor is not the producer's")
}

// While the periodic claim from the front runs (slow: a pinned horizon),
// the pool goes on claiming after its bound and running what that brings;
// the front claim's jobs run when it ends. Before, the producer waited for
// it, and every job enqueued meanwhile waited as long.
func TestFrontClaimRunsBesideClaimsAfterTheBound(t *testing.T) {
	f := newFakeData()
	g := newGate(1, 2)
	fronts, stop := serveClaims(f, jobs(1))
	defer stop()
	r := startPinned(t, f, g)

	front := recv(t, fronts, "no claim from the front")
	require.Equal(t, 2, front.req.Batch)
	require.Equal(t, int64(1), g.waitStarted(t), "a job claimed after the bound ran while the front claim was in flight")

	front.give(jobs(2))
	require.Equal(t, int64(2), g.waitStarted(t), "the front claim's job runs once it ends")
	close(g.release[1])
	close(g.release[2])
	require.Equal(t, []int64{1, 2}, f.nextDone(t, 2))
	require.NoError(t, r.Stop(context.Background()))
	require.EqualValues(t, 2, r.Stats().Claimed)
}

// Stopping while a claim from the front is in flight waits for it and hands
// its jobs back (released, attempt refunded): nothing claimed is left
// behind by a stopped pool.
func TestStopWaitsForTheFrontClaimAndHandsItsJobsBack(t *testing.T) {
	f := newFakeData()
	g := newGate()
	fronts, stop := serveClaims(f)
	defer stop()
	r := startPinned(t, f, g)
	front := recv(t, fronts, "no claim from the front")

	stopped := make(chan error, 1)
	go func() { stopped <- r.Stop(context.Background()) }()
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned (%v) with a claim in flight", err)
	case <-time.After(50 * time.Millisecond):
	}
	front.give(jobs(7))
	o := f.nextWrite(t)
	require.Equal(t, []store.Reschedule{{Lease: store.Lease{ID: 7, Token: 7}, Refund: true}}, o.Resched)
	require.NoError(t, recv(t, stopped, "Stop did not return"))
}

// A tenant-capped claim after the bounds whose visit was cut short at its
// step limit (tenants with nothing after their bounds) and came back short
// leaves tenants unvisited: the producer claims on, once round the tenants
// it knows, instead of waiting for a wake-up (a poll interval when none
// comes: an hour here), and stops there; each wake-up starts a round of
// its own. A claim not cut short stops it.
func TestCappedClaimsGoRoundTheTenantsWhenVisitsAreCutShort(t *testing.T) {
	f := newFakeData()
	g := newGate(1)
	r := New(Config{Data: f, WorkerID: "w", Handler: g.handle, Lease: time.Minute, HeartbeatInterval: time.Hour,
		PollInterval: time.Hour, PollOnly: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Pools: []PoolConfig{{Name: "p", Queues: []string{"q"}, Concurrency: 2, BatchSize: 2, TenantCap: 1}}})
	p := r.pools[0]
	var known []store.ClaimedJob
	for i := range 20 { // 20 tenants with bounds: a visit of 4 × 2 steps, 3 claims round them
		known = append(known, tenantJob("q", fmt.Sprintf("t%02d", i), time.Unix(0, 0), int64(100+i)))
	}
	p.keys.observe(false, time.Second, true, known, time.Now())
	slowFront(&p.keys, time.Now()) // claims from the front cost a second: a pin
	require.Equal(t, 3, p.keys.ringClaims(2))
	require.NoError(t, r.Start(context.Background()))
	defer func() { require.NoError(t, r.Stop(context.Background())) }()

	cutShort := func(c claimCall) {
		t.Helper()
		require.Equal(t, store.ClaimCappedAfter, c.req.Strategy, "a claim after the tenants' bounds")
		require.NotNil(t, c.req.TenantAfter)
		c.reply <- store.ClaimResult{VisitCut: true}
	}
	// The claims at start (the first, and the first poll's) find nothing
	// and are not cut short: the producer waits.
	for range 2 {
		c := f.nextClaim(t)
		require.NotNil(t, c.req.TenantAfter)
		c.give(nil)
	}
	time.Sleep(50 * time.Millisecond)
	f.noClaim(t)

	p.wake()
	cutShort(f.nextClaim(t))
	cutShort(f.nextClaim(t)) // claimed on without a wake-up
	cutShort(f.nextClaim(t))
	time.Sleep(50 * time.Millisecond)
	f.noClaim(t) // once round the 20 tenants: it waits now

	p.wake() // each wake-up starts a round of its own
	c := f.nextClaim(t)
	c.reply <- store.ClaimResult{Jobs: jobs(1), VisitCut: true} // short, cut short: claim on
	cutShort(f.nextClaim(t))
	cutShort(f.nextClaim(t))
	time.Sleep(50 * time.Millisecond)
	f.noClaim(t)
	require.Equal(t, int64(1), g.waitStarted(t))
	close(g.release[1])
}

// plan is the one place a claim's strategy is chosen: limits first (room
// for a batch at the last look and no rate limit: the plain claim within
// their room, after the bounds unless the pool has a tenant cap; else
// claim_limited from the front), then the tenant cap (after the tenants'
// bounds once claims from the front got expensive), then the plain claim
// (after the queues' bounds likewise).
func TestPlanChoosesTheClaim(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name      string
		tenantCap int
		pinned    bool // claims from the front cost a second: bounds in use
		limits    []string
		rate      bool // a rate limit among them
		tight     bool // they had no room for a batch at the last look
		want      store.ClaimStrategy
		after     bool // After set
		tenants   bool // TenantAfter set
	}{
		{name: "plain", want: store.ClaimPlain},
		{name: "plain, pinned", pinned: true, want: store.ClaimPlain, after: true},
		{name: "capped", tenantCap: 2, want: store.ClaimCapped},
		{name: "capped, pinned", tenantCap: 2, pinned: true, want: store.ClaimCappedAfter, tenants: true},
		{name: "limits with room", limits: []string{"l"}, want: store.ClaimWithinRoom},
		{name: "limits with room, pinned", limits: []string{"l"}, pinned: true, want: store.ClaimWithinRoom, after: true},
		{name: "limits with room, capped and pinned", tenantCap: 2, limits: []string{"l"}, pinned: true, want: store.ClaimWithinRoom},
		{name: "limits without room", limits: []string{"l"}, tight: true, pinned: true, want: store.ClaimLimited},
		{name: "rate limit", limits: []string{"l"}, rate: true, pinned: true, want: store.ClaimLimited},
		{name: "rate limit, capped", tenantCap: 2, limits: []string{"l"}, rate: true, want: store.ClaimLimited},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newFake(newFakeData(), newGate(), 2, 2)
			p := r.pools[0]
			p.cfg.TenantCap, p.keys = tc.tenantCap, newKeyset(tc.tenantCap > 0)
			p.limitKind.rate, p.limitsTight = tc.rate, tc.tight
			p.tenantCursor["q"] = "t0"
			if tc.pinned {
				p.keys.observe(false, time.Second, true, []store.ClaimedJob{tenantJob("q", "t1", time.Unix(0, 0), 10)}, now)
				slowFront(&p.keys, now)
			}
			req := p.plan(2, tc.limits, now)
			require.Equal(t, tc.want, req.Strategy)
			require.Equal(t, tc.after, req.After != nil, "After")
			require.Equal(t, tc.tenants, req.TenantAfter != nil, "TenantAfter")
			if tc.tenants {
				require.Contains(t, req.TenantAfter["q"], "t1")
			}
			require.Equal(t, tc.limits, req.Limits)
			capped := req.Strategy == store.ClaimCapped || req.Strategy == store.ClaimCappedAfter
			if capped {
				require.Equal(t, tc.tenantCap, req.TenantCap)
				require.Equal(t, map[string]string{"q": "t0"}, req.TenantCursor)
			} else {
				require.Zero(t, req.TenantCap, "limits set the tenant cap aside")
			}
			require.Equal(t, 2, req.Batch)
			require.Equal(t, []string{"q"}, req.Queues)
		})
	}
}

// What a claim learned comes back in its result, and the producer acts on
// it: a capped claim's cursors are where the next capped claim starts, and
// a claim within the limits' room that found none (Tight) makes the next
// claims claim_limited, without looking again, until the limits are re-read.
func TestProducerActsOnWhatTheClaimLearned(t *testing.T) {
	t.Run("cursors", func(t *testing.T) {
		f := newFakeData()
		r := New(Config{Data: f, WorkerID: "w", Handler: newGate().handle, Lease: time.Minute, HeartbeatInterval: time.Hour,
			PollInterval: time.Hour, PollOnly: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Pools: []PoolConfig{{Name: "p", Queues: []string{"q"}, Concurrency: 2, BatchSize: 2, TenantCap: 1}}})
		require.NoError(t, r.Start(context.Background()))
		defer func() { require.NoError(t, r.Stop(context.Background())) }()
		c := f.nextClaim(t)
		require.Equal(t, store.ClaimCapped, c.req.Strategy)
		require.Empty(t, c.req.TenantCursor, "no tenant visited yet")
		c.reply <- store.ClaimResult{Cursors: map[string]string{"q": "t5"}, VisitCut: false}
		c = f.nextClaim(t) // the first poll tick
		require.Equal(t, map[string]string{"q": "t5"}, c.req.TenantCursor, "the next visit starts after the last one's cursor")
		c.reply <- store.ClaimResult{Cursors: map[string]string{"q": "t9"}}
		r.pools[0].wake()
		c = f.nextClaim(t)
		require.Equal(t, map[string]string{"q": "t9"}, c.req.TenantCursor)
		c.give(nil)
	})
	t.Run("tight", func(t *testing.T) {
		f := newFakeData()
		f.limits = []store.CoveringLimit{{Name: "l"}} // a concurrency limit
		g := newGate(1, 2, 3, 4, 5, 6)
		r := newFake(f, g, 4, 2)
		// A short limited claim makes completions wake the queue's claimers,
		// through the store's channel name.
		r.cfg.Store = store.New("skiplock")
		require.NoError(t, r.Start(context.Background()))
		c := f.nextClaim(t)
		require.Equal(t, store.ClaimWithinRoom, c.req.Strategy, "room for a batch until told otherwise")
		require.Equal(t, []string{"l"}, c.req.Limits)
		c.reply <- store.ClaimResult{Jobs: jobs(1, 2), Tight: true} // no room: claimed with claim_limited
		c = f.nextClaim(t)                                          // full: claims on
		require.Equal(t, store.ClaimLimited, c.req.Strategy, "no room at the last look: claim_limited without looking")
		c.give(jobs(3, 4))
		c = f.nextClaim(t)
		require.Equal(t, store.ClaimLimited, c.req.Strategy, "still, until the limits are re-read")
		c.give(jobs(5, 6))            // full, and no slot free: the producer waits
		served := make(chan struct{}) // then answer every claim: nothing more to run
		go func() {
			for {
				select {
				case c := <-f.claims:
					c.give(nil)
				case <-served:
					return
				}
			}
		}()
		defer close(served)
		stopped := make(chan error, 1)
		go func() { stopped <- r.Stop(context.Background()) }()
		for id := range int64(6) {
			close(g.release[id+1])
		}
		require.NoError(t, recv(t, stopped, "Stop did not return"))
	})
}

// While claims come back full and executors wait for work, a plain pool
// claims the next batch ahead, beside its own claim: two claims in flight,
// so one claim's round trip overlaps the other's (three when it is bound
// by its claims, its own claim then taking five batches). What they bring
// is in hand on top of Concurrency + BatchSize; once every executor is
// busy the pool claims no more ahead. A tenant-capped pool has one claim
// in flight whatever comes back (its claims decide shares from the last
// one), of two batches while claims come back full; a pool of one executor
// claims one batch at a time (its jobs run in claim order).
func TestClaimsAheadWhileClaimsComeBackFull(t *testing.T) {
	f := newFakeData()
	g := newGate(1, 2, 3, 4, 5, 6, 7, 8)
	r := startFake(t, f, g, 4, 2)
	f.nextClaim(t).give(jobs(1, 2)) // full, and two of four executors wait for work
	a, b := f.nextClaim(t), f.nextClaim(t)
	require.Equal(t, 2, a.req.Batch)
	require.Equal(t, 2, b.req.Batch, "a second claim while the first is in flight")
	a.give(jobs(3, 4))
	b.give(jobs(5, 6))
	inHand := int64(6)
	// The producer's own claim may end before the one ahead and claim again
	// meanwhile, up to the batch ahead on top of Concurrency + BatchSize.
	select {
	case c := <-f.claims:
		require.LessOrEqual(t, inHand+int64(c.req.Batch), int64(4+2*2), "in hand at most Concurrency + 2 × BatchSize")
		c.give(jobs(7, 8)[:c.req.Batch])
		inHand += int64(c.req.Batch)
	case <-time.After(100 * time.Millisecond):
	}
	for range 4 {
		g.waitStarted(t)
	}
	time.Sleep(50 * time.Millisecond) // the producer settles: every executor busy
	f.noClaim(t)
	for id := range int64(8) {
		close(g.release[id+1])
	}
	require.NoError(t, r.Stop(context.Background()))
	s := r.Stats()
	require.Equal(t, inHand, s.Claimed)

	f = newFakeData()
	g = newGate(1, 2)
	r = New(Config{Data: f, WorkerID: "w", Handler: g.handle, Lease: time.Minute, HeartbeatInterval: time.Hour,
		PollInterval: time.Hour, PollOnly: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Pools: []PoolConfig{{Name: "p", Queues: []string{"q"}, Concurrency: 4, BatchSize: 2, TenantCap: 1}}})
	require.NoError(t, r.Start(context.Background()))
	f.nextClaim(t).reply <- store.ClaimResult{Jobs: jobs(1, 2)}
	c := f.nextClaim(t)
	require.Equal(t, 4, c.req.Batch, "a capped pool claims two batches in one while claims come back full")
	time.Sleep(50 * time.Millisecond)
	f.noClaim(t) // not while c is in flight
	c.give(nil)
	c = f.nextClaim(t) // the first poll tick
	require.Equal(t, 2, c.req.Batch, "one batch once a claim came back short")
	c.give(nil)
	close(g.release[1])
	close(g.release[2])
	require.NoError(t, r.Stop(context.Background()))

	// When a claim ahead is due, by the pool alone (not started: no claim).
	// aside: claims ahead already in flight (each holding a batch of 2);
	// front: a claim from the front in flight too (holding 2); bound: the
	// pool is bound by its claims; starved: an executor waited for work
	// since the last claim ahead began.
	for _, tc := range []struct {
		concurrency, inHand, aside        int
		front, full, bound, starved, want bool
	}{
		{concurrency: 4, inHand: 0, full: true, want: true},
		{concurrency: 4, inHand: 3, full: true, want: true},
		{concurrency: 4, inHand: 4, full: true, want: false}, // every executor busy
		{concurrency: 4, inHand: 0, full: false, want: false},
		{concurrency: 1, inHand: 0, full: true, want: false}, // one executor: claim order
		// Bound by its claims, executors that waited for work ask for more
		// claims ahead, up to claimsAhead, whatever is in hand.
		{concurrency: 4, inHand: 6, full: true, bound: true, starved: true, want: true},
		{concurrency: 4, inHand: 8, aside: 1, full: true, bound: true, starved: true, want: true},
		{concurrency: 4, inHand: 3, aside: 1, full: true, bound: true, want: false},                // nobody waited since
		{concurrency: 4, inHand: 3, aside: 1, full: true, starved: true, want: false},              // executors are the bound
		{concurrency: 4, inHand: 3, aside: 2, full: true, bound: true, starved: true, want: false}, // claimsAhead in flight
		{concurrency: 4, inHand: 0, aside: 1, full: false, bound: true, starved: true, want: false},
		// A claim from the front beside is not a claim ahead.
		{concurrency: 4, inHand: 3, front: true, full: true, want: true},
		{concurrency: 4, inHand: 3, aside: 2, front: true, full: true, bound: true, starved: true, want: false},
	} {
		p := newFake(newFakeData(), newGate(), tc.concurrency, 2).pools[0]
		p.aheadOut, p.asideHeld, p.frontOut = tc.aside, 2*tc.aside, tc.front
		if tc.front {
			p.asideHeld += 2
		}
		p.starved.Store(tc.starved)
		require.Equal(t, tc.want, p.aheadDue(&producing{full: tc.full, inflight: tc.inHand + p.asideHeld, claimBound: tc.bound}), "%+v", tc)
	}
	// The periodic claim from the front (bounds in use, its gap passed)
	// starts beside claims ahead, which in a backlog follow one another
	// without pause; not beside another claim from the front.
	p := newFake(newFakeData(), newGate(), 4, 2).pools[0]
	p.keys.after = map[string]store.Bound{"q": {}}
	p.keys.fullCost = p.keys.cheap
	p.aheadOut = claimsAhead
	require.True(t, p.frontDue(), "beside the claims ahead")
	require.Nil(t, p.keys.bounds(time.Now(), p.frontOut), "the producer's own claim reads from the front while none runs beside")
	p.frontOut = true
	require.False(t, p.frontDue(), "one claim from the front at a time")
	require.NotNil(t, p.keys.bounds(time.Now(), p.frontOut), "the producer's own claim reads after the bounds meanwhile")
	// Bound by its claims: a batch's run across the executors is shorter
	// than boundMargin claims (mean run × BatchSize < 4 × Concurrency ×
	// claim). Here Concurrency 4, BatchSize 2, claims of 2 ms: bound while a
	// batch's run is under 4 × 4 × 2 ms = 32 ms.
	for _, tc := range []struct {
		finished int64
		ran      time.Duration
		claim    time.Duration
		want     bool
		runs     int // runsPerClaim: Concurrency × claim ÷ mean run
	}{
		{finished: 50, ran: 50 * 20 * time.Microsecond, claim: 2 * time.Millisecond, want: true, runs: 400}, // no-op jobs
		{finished: 50, ran: 50 * 5 * time.Millisecond, claim: 2 * time.Millisecond, want: true, runs: 1},    // 5 ms jobs: a batch's run (10 ms) between one claim and four
		{finished: 50, ran: 50 * 15 * time.Millisecond, claim: 2 * time.Millisecond, want: true, runs: 0},   // 15 ms jobs: 30 ms < 32
		{finished: 50, ran: 50 * 16 * time.Millisecond, claim: 2 * time.Millisecond, want: false, runs: 0},  // 16 ms jobs: 32 ms, four claims' time
		{finished: 50, ran: 50 * 40 * time.Millisecond, claim: 2 * time.Millisecond, want: false, runs: 0},  // 40 ms jobs
		{finished: 0, claim: 2 * time.Millisecond, want: false},                                             // nothing finished yet: as before
	} {
		p := newFake(newFakeData(), newGate(), 4, 2).pools[0]
		s := &producing{}
		p.noteClaim(s, time.Second) // the start: nothing run
		p.ranNanos.Store(int64(tc.ran))
		s.finished = tc.finished
		p.noteClaim(s, tc.claim)
		require.Equal(t, tc.want, s.claimBound, "%+v", tc)
		require.Equal(t, tc.runs, s.runsPerClaim, "%+v", tc)
	}
	// How many batches a pool claims in one, by the pool alone.
	for _, tc := range []struct {
		concurrency, tenantCap int
		full, bound            bool
		want                   int
	}{
		{concurrency: 4, tenantCap: 1, full: true, want: 2},
		{concurrency: 4, tenantCap: 1, full: true, bound: true, want: batchesBound}, // bound by its claims
		{concurrency: 4, tenantCap: 1, full: false, want: 1},
		{concurrency: 4, tenantCap: 1, full: false, bound: true, want: 1},           // no backlog
		{concurrency: 4, tenantCap: 0, full: true, bound: true, want: batchesBound}, // uncapped, bound by its claims: five too, and claims ahead
		{concurrency: 4, tenantCap: 0, full: true, want: 1},                         // uncapped, bound by its executors: one at a time
		{concurrency: 1, tenantCap: 0, full: true, bound: true, want: 1},
		{concurrency: 1, tenantCap: 1, full: true, bound: true, want: 1},
	} {
		p := newFake(newFakeData(), newGate(), tc.concurrency, 2).pools[0]
		p.cfg.TenantCap = tc.tenantCap
		require.Equal(t, tc.want, p.batchesInOne(&producing{full: tc.full, claimBound: tc.bound}), "%+v", tc)
	}
	p = newFake(newFakeData(), newGate(), 4, 2).pools[0]
	p.cfg.TenantCap, p.limits = 1, []string{"l"}
	require.Equal(t, 1, p.batchesInOne(&producing{full: true, claimBound: true}), "limits cover the pool: one batch, in order")
	// A capped pool bound by its claims: a claim of five batches fits
	// beside nothing, and beside another of five batches just claimed when
	// the executors run them in the time a claim takes (runsPerClaim), not
	// beside more; in hand at most Concurrency + 2 × batchesBound ×
	// BatchSize, what the jobs channel of a capped pool holds.
	p = newFake(newFakeData(), newGate(), 4, 2).pools[0]
	p.cfg.TenantCap = 1
	p = newPool(p.r, p.cfg)
	ps := &producing{limit: 4 + 2, threshold: 1, more: true, full: true, claimBound: true}
	require.Equal(t, batchesBound*2, p.claimSize(ps))
	ps.inflight = batchesBound * 2
	require.Equal(t, ps.limit-2, p.claimSize(ps), "nothing runs while a claim is out (runsPerClaim 0): what the limit leaves")
	ps.runsPerClaim = 3
	require.Equal(t, ps.limit-2+3, p.claimSize(ps), "three run while it is out: three more")
	ps.runsPerClaim = 400
	require.Equal(t, batchesBound*2, p.claimSize(ps), "no more than five batches")
	ps.inflight = ps.limit + (2*batchesBound-1)*2
	require.Zero(t, p.claimSize(ps), "the channel is full")
	require.Equal(t, cap(p.jobs), ps.limit+(2*batchesBound-1)*2)
	// An uncapped pool's: the same, and a batch for each claim ahead; bound
	// by its claims, its producer's claim takes five batches too, the
	// claims ahead one each.
	p = newFake(newFakeData(), newGate(), 4, 2).pools[0]
	require.Equal(t, 4+(2*batchesBound+claimsAhead)*2, cap(p.jobs))
	ps = &producing{limit: 4 + 2, threshold: 1, more: true, full: true, claimBound: true, runsPerClaim: 400}
	require.Equal(t, batchesBound*2, p.claimSize(ps))
	ps.claimBound = false
	require.Equal(t, 2, p.claimSize(ps), "bound by its executors: one batch")
	p.aheadOut = 2
	ps.inflight = 4 + 2*2
	require.Equal(t, 2, p.claimSize(ps), "the claims ahead's batches are in hand on top of the limit")
	ps.inflight += 2
	require.Zero(t, p.claimSize(ps), "the limit and the claims ahead's batches in hand: nothing free")
}

// A waiter that starts listening tells the worker processes at once
// (listen_done's NOTIFY on the waiters' channel), and they announce the
// ends they write from then on; a look for waiters that was on its way
// when the waiter told, and answers none, does not undo that; the next
// look's answer stands.
func TestWaiterThatToldIsAnnouncedToAtOnce(t *testing.T) {
	t.Parallel()
	f := newFakeData()
	asked, answer := make(chan struct{}), make(chan bool)
	f.waiters = func() bool {
		asked <- struct{}{}
		return <-answer
	}
	r := New(Config{Data: f, Store: store.New("skiplock"), WorkerID: "w", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	look := func(during func(), says bool) {
		t.Helper()
		done := make(chan struct{})
		go func() { defer close(done); r.checkWaiters(context.Background()) }()
		recv(t, asked, "checkWaiters did not ask")
		during()
		answer <- says
		recv(t, done, "checkWaiters did not return")
	}
	require.False(t, r.announce.Load(), "nobody waits yet")
	look(func() {
		r.onNotify(r.cfg.Store.WaitersChannel(), "")
		require.True(t, r.announce.Load(), "told: announce at once")
	}, false)
	require.True(t, r.announce.Load(), "an answer older than the waiter's word does not undo it")
	look(func() {}, false)
	require.False(t, r.announce.Load(), "the next look's answer stands: the waiter left")
	look(func() {}, true)
	require.True(t, r.announce.Load())
	r.onNotify(r.cfg.Store.CancelChannel(), "not a job id")
	require.True(t, r.announce.Load(), "other channels leave it")
}
