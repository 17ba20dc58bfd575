package worker

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/skiplock/skiplock/internal/store"
)

// pool is one worker pool: a producer goroutine that claims and a fixed set
// of executor goroutines that run. The producer keeps up to Concurrency +
// BatchSize jobs in hand, so a freed executor finds its next job already
// claimed: there is no fetch cooldown, and claims stay batched.
type pool struct {
	r   *Runner
	cfg PoolConfig

	jobs   chan *Job     // claimed, waiting for an executor
	done   chan struct{} // one token per finished job (executor → producer)
	wakeCh chan struct{} // NOTIFY for one of our queues, or a reconnect
	stopCh chan struct{} // closed by stopClaiming

	stopOnce sync.Once
	wg       sync.WaitGroup // producer and executors

	keys keyset // where claims start reading; the producer's alone

	// The claims running beside the producer's own: the periodic claim
	// from the front while claims read after the bounds (keyset.frontDue),
	// and up to claimsAhead next batches claimed ahead while claims come
	// back full (aheadDue). Their results arrive on front.
	front     chan frontResult
	frontOut  bool // the claim from the front is in flight
	aheadOut  int  // claims ahead in flight
	asideHeld int  // the slots the claims beside hold in hand for their batches

	// What the executors tell the producer: an executor found no job
	// waiting since the last claim ahead began (starved), and the time
	// their handlers ran, in all (ranNanos).
	starved  atomic.Bool
	ranNanos atomic.Int64

	// tenantCursor is, per queue, the last tenant the capped claim visited
	// (round-robin fair share; store.ClaimResult.Cursors); the producer's
	// alone.
	tenantCursor map[string]string

	// The limits covering this pool's work, re-read every limitsRefresh
	// (the producer's alone).
	limits      []string
	limitsAt    time.Time
	limitKind   struct{ rate, concurrency bool } // which kinds of limit are among them
	limitsTight bool                             // they had no room for a batch at the last look (store.ClaimResult.Tight)
	heldBack    bool                             // the last claim was limited and short: completions wake claimers
	capAside    bool                             // logged that limits set the tenant cap aside

	// offers: the executors this pool, idle, holds open to jobs its own
	// process enqueues (handoff.go).
	offers offers
}

// limitsRefresh is how soon a limit set or removed anywhere is obeyed.
const limitsRefresh = 2 * time.Second

func newPool(r *Runner, cfg PoolConfig) *pool {
	// Room for every job in hand: Concurrency + BatchSize, a batch more for
	// each batch more in the producer's claim (batchesInOne) and, bound by
	// its claims, for as many again run while the claim is out (claimSize),
	// and in a pool without a tenant cap a batch for each claim ahead in
	// flight (aheadDue).
	batches := 2 * batchesBound
	if cfg.TenantCap == 0 {
		batches += claimsAhead
	}
	inHand := cfg.Concurrency + batches*cfg.BatchSize
	return &pool{
		r: r, cfg: cfg,
		jobs:   make(chan *Job, inHand),
		done:   make(chan struct{}, inHand),
		wakeCh: make(chan struct{}, 1),
		stopCh: make(chan struct{}),
		keys:   newKeyset(cfg.TenantCap > 0),
		front:  make(chan frontResult, 1+claimsAhead),

		tenantCursor: map[string]string{},
	}
}

func (p *pool) start() {
	p.wg.Add(1 + p.cfg.Concurrency)
	go p.produce()
	for i := 0; i < p.cfg.Concurrency; i++ {
		go p.executeLoop()
	}
}

func (p *pool) wake() {
	select {
	case p.wakeCh <- struct{}{}:
	default:
	}
}

func (p *pool) stopClaiming() { p.stopOnce.Do(func() { close(p.stopCh) }) }

func (p *pool) wait() { p.wg.Wait() }

func (p *pool) stopping() bool {
	select {
	case <-p.stopCh:
		return true
	default:
		return false
	}
}

func (p *pool) executeLoop() {
	defer p.wg.Done()
	for {
		var j *Job
		var ok bool
		select {
		case j, ok = <-p.jobs:
		default:
			p.starved.Store(true) // this executor waits for work
			j, ok = <-p.jobs
		}
		if !ok {
			return
		}
		p.ranNanos.Add(int64(p.r.execute(j, p.stopping())))
		p.done <- struct{}{}
	}
}

