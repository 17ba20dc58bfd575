package worker

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/store"
)

// offerSoon takes an offer for a job of queue "q" and kind "k" once the
// producer waits idle (it parks a moment after its claim is answered).
func offerSoon(t *testing.T, r *Runner) *Offer {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if o := r.Offer("q", "k", false); o != nil {
			return o
		}
	}
	t.Fatal("no offer: the pool never waited idle")
	return nil
}

// An idle pool offers its free executors, one offer each, to jobs of its
// queues and kinds; a delivered job runs at once and is written like a
// claimed one; a released offer frees its executor again.
func TestIdlePoolOffersItsFreeExecutors(t *testing.T) {
	f := newFakeData()
	g := newGate(10, 11)
	r := newFake(f, g, 2, 4)
	require.Nil(t, r.Offer("q", "k", false), "not started")
	require.NoError(t, r.Start(context.Background()))

	c := f.nextClaim(t)
	require.Nil(t, r.Offer("q", "k", false), "claiming, not idle")
	c.give(nil) // short: the queue is empty
	f.nextClaim(t).give(nil)

	o1, o2 := offerSoon(t, r), offerSoon(t, r)
	require.Nil(t, r.Offer("q", "k", false), "two executors, both reserved")
	require.Nil(t, r.Offer("other", "k", false), "not a queue of the pool")
	require.Equal(t, "w", o1.WorkerID())
	require.Equal(t, time.Minute, o1.Lease())
	require.Nil(t, o1.Kinds())

	o1.Deliver(jobs(10)[0])
	require.EqualValues(t, 10, g.waitStarted(t), "the delivered job runs without a claim")
	o2.Release()
	o2.Release() // answered once: the second does nothing
	o3 := offerSoon(t, r)
	require.Nil(t, r.Offer("q", "k", false), "one executor runs job 10, the other is reserved")
	o3.Deliver(jobs(11)[0])
	require.EqualValues(t, 11, g.waitStarted(t))
	f.noClaim(t)

	close(g.release[10])
	close(g.release[11])
	require.Equal(t, []int64{10, 11}, f.nextDone(t, 2))
	require.NoError(t, r.Stop(context.Background()))
	s := r.Stats()
	require.EqualValues(t, 2, s.Claimed)
	require.EqualValues(t, 2, s.HandedOff)
	require.EqualValues(t, 2, s.Completed)
	require.Nil(t, r.Offer("q", "k", false), "stopped")
}

// A tenant-capped pool is offered only jobs without a tenant, a pool with a
// kinds filter only its kinds, and a pool covered by a limit nothing.
func TestOffersFollowWhatThePoolWouldClaim(t *testing.T) {
	f := newFakeData()
	g := newGate()
	r := New(Config{Data: f, WorkerID: "w", Handler: g.handle, Lease: time.Minute, HeartbeatInterval: time.Hour,
		PollInterval: time.Hour, PollOnly: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Pools: []PoolConfig{{Name: "p", Queues: []string{"q"}, Kinds: []string{"k"}, Concurrency: 2, BatchSize: 2, TenantCap: 1}}})
	require.NoError(t, r.Start(context.Background()))
	f.nextClaim(t).give(nil)
	f.nextClaim(t).give(nil)
	o := offerSoon(t, r)
	o.Release()
	require.Nil(t, r.Offer("q", "other", false), "a kind the pool does not claim")
	require.Nil(t, r.Offer("q", "k", true), "a tenant's job: the cap is counted by claims")
	require.NoError(t, r.Stop(context.Background()))
}

// The producer opens its executors to offers only while it waits with
// nothing to claim, no limit covering it, and only those not running or
// holding a job.
func TestOpenIdleOpensOnlyAnIdlePoolsFreeExecutors(t *testing.T) {
	for _, c := range []struct {
		name     string
		more     bool
		inflight int
		limits   []string
		open     int
	}{
		{"idle", false, 0, nil, 3},
		{"idle, one running", false, 1, nil, 2},
		{"idle, all running", false, 3, nil, 0},
		{"about to claim", true, 0, nil, 0},
		{"covered by a limit: its claims count it", false, 0, []string{"l"}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newFake(newFakeData(), newGate(), 3, 2).pools[0]
			p.limits = c.limits
			opened := p.openIdle(&producing{more: c.more, inflight: c.inflight})
			require.Equal(t, c.open > 0, opened)
			require.Equal(t, c.open, p.offers.open)
			for range c.open {
				require.True(t, p.offers.take())
			}
			require.False(t, p.offers.take(), "no more than open")
			p.offers.closeAll()
			p.offers.reserved = 0
			require.False(t, p.offers.take(), "closed")
		})
	}
}

