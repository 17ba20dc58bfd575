package worker

import (
	"slices"
	"sync"
	"time"
)

// The hand-off: a job this process enqueues while one of its pools waits
// idle is claimed for that pool in the enqueue's own transaction (the
// client's Enqueue, store.EnqueueClaimed) and given to it here, so it starts
// without a claim's round trip after the enqueue's commit. The pool takes
// part through offers: while its producer waits with nothing to claim, the
// executors it has free are open to offers (offers.open); each offer taken
// holds one (offers.reserved) until the enqueue answers it, with the job
// claimed (Deliver puts it straight on the executors' channel) or with
// nothing (Release). The producer counts reserved slots as in hand, and the
// jobs delivered since it last looked (offers.delivered) as in flight, so
// claims and hand-offs never hold more than the pool runs.

// offers is one pool's side of the hand-off, guarded by mu.
type offers struct {
	mu        sync.Mutex
	open      int  // executors free to a hand-off: set while the producer waits idle, else 0
	reserved  int  // offers taken and not yet answered
	delivered int  // jobs delivered to the executors that the producer has not counted yet
	closed    bool // the pool stopped: a late delivery is left to the reaper (Deliver)
}

// Offer is one executor of an idle pool reserved for a job the caller is
// about to enqueue (Runner.Offer). The caller enqueues and claims the job
// for WorkerID with Kinds and Lease, then answers exactly once: Deliver with
// the job claimed, or Release when nothing was (the enqueue failed, or the
// job was not claimable by this pool).
type Offer struct {
	p    *pool
	once sync.Once
}

// Offer reserves, for a job of queue and kind about to be enqueued by this
// process, a free executor of a pool that serves it and waits idle: the
// pool's last claim came back short, so the job would be its next claim's.
// tenanted says whether the job has a tenant: a tenant-capped pool is not
// offered for it (the cap is counted by its claims). Nor is a pool covered
// by limits (they are counted under their locks by its claims), nor one
// stopping. nil: no pool is idle for it; enqueue as usual.
func (r *Runner) Offer(queue, kind string, tenanted bool) *Offer {
	if !r.started.Load() {
		return nil
	}
	for _, p := range r.pools {
		if p.serves(queue, kind, tenanted) && p.offers.take() {
			return &Offer{p: p}
		}
	}
	return nil
}

// Kinds is the pool's kinds filter for the claim (nil: any kind).
func (o *Offer) Kinds() []string { return o.p.cfg.Kinds }

// WorkerID is the worker id the job is claimed for.
func (o *Offer) WorkerID() string { return o.p.r.cfg.WorkerID }

// Lease is the lease the job is claimed with.
func (o *Offer) Lease() time.Duration { return o.p.r.cfg.Lease }

// Deliver gives the pool the job claimed for it: it is tracked (its lease
// heartbeated) from now on and goes to the executor reserved for it, or,
// if the pool is stopping, back to ready; after a hard stop that did not
// wait for the offer, to the reaper once its lease expires.
func (o *Offer) Deliver(j Job) {
	o.once.Do(func() {
		p := o.p
		job := p.r.track([]Job{j})[0]
		p.r.claimed.Add(1)
		p.r.handedOff.Add(1)
		p.offers.mu.Lock()
		p.offers.reserved--
		closed, queued := p.offers.closed, false
		if !closed {
			select {
			case p.jobs <- job: // its executor was reserved: room by construction
				p.offers.delivered++
				queued = true
			default:
			}
		}
		p.offers.mu.Unlock()
		switch {
		case closed:
			// After a hard stop that did not wait for this offer, the
			// runner may have stopped writing: no heartbeat keeps the
			// lease, which expires, and a reaper hands the job back.
			p.r.untrack([]*Job{job})
		case !queued:
			p.r.execute(job, true) // not run: released, its attempt refunded
		}
	})
}

// Release answers the offer with no job: its executor is free again.
func (o *Offer) Release() {
	o.once.Do(func() {
		o.p.offers.mu.Lock()
		o.p.offers.reserved--
		o.p.offers.mu.Unlock()
	})
}

// serves reports whether the pool would claim a job of queue and kind.
func (p *pool) serves(queue, kind string, tenanted bool) bool {
	return slices.Contains(p.cfg.Queues, queue) && (p.cfg.Kinds == nil || slices.Contains(p.cfg.Kinds, kind)) &&
		(p.cfg.TenantCap == 0 || !tenanted)
}

// take reserves one open executor: open counts those free when the
// producer began to wait, and the producer counts the jobs delivered since
// only when it next looks.
func (o *offers) take() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.reserved+o.delivered >= o.open {
		return false
	}
	o.reserved++
	return true
}

// count adds the jobs delivered since the producer last looked to those it
// has in flight, and returns the slots still reserved by offers.
func (o *offers) count(s *producing) (reserved int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	s.inflight += o.delivered
	o.delivered = 0
	return o.reserved
}

// openIdle opens the pool's free executors to offers while the producer
// waits with nothing to claim (its last claim came back short) and no
// limit covers it: those not running or holding a job (offers already
// taken hold some of them: take counts them). It reports whether it
// opened any; closeAll closes them again. Outside openIdle, claimNext's
// openOffers and closeAll the offers are closed, so a busy producer does
// nothing here.
func (p *pool) openIdle(s *producing) bool {
	if s.more {
		return false
	}
	return p.openOffers(s, 0)
}

// openOffers opens to offers the executors free once n jobs being claimed
// have theirs (at most Concurrency + BatchSize in hand), unless a limit
// covers the pool or it is stopping: n = 0 from an idle wait (openIdle),
// n the claim's size through the claim that wait ends in (the poll, or a
// wake-up: producing.fromIdle, claimNext). An idle pool's poll claim
// (every PollInterval) usually finds nothing, and while it ran the offers
// were closed: a job this process enqueued then went to ready and waited
// for that claim and the next: 2-25 ms, where a hand-off takes a fraction
// of a millisecond, in 2-3 of the 10 slowest of 1,000 idle pickups (issue
// 40).
func (p *pool) openOffers(s *producing, n int) bool {
	if len(p.limits) > 0 || p.stopping() {
		return false
	}
	p.offers.count(s)
	o := &p.offers
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.closed {
		free := min(p.cfg.Concurrency, p.cfg.Concurrency+p.cfg.BatchSize-n)
		o.open = max(0, free-s.inflight)
	}
	return o.open > 0
}

// closeAll closes the offers: none can be taken until openIdle.
func (o *offers) closeAll() {
	o.mu.Lock()
	o.open = 0
	o.mu.Unlock()
}

// stopOffers closes the offers for good once those taken are answered (a
// hard stop ends the wait: a late delivery is then left to the reaper, see
// Deliver) and counts the jobs delivered.
func (p *pool) stopOffers(s *producing) {
	p.offers.closeAll()
	for p.offers.count(s) > 0 && p.r.hardCtx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	p.offers.mu.Lock()
	p.offers.closed = true
	p.offers.mu.Unlock()
	p.offers.count(s)
}