// produce is the claim loop: it claims while claims come back full and
// slots are free, then waits for what makes it look again (await). What
// it decides is named: how much to claim (claimSize), whether to claim on
// at once (claimNext, claimOn), and, in plan, which claim.
func (p *pool) produce() {
	defer p.wg.Done()
	defer close(p.jobs)
	limit := p.cfg.Concurrency + p.cfg.BatchSize
	s := &producing{limit: limit, threshold: max(1, min(p.cfg.BatchSize, limit)/2), more: true, poll: time.NewTimer(0)}
	defer s.poll.Stop()
	for {
		p.countFinished(s)
		if n := p.claimSize(s); n > 0 && p.frontDue() {
			p.startAside(p.frontRequest(n), false)
			s.inflight += n // held for its batch until it ends
		} else if p.aheadDue(s) {
			p.startAside(p.aheadRequest(p.cfg.BatchSize), true)
			s.inflight += p.cfg.BatchSize
		}
		if n := p.claimSize(s); n > 0 && p.claimNext(s, n) {
			continue
		}
		if !p.await(s) {
			return
		}
	}
}

// producing is the producer goroutine's own state between claims.
type producing struct {
	limit int // jobs in hand at most: Concurrency + BatchSize (and the batches claimed ahead)
	// threshold: claim when at least this many slots are free, so claims
	// stay batched under load but an idle pool claims at once.
	threshold int
	// inflight: jobs claimed and not yet finished by an executor; a claim
	// from the front holds its batch's slots while it runs.
	inflight    int
	more        bool          // claim when slots are free: the last claim was full, or something woke the producer
	full        bool          // the last claim that ended came back full: a backlog, claimed two or three claims at a time (aheadDue) or two or five batches in one (batchesInOne)
	backoff     time.Duration // the wait after a failed claim, doubled by each failure in a row
	entityRaces int           // claims in a row refused by an entity race (retried at once, 3 times)
	cutRun      int           // capped claims in a row that came back short, their visits cut short
	// finished: jobs the executors reported finished, in all; claimBound:
	// the pool is bound by its claims, as the last claim found (noteClaim,
	// from the jobs finished and the time run since the one before).
	finished, finishedAt int64
	ranAt                int64
	claimBound           bool
	// fromIdle: the producer left a wait with its executors open to offers
	// (the poll or a wake-up ended it), and its next claim keeps them open
	// (openOffers).
	fromIdle bool
	// runsPerClaim: the jobs the executors run in the time the last claim
	// took, at the mean run of the jobs finished since the one before
	// (noteClaim); 0 until a claim has found it.
	runsPerClaim int
	poll         *time.Timer // the poll backstop; the wait after a failure, or for a rate window's room
}

// countFinished counts every job finished so far, and every claim from the
// front that ended, before the producer decides. Executors report one
// token each; deciding after the first would, under load, claim exactly
// threshold jobs each time (half a batch), where the slots freed while the
// last claim was in flight allow a full one.
func (p *pool) countFinished(s *producing) {
	for {
		select {
		case <-p.done:
			s.inflight--
			s.finished++
		case r := <-p.front:
			s.inflight -= p.frontEnded(s, r)
			s.more = true
		default:
			return
		}
	}
}

// claimSize is how many jobs to claim now (0: none): while more work is
// probably waiting, enough slots are free and the pool is not stopping.
// The batch of each claim ahead in flight is in hand on top of the limit;
// the slots reserved by offers (handoff.go) are in hand already.
//
// A pool bound by its claims also counts as free the slots its executors
// will have freed by the time the claim returns (up to the claim's size;
// noteClaim's runsPerClaim): its claims in flight are all that feeds them,
// and without these a claim of five batches just after another found room
// for half a batch, so its claims went big, small, big (140 jobs a claim
// on average where 250 were asked, in a tenant-capped pool). 20,000
// tenants × 5 jobs, cap 5, six rounds: 65-104 % of the uncapped drain (median 74)
// before, 75-121 % (median 85) after, 404 claims against 712; handlers
// of 1-3 ms, as fast as before (docs/performance-log.md, issue 40).
func (p *pool) claimSize(s *producing) int {
	reserved := p.offers.count(s)
	free, most := s.limit-s.inflight-reserved+p.aheadOut*p.cfg.BatchSize, p.cfg.BatchSize
	if k := p.batchesInOne(s); k > 1 {
		free, most = free+(k-1)*p.cfg.BatchSize, k*p.cfg.BatchSize
		if s.claimBound {
			free += min(s.runsPerClaim, most)
		}
	}
	if !s.more || free < s.threshold || p.stopping() {
		return 0
	}
	return min(free, most)
}