// Stop waits for an offer taken before it to be answered, and a job
// delivered once the pool is stopping is handed back to ready (attempt
// refunded), never run.
func TestStopHandsBackAJobDeliveredLate(t *testing.T) {
	f := newFakeData()
	g := newGate(20)
	r := startFake(t, f, g, 1, 1)
	f.nextClaim(t).give(nil)
	f.nextClaim(t).give(nil)
	o := offerSoon(t, r)

	stopped := make(chan error, 1)
	go func() { stopped <- r.Stop(context.Background()) }()
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned (%v) with an offer unanswered", err)
	case <-time.After(50 * time.Millisecond):
	}
	o.Deliver(jobs(20)[0])
	w := f.nextWrite(t)
	require.Empty(t, w.Done)
	require.Equal(t, []store.Reschedule{{Lease: store.Lease{ID: 20, Token: 20}, Refund: true}}, w.Resched,
		"handed back, attempt refunded")
	require.NoError(t, <-stopped)
	select {
	case id := <-g.started:
		t.Fatalf("job %d ran after the stop", id)
	default:
	}
}

// A hard stop does not wait for an offer's answer; a job delivered after it
// is neither run nor written (the runner has stopped writing): untracked, its
// lease left to expire for a reaper to hand it back.
func TestJobDeliveredAfterAHardStopIsLeftToTheReaper(t *testing.T) {
	f := newFakeData()
	g := newGate()
	r := startFake(t, f, g, 1, 1)
	f.nextClaim(t).give(nil)
	f.nextClaim(t).give(nil)
	o := offerSoon(t, r)

	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no drain: the hard stop at once
	require.NoError(t, r.Stop(ctx))
	o.Deliver(jobs(30)[0])
	require.Zero(t, r.Stats().Running, "not tracked: no heartbeat keeps its lease")
	select {
	case w := <-f.writes:
		t.Fatalf("written after the stop: %+v", w)
	case id := <-g.started:
		t.Fatalf("job %d ran after the stop", id)
	case <-time.After(50 * time.Millisecond):
	}
}

// An offer taken before the producer woke and parked again still holds its
// executor, and the other one is open: the producer's reopening counts the
// free executors, and take counts the offers taken against them.
func TestOffersSurviveTheProducerParkingAgain(t *testing.T) {
	f := newFakeData()
	g := newGate(40, 41)
	r := startFake(t, f, g, 2, 2)
	f.nextClaim(t).give(nil)
	f.nextClaim(t).give(nil)
	o1 := offerSoon(t, r)

	r.pools[0].wake() // a NOTIFY: the producer claims, finds nothing, parks again
	c := f.nextClaim(t)
	require.Equal(t, 2, c.req.Batch, "three of four slots free; the claim is one batch")
	c.give(nil)
	o2 := offerSoon(t, r) // the second executor, open again
	require.Nil(t, r.Offer("q", "k", false), "both reserved")
	o1.Deliver(jobs(40)[0])
	o2.Deliver(jobs(41)[0])
	started := []int64{g.waitStarted(t), g.waitStarted(t)}
	require.ElementsMatch(t, []int64{40, 41}, started)
	close(g.release[40])
	close(g.release[41])
	require.Equal(t, []int64{40, 41}, f.nextDone(t, 2))
	require.NoError(t, r.Stop(context.Background()))
	require.EqualValues(t, 2, r.Stats().HandedOff)
}

// The claim an idle wait ends in (a wake-up here; the poll alike) keeps the
// executors it leaves free open to offers while it runs: a job this process
// enqueues meanwhile is handed off and runs before that claim answers,
// where it used to go to ready and wait for that claim and the next. The
// offers stop at what the pool may hold: three executors, a claim of one
// batch (one job), so three offers and the claim's job make Concurrency +
// BatchSize. The first claim after the start is not from an idle wait:
// no offers while it runs.
func TestIdleClaimKeepsItsFreeExecutorsOpenToOffers(t *testing.T) {
	f := newFakeData()
	g := newGate(50, 51)
	r := startFake(t, f, g, 3, 1)
	first := f.nextClaim(t)
	require.Nil(t, r.Offer("q", "k", false), "the first claim is not from an idle wait")
	first.give(nil)
	f.nextClaim(t).give(nil)
	offerSoon(t, r).Release() // parked idle, offers open

	r.pools[0].wake() // a NOTIFY of another process's job: the producer claims
	c := f.nextClaim(t)
	require.Equal(t, 1, c.req.Batch)
	var taken []*Offer
	for o := r.Offer("q", "k", false); o != nil; o = r.Offer("q", "k", false) {
		taken = append(taken, o)
	}
	require.Len(t, taken, 3, "every executor the claim of one leaves free, and no more")
	taken[0].Deliver(jobs(50)[0])
	require.EqualValues(t, 50, g.waitStarted(t), "the handed-off job runs while the claim is out")
	taken[1].Release()
	taken[2].Release()

	c.give(jobs(51)) // the claim's own job: an executor is free for it
	require.EqualValues(t, 51, g.waitStarted(t))
	require.Nil(t, r.Offer("q", "k", false), "the claim came back full: the producer claims again, offers closed")
	f.nextClaim(t).give(nil)
	close(g.release[50])
	close(g.release[51])
	require.Equal(t, []int64{50, 51}, f.nextDone(t, 2))
	require.NoError(t, r.Stop(context.Background()))
	require.EqualValues(t, 1, r.Stats().HandedOff)
	require.EqualValues(t, 2, r.Stats().Claimed)
}