// batchesInOne is how many batches the producer's claim takes in one:
// batchesBound while claims come back full and the pool is bound by its
// claims (noteClaim), two in a tenant-capped pool whose claims come back
// full otherwise, else one. A claim of k batches divides the round trips,
// and the claim's fixed cost (its plan, its probes, its commit), by k.
// A tenant-capped pool's claims go round the tenants from the cursor the
// last one returned, so two cannot be in flight at once (the second would
// visit the first's tenants again): its one claim of k batches visits k
// times the tenants. 20,000 tenants × 5 jobs, cap 5: two batches drained
// 18-39 % faster than one in three pairs, three 0-35 % faster than two in
// seven (median +18 %; docs/performance-log.md, issue 40). An uncapped
// pool bound by its claims has claims ahead in flight besides (aheadDue),
// and its claims of one batch each left it behind the capped one: a
// no-op drain of 100,000 jobs (32 workers, batch 50) ran 17,700-21,000
// jobs/s in 2,100 claims, 24,900-27,700 in 700 with five batches in the
// producer's claim (five pairs, the same minutes; issue 40). An uncapped
// pool that is not bound by its claims (a batch's run across its
// executors outlasts boundMargin claims) keeps to one batch a claim: more
// would only wait in this process, away from the others. In hand: k - 1
// batches more, and bound by its claims what its executors run while the
// claim is out (claimSize). A pool of one executor only holds more jobs
// waiting; under limits, one batch in order.
func (p *pool) batchesInOne(s *producing) int {
	switch {
	case !s.full || p.cfg.Concurrency < 2 || len(p.limits) > 0:
		return 1
	case s.claimBound:
		return batchesBound
	case p.cfg.TenantCap == 0:
		return 1
	default:
		return 2
	}
}

// batchesBound is how many batches a pool bound by its claims claims in
// one: five. A tenant-capped pool's one claim in flight carries what an
// uncapped pool's three carried (its own and claimsAhead) and then some,
// the in-hand jobs it may hold being those of its executors, four batches
// and what they run while the claim is out (at most five batches more).
// With three, the capped drain of 20,000 tenants × 5 jobs (cap 5) waited on
// its claims, one at a time, at 70-82 % of the uncapped drain; with five,
// 80-92 % in the same minutes (four pairs, 22:04, issue 40).
const batchesBound = 5

// claimNext claims n jobs and hands them to the executors; it reports
// whether to claim again at once.
func (p *pool) claimNext(s *producing, n int) bool {
	if s.fromIdle {
		s.fromIdle = false
		if p.openOffers(s, n) {
			defer p.offers.closeAll()
		}
	}
	got, err := p.claim(n)
	if isEntityRace(err) && s.entityRaces < 3 {
		// Another claimer took a job of the same entity first: the unique
		// running index refused ours, as designed. Try again.
		s.entityRaces++
		return true
	}
	s.entityRaces = 0
	if err != nil {
		s.full = false
		s.backoff = min(max(2*s.backoff, 50*time.Millisecond), 5*time.Second)
		if p.r.bgCtx.Err() == nil {
			p.r.log.Warn("skiplock: claim failed; retrying", slog.String("pool", p.cfg.Name),
				slog.String("error", err.Error()), slog.Duration("retry_in", s.backoff))
		}
		s.more = false
		resetTimer(s.poll, s.backoff)
		return false
	}
	s.backoff = 0
	p.noteClaim(s, got.took)
	for _, j := range got.jobs {
		p.jobs <- j // never blocks: capacity is limit
	}
	s.inflight += len(got.jobs)
	s.full = len(got.jobs) == n
	s.more = p.claimOn(s, got, n)
	if !s.more && got.rateWait > 0 {
		// Wake when the full rate window has room, not a poll interval
		// later (nor before: claiming sooner would find it full).
		resetTimer(s.poll, min(got.rateWait, p.r.cfg.PollInterval))
	}
	return s.more
}

// claimOn reports whether to claim again at once after a claim of n that
// brought got: when it came back full (more work is probably waiting), or
// when a capped visit cut short at its step limit came back short with
// tenants left unvisited, where the jobs may be: then the producer claims
// on, once round the tenants this pool knows, rather than wait for a
// wake-up (a poll interval when none comes).
func (p *pool) claimOn(s *producing, got claimResult, n int) bool {
	if got.cut && len(got.jobs) < n {
		s.cutRun++
	} else {
		s.cutRun = 0
	}
	return len(got.jobs) == n || s.cutRun > 0 && s.cutRun < p.keys.ringClaims(n)
}

// await waits for what makes the producer look again: a finished job, a
// claim from the front that ended, a wake-up or the poll timer (each starts
// a new round of claims), or the stop, after which it hands back what the
// pool holds and reports false. While it waits idle, its free executors
// are open to offers (handoff.go).
func (p *pool) await(s *producing) bool {
	s.fromIdle = false
	opened := p.openIdle(s)
	if opened {
		defer p.offers.closeAll()
	}
	select {
	case <-p.stopCh:
		p.handBack(s)
		return false
	case <-p.done:
		s.inflight--
		s.finished++
	case r := <-p.front:
		s.inflight -= p.frontEnded(s, r)
		s.more = true
	case <-p.wakeCh:
		s.more, s.cutRun, s.fromIdle = true, 0, opened
	case <-s.poll.C:
		s.more, s.cutRun, s.fromIdle = true, 0, opened
		resetTimer(s.poll, p.r.cfg.PollInterval)
	}
	return true
}

// handBack ends a stopped pool's work: it waits for a claim from the front
// in flight, hands back at once what was claimed ahead but not started (the
// executors are busy, and would only reach it once their running jobs
// finish, holding it from every other process meanwhile), and waits for the
// executors to finish what they hold.
func (p *pool) handBack(s *producing) {
	p.stopOffers(s)                    // delivered jobs are in hand, handed back below if not started
	for p.frontOut || p.aheadOut > 0 { // their jobs are handed back below
		s.inflight -= p.frontEnded(s, <-p.front)
	}
	for handing := true; handing; {
		select {
		case j := <-p.jobs:
			p.r.execute(j, true) // stopping: released, refunded
			s.inflight--
		default:
			handing = false
		}
	}
	for s.inflight > 0 {
		<-p.done
		s.inflight--
	}
}

// claimResult is what one of the producer's claims brought back, and what it
// learned for the next.
type claimResult struct {
	jobs []*Job // claimed, tracked
	// cut: a capped visit stopped at its step limit, the tenants after the
	// new cursor unvisited (store.ClaimResult.VisitCut).
	cut  bool
	took time.Duration // from the claim's start to its answer
	// rateWait, for a limited claim that came back short while a rate
	// window of its limits was full: how long until that window has room.
	// The producer sleeps that long (at most PollInterval) before claiming.
	rateWait time.Duration
}

// claim runs the claim plan chooses and records what it learned: the
// tenants' cursors, whether the limits had room, whether they hold the
// pool's queues back, and where the next claims start (keyset).
func (p *pool) claim(n int) (claimResult, error) {
	ctx, cancel := context.WithTimeout(p.r.bgCtx, 30*time.Second)
	defer cancel()
	start := time.Now()
	limits := p.coveringLimits(ctx, start)
	req := p.plan(n, limits, start)
	res, err := p.r.data.Claim(ctx, req)
	p.limitsTight = p.limitsTight || res.Tight // claim_limited from now on, until the next look
	if err != nil {
		return claimResult{}, err
	}
	maps.Copy(p.tenantCursor, res.Cursors)
	took := time.Since(start)
	p.holdBack(p.limitKind.concurrency && len(res.Jobs) < n)
	out := claimResult{cut: res.VisitCut, took: took}
	// Held back by a full rate window, the next claim waits until the
	// window has room, known from its oldest start: no claim in between.
	if p.limitKind.rate && len(res.Jobs) < n {
		if wait, full, err := p.r.data.LimitNextStart(ctx, limits); err == nil && full {
			out.rateWait = wait + time.Millisecond
		}
	}
	bounded := (req.After != nil || req.TenantAfter != nil) && !res.Tight // a tight claim read from the front
	p.keys.observe(bounded, p.frontCost(took, n), len(res.Jobs) == n, res.Jobs, start.Add(took))
	out.jobs = p.took(res.Jobs, took)
	return out, nil
}

// frontCost is the cost of a claim of n jobs that took took as the keyset
// weighs it: as it came for up to three batches, pro rata for more (a
// claim of batchesBound batches, whose healthy cost grows with the jobs it
// takes, where a pin's dead entries cost each claim from the front the
// same). keysetCheapCapped was set on claims of three.
func (p *pool) frontCost(took time.Duration, n int) time.Duration {
	if most := 3 * p.cfg.BatchSize; n > most {
		return took * time.Duration(most) / time.Duration(n)
	}
	return took
}

// plan chooses the next claim of n jobs: the one place the claim's strategy
// and where it starts reading are decided. Limits come first (a limit is a
// guarantee, the tenant cap a preference): while they had room for a batch
// at the last look and none is a rate limit (only claim_limited records
// starts), the claim looks again under their locks and then claims like an
// unlimited one, after its bounds when the pool has no tenant cap;
// otherwise it is claim_limited, from the front. A tenant-capped pool
// claims after its tenants' bounds once its claims from the front got
// expensive (keyset), a pool without a cap after its queues' bounds.
func (p *pool) plan(n int, limits []string, now time.Time) store.ClaimRequest {
	r := p.claimRequest(n)
	switch {
	case len(limits) > 0 && (p.limitKind.rate || p.limitsTight):
		r.Strategy, r.Limits = store.ClaimLimited, limits
	case len(limits) > 0:
		r.Strategy, r.Limits = store.ClaimWithinRoom, limits
		if p.cfg.TenantCap == 0 {
			r.After = p.keys.bounds(now, p.frontOut)
		}
	case p.cfg.TenantCap > 0:
		r.Strategy, r.TenantCap, r.TenantCursor = store.ClaimCapped, p.cfg.TenantCap, p.tenantCursor
		if p.keys.bounds(now, p.frontOut) != nil {
			r.Strategy, r.TenantAfter = store.ClaimCappedAfter, p.keys.tenantWindow(p.tenantCursor, max(4*n, keysetTenantWindow))
		}
	default:
		r.After = p.keys.bounds(now, p.frontOut)
	}
	return r
}

// holdBack records whether a limited claim came back short: then it may
// have been held back by a full concurrency limit, and a completion of
// these queues may free the slot the ready jobs wait for (a completion
// frees no rate window), so completions wake their claimers
// (completer.flush). Pools without limits (the common case) never touch
// the map.
func (p *pool) holdBack(held bool) {
	if held == p.heldBack {
		return
	}
	p.heldBack = held
	for _, q := range p.cfg.Queues {
		if held {
			p.r.limitedQueues.Store(q, struct{}{})
		} else {
			p.r.limitedQueues.Delete(q)
		}
	}
}

// claimRequest is a claim of n jobs of this pool's queues and kinds from
// the front, without limits or a tenant cap (store.ClaimPlain).
func (p *pool) claimRequest(n int) store.ClaimRequest {
	return store.ClaimRequest{Queues: p.cfg.Queues, Kinds: p.cfg.Kinds, Batch: n, WorkerID: p.r.cfg.WorkerID, Lease: p.r.cfg.Lease}
}

// took counts a claim that brought jobs in took and tracks its jobs (their
// leases are heartbeated from now on).
func (p *pool) took(jobs []store.ClaimedJob, took time.Duration) []*Job {
	p.r.claimLat.add(took)
	p.r.claimed.Add(int64(len(jobs)))
	return p.r.track(jobs)
}

// frontResult is what a claim running beside the producer (from the front,
// or ahead) brought back.
type frontResult struct {
	n       int // the batch claimed, its slots held in hand
	claimed []store.ClaimedJob
	jobs    []*Job // claimed, tracked
	start   time.Time
	took    time.Duration
	err     error
	ahead   bool // claimed ahead (aheadDue), not from the front
	bounded bool // read after the bounds
}

// frontDue reports whether to start the periodic claim from the front
// beside the producer's claims after the bounds, claims ahead or not: in a
// backlog they follow one another without pause, and the jobs behind the
// bounds (a higher priority, a hand-back) would wait for its end. Pools
// covered by limits claim from the front in line, as before.
func (p *pool) frontDue() bool {
	return !p.frontOut && len(p.limits) == 0 && p.keys.frontDue(time.Now())
}

// frontRequest is the claim from the front of n jobs that runs beside the
// producer: a tenant-capped pool's (claim_capped) starts at a copy of the
// producer's cursors, since the producer goes on moving them; the cursors
// it returns are dropped.
func (p *pool) frontRequest(n int) store.ClaimRequest {
	r := p.claimRequest(n)
	if p.cfg.TenantCap > 0 {
		r.Strategy, r.TenantCap, r.TenantCursor = store.ClaimCapped, p.cfg.TenantCap, maps.Clone(p.tenantCursor)
	}
	return r
}

// aheadDue reports whether to claim the next batch ahead, beside the
// producer's own claim, while claims come back full (a backlog), in a pool
// without limits or a tenant cap: one claim's round trip (its commit's
// flush above all) then overlaps the others' instead of every batch
// waiting for the last. Each batch claimed ahead is in hand on top of
// Concurrency + BatchSize. One claim goes ahead when an executor has no
// job in hand; up to claimsAhead when the pool is bound by its claims
// (executors that run a batch in less than boundMargin claims' time, and
// one of them waited for work since the last claim ahead began).
//
// A claim is a round trip the pool otherwise makes one at a time: a
// 100,000-job no-op drain with 32 workers spent 2.2 ms per claim of which
// the server ran 1.1 ms, and two pools of 16 workers on the same queue
// drained 20-35 % faster than one of 32; one claim ahead, due only when
// the jobs in hand were fewer than the executors, rarely was in a no-op
// drain (a batch just claimed is in hand until its jobs are run), and
// starved executors as the sign took it 19-25 % further
// (docs/performance-log.md, issue 40). Executors that are all busy (slow
// handlers) gain nothing from claims ahead, and their batches would only
// wait in this process, away from the others. Pools with limits or a
// tenant cap have one claim in flight at a time: their claims decide
// shares from what the last one took (a tenant-capped pool claims two or
// five batches in one instead, batchesInOne; an uncapped pool bound by its
// claims, five in the producer's claim besides its claims ahead). So does
// a pool of one executor: two claims in flight may end in either order,
// and one executor runs its jobs one after the other in the order the
// claims took them.
func (p *pool) aheadDue(s *producing) bool {
	if p.aheadOut >= claimsAhead || !s.full || p.cfg.Concurrency < 2 || p.stopping() ||
		len(p.limits) > 0 || p.cfg.TenantCap > 0 {
		return false
	}
	if p.aheadOut == 0 && s.inflight-p.asideHeld < p.cfg.Concurrency {
		return true // an executor has no job in hand
	}
	return s.claimBound && p.starved.Load()
}

// claimsAhead is the most claims ahead in flight at once (aheadDue): two,
// with the producer's own three claims in flight (four while the claim from
// the front runs too). A third claim ahead brought nothing more in a no-op
// drain (docs/performance-log.md).
const claimsAhead = 2

// noteClaim records, after a claim of the producer's that took took,
// whether the pool is bound by its claims: the handlers of the jobs
// finished since the last claim ran, on average, short enough that
// Concurrency executors run a batch in less than boundMargin claims
// (mean run × BatchSize < boundMargin × Concurrency × took), and how many
// jobs they run in the time a claim takes (runsPerClaim).
func (p *pool) noteClaim(s *producing, took time.Duration) {
	ran := p.ranNanos.Load()
	if n := s.finished - s.finishedAt; n > 0 {
		mean := time.Duration((ran - s.ranAt) / n)
		s.claimBound = mean*time.Duration(p.cfg.BatchSize) < boundMargin*time.Duration(p.cfg.Concurrency)*took
		s.runsPerClaim = math.MaxInt
		if mean > 0 {
			s.runsPerClaim = int(int64(p.cfg.Concurrency) * int64(took) / int64(mean))
		}
	}
	s.ranAt, s.finishedAt = ran, s.finished
}

// boundMargin: a pool counts as bound by its claims while its executors
// run a batch in less than four claims' time. One batch a claim keeps at
// most half a batch waiting when the next claim starts (the producer claims
// when half a batch of slots is free), which lasts the executors half a
// batch's run: a claim longer than that leaves them idle until it returns,
// and claims vary about their median by 2× and more (p99 4-6× the p50 on
// this VM). With the bound at one claim's time (the rule before), the
// articles' harness (32 executors, handlers of 2-5 ms, batch 50) sat just
// outside it, a batch's run 6 ms against claims of 5-8 ms, and its
// executors ran 80-81 % of the time their handlers' mean allows; at four
// claims, 93-96 % (three pairs each, 2026-12-01, issue 40). Handlers of
// 10-20 ms (97.6 %) and no-op drains (bound either way) ran as before.
const boundMargin = 4

// aheadRequest is the claim of n jobs ahead: the producer's next claim as
// plan makes it (after the bounds when in use), with its own copy of the
// bounds, since the producer goes on moving them.
func (p *pool) aheadRequest(n int) store.ClaimRequest {
	r := p.plan(n, nil, time.Now())
	r.After = maps.Clone(r.After)
	return r
}

// startAside starts a claim beside the producer's (from the front, or
// ahead) on its own connection; the producer goes on claiming meanwhile
// and takes the result from p.front (frontEnded). Two claims of one pool
// at once are as safe as two processes' claims: each job is claimed by one
// of them.
func (p *pool) startAside(req store.ClaimRequest, ahead bool) {
	start := time.Now()
	p.asideHeld += req.Batch
	if ahead {
		p.aheadOut++
		p.starved.Store(false)
	} else {
		p.frontOut = true
	}
	n := req.Batch
	bounded := req.After != nil || req.TenantAfter != nil
	go func() {
		ctx, cancel := context.WithTimeout(p.r.bgCtx, 30*time.Second)
		defer cancel()
		var res store.ClaimResult
		var err error
		for races := 0; ; races++ {
			res, err = p.r.data.Claim(ctx, req)
			if !isEntityRace(err) || races == 2 {
				break
			}
		}
		r := frontResult{n: n, claimed: res.Jobs, start: start, took: time.Since(start), err: err, ahead: ahead, bounded: bounded}
		if err == nil {
			r.jobs = p.took(res.Jobs, r.took)
		}
		p.front <- r // buffered: the producer takes it when it can
	}()
}

// frontEnded hands the jobs of a claim that ran beside the producer to the
// executors and returns how many of the slots it held in hand are free
// again. A claim ahead that came back full keeps the next one coming.
func (p *pool) frontEnded(s *producing, r frontResult) (freed int) {
	n := r.n
	p.asideHeld -= n
	if r.ahead {
		p.aheadOut--
	} else {
		p.frontOut = false
	}
	if r.err != nil && p.r.bgCtx.Err() == nil {
		what := "skiplock: claim from the front failed; claims after the bounds go on"
		if r.ahead {
			what = "skiplock: claim ahead failed; the pool claims one batch at a time until a claim comes back full"
		}
		p.r.log.Warn(what, slog.String("pool", p.cfg.Name), slog.String("error", r.err.Error()))
	}
	if r.ahead {
		s.full = r.err == nil && len(r.claimed) == n
	}
	p.keys.observe(r.bounded, p.frontCost(r.took, n), len(r.claimed) == n, r.claimed, r.start.Add(r.took))
	for _, j := range r.jobs {
		p.jobs <- j // never blocks: its slots were held
	}
	return n - len(r.jobs)
}

// coveringLimits returns the limits that cover this pool's work, re-read
// from the database every limitsRefresh. When the read fails it keeps the
// last list: the claim that follows will likely fail too, and say why.
func (p *pool) coveringLimits(ctx context.Context, now time.Time) []string {
	if !p.limitsAt.IsZero() && now.Sub(p.limitsAt) < limitsRefresh {
		return p.limits
	}
	covering, err := p.r.data.LimitsCovering(ctx, p.cfg.Queues, p.cfg.Kinds)
	if err != nil {
		return p.limits
	}
	names := make([]string, 0, len(covering))
	p.limitKind.rate, p.limitKind.concurrency = false, false
	for _, l := range covering {
		names = append(names, l.Name)
		p.limitKind.rate = p.limitKind.rate || l.Rate
		p.limitKind.concurrency = p.limitKind.concurrency || !l.Rate
	}
	if len(names) == 0 {
		names = nil
	}
	p.limits, p.limitsAt = names, now
	p.limitsTight = false // look again whether they have room for a batch
	if len(names) > 0 && p.cfg.TenantCap > 0 && !p.capAside {
		p.capAside = true
		p.r.log.Warn("skiplock: limits cover this pool: it obeys them and sets its tenant cap aside",
			slog.String("pool", p.cfg.Name), slog.Any("limits", names))
	}
	return names
}

// isEntityRace reports the unique-violation on jobs_running that guards
// per-entity serialization when two claims race for one entity.
func isEntityRace(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == "23505" && pg.ConstraintName == "jobs_running"
}

func resetTimer(t *time.Timer, d time.Duration) {
	t.Stop()
	select {
	case <-t.C:
	default:
	}
	t.Reset(d)
}
