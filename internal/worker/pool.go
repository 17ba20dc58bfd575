package worker

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"sync"
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

	// The claim from the front running beside the producer's claims after
	// the bounds (keyset.frontDue): its result arrives on front; frontN > 0
	// while it runs, the slots it holds in hand for its batch.
	front  chan frontResult
	frontN int

	// tenantCursor is, per queue, the last tenant the capped claim visited
	// (round-robin fair share); the producer's alone.
	tenantCursor map[string]string

	// The limits covering this pool's work, re-read every limitsRefresh
	// (the producer's alone).
	limits    []string
	limitsAt  time.Time
	limitKind struct{ rate, concurrency bool } // which kinds of limit are among them
	// rateWait, set by a limited claim that came back short while a rate
	// window of its limits was full: how long until that window has room.
	// The producer sleeps that long (at most PollInterval) before claiming.
	rateWait  time.Duration
	visitCut  bool            // the producer's last capped claim left tenants unvisited (store.ClaimParams.VisitCut)
	limitRoom store.LimitRoom // whether they had room for a batch at the last look
	heldBack  bool            // the last claim was limited and short: completions wake claimers
	capAside  bool            // logged that limits set the tenant cap aside
}

// limitsRefresh is how soon a limit set or removed anywhere is obeyed.
const limitsRefresh = 2 * time.Second

func newPool(r *Runner, cfg PoolConfig) *pool {
	return &pool{
		r: r, cfg: cfg,
		jobs:   make(chan *Job, cfg.Concurrency+cfg.BatchSize),
		done:   make(chan struct{}, cfg.Concurrency+cfg.BatchSize),
		wakeCh: make(chan struct{}, 1),
		stopCh: make(chan struct{}),
		keys:   newKeyset(cfg.TenantCap > 0),
		front:  make(chan frontResult, 1),

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
	for j := range p.jobs {
		p.r.execute(j, p.stopping())
		p.done <- struct{}{}
	}
}

// produce is the claim loop. It owns inflight (jobs claimed and not yet
// finished by an executor).
func (p *pool) produce() {
	defer p.wg.Done()
	defer close(p.jobs)
	limit := p.cfg.Concurrency + p.cfg.BatchSize
	// Claim when at least this many slots are free, so claims stay batched
	// under load but an idle pool claims at once.
	threshold := max(1, min(p.cfg.BatchSize, limit)/2)
	inflight := 0
	more := true // the last claim was full: more work is probably waiting
	poll := time.NewTimer(0)
	defer poll.Stop()
	backoff := time.Duration(0)
	entityRaces := 0
	cutRun := 0 // capped claims in a row that came back short, their visits cut short
	for {
		// Count every job finished so far before deciding. Executors report
		// one token each; deciding after the first would, under load, claim
		// exactly threshold jobs each time (half a batch), where the slots
		// freed while the last claim was in flight allow a full one.
		for counting := true; counting; {
			select {
			case <-p.done:
				inflight--
			case r := <-p.front:
				inflight -= p.frontEnded(r)
				more = true
			default:
				counting = false
			}
		}
		free := limit - inflight
		if more && free >= threshold && !p.stopping() && p.frontDue() {
			n := min(free, p.cfg.BatchSize)
			p.startFront(n)
			inflight += n // held for its batch until it ends
			free -= n
		}
		if more && free >= threshold && !p.stopping() {
			n := min(free, p.cfg.BatchSize)
			got, err := p.claim(n)
			if isEntityRace(err) && entityRaces < 3 {
				// Another claimer took a job of the same entity first: the
				// unique running index refused ours, as designed. Try again.
				entityRaces++
				continue
			}
			entityRaces = 0
			if err != nil {
				backoff = min(max(2*backoff, 50*time.Millisecond), 5*time.Second)
				if p.r.bgCtx.Err() == nil {
					p.r.log.Warn("skiplock: claim failed; retrying", slog.String("pool", p.cfg.Name),
						slog.String("error", err.Error()), slog.Duration("retry_in", backoff))
				}
				more = false
				resetTimer(poll, backoff)
			} else {
				backoff = 0
				for _, j := range got {
					p.jobs <- j // never blocks: capacity is limit
				}
				inflight += len(got)
				// A capped visit cut short at its step limit came back short
				// with tenants left unvisited, where the jobs may be: claim
				// on, once round the tenants this pool knows, rather than
				// wait for a wake-up (a poll interval when none comes).
				cut := p.visitCut && len(got) < n
				if cut {
					cutRun++
				} else {
					cutRun = 0
				}
				more = len(got) == n || cut && cutRun < p.keys.ringClaims(n)
				if more {
					continue
				}
				if p.rateWait > 0 {
					// Wake when the full rate window has room, not a
					// poll interval later (nor before: claiming sooner
					// would find it full).
					resetTimer(poll, min(p.rateWait, p.r.cfg.PollInterval))
				}
			}
		}
		select {
		case <-p.stopCh:
			if p.frontN > 0 { // its jobs are handed back below
				inflight -= p.frontEnded(<-p.front)
			}
			// Hand back at once what was claimed ahead but not started: the
			// executors are busy, and would only reach it once their running
			// jobs finish, holding it from every other process meanwhile.
			for handing := true; handing; {
				select {
				case j := <-p.jobs:
					p.r.execute(j, true) // stopping: released, refunded
					inflight--
				default:
					handing = false
				}
			}
			// Drain: wait for the executors to finish what they hold.
			for inflight > 0 {
				<-p.done
				inflight--
			}
			return
		case <-p.done:
			inflight--
		case r := <-p.front:
			inflight -= p.frontEnded(r)
			more = true
		case <-p.wakeCh:
			more, cutRun = true, 0
		case <-poll.C:
			more, cutRun = true, 0
			resetTimer(poll, p.r.cfg.PollInterval)
		}
	}
}

func (p *pool) claim(n int) ([]*Job, error) {
	ctx, cancel := context.WithTimeout(p.r.bgCtx, 30*time.Second)
	defer cancel()
	start := time.Now()
	limits := p.coveringLimits(ctx, start)
	// Limits first look whether they have room for the whole batch (then
	// the plain claim), unless they did not at the last look or one is a
	// rate limit (only claim_limited records starts).
	var room *store.LimitRoom
	if len(limits) > 0 && !p.limitKind.rate {
		room = &p.limitRoom
	}
	var after map[string]store.Bound
	var tenantAfter map[string]map[string]store.Bound
	switch {
	case p.cfg.TenantCap == 0 && (len(limits) == 0 || room != nil && !room.Tight):
		after = p.keys.bounds(start, p.frontN > 0)
	case p.cfg.TenantCap > 0 && len(limits) == 0:
		if p.keys.bounds(start, p.frontN > 0) != nil {
			tenantAfter = p.keys.tenantWindow(p.tenantCursor, max(4*n, keysetTenantWindow))
		}
	}
	params := p.claimParams(n)
	params.TenantCap, params.After, params.TenantAfter, params.Limits, params.LimitRoom, params.TenantCursor =
		p.cfg.TenantCap, after, tenantAfter, limits, room, p.tenantCursor
	p.visitCut = false
	params.VisitCut = &p.visitCut
	jobs, err := p.r.data.Claim(ctx, params)
	if err != nil {
		return nil, err
	}
	if room != nil && room.Tight {
		after = nil // claim_limited read from the front
	}
	bounded := after != nil || tenantAfter != nil
	took := time.Since(start)
	// A limited claim that came back short may have been held back by a
	// full limit: then a completion of these queues may free the slot the
	// ready jobs wait for (a concurrency limit's; a completion frees no
	// rate window), and wakes their claimers (completer.flush). Pools
	// without limits (the common case) never touch the map.
	if held := p.limitKind.concurrency && len(jobs) < n; held != p.heldBack {
		p.heldBack = held
		for _, q := range p.cfg.Queues {
			if held {
				p.r.limitedQueues.Store(q, struct{}{})
			} else {
				p.r.limitedQueues.Delete(q)
			}
		}
	}
	// Held back by a full rate window, the next claim waits until the
	// window has room, known from its oldest start: no claim in between.
	p.rateWait = 0
	if p.limitKind.rate && len(jobs) < n {
		if wait, full, err := p.r.data.LimitNextStart(ctx, limits); err == nil && full {
			p.rateWait = wait + time.Millisecond
		}
	}
	p.keys.observe(bounded, took, len(jobs) == n, jobs, start.Add(took))
	return p.took(jobs, took), nil
}

// claimParams is a claim of n jobs of this pool's queues and kinds from the
// front, without limits or a tenant cap.
func (p *pool) claimParams(n int) store.ClaimParams {
	return store.ClaimParams{Queues: p.cfg.Queues, Kinds: p.cfg.Kinds, Batch: n, WorkerID: p.r.cfg.WorkerID, Lease: p.r.cfg.Lease}
}

// took counts a claim that brought jobs in took and tracks its jobs (their
// leases are heartbeated from now on).
func (p *pool) took(jobs []store.ClaimedJob, took time.Duration) []*Job {
	p.r.claimLat.add(took)
	p.r.claimed.Add(int64(len(jobs)))
	return p.r.track(jobs)
}

// frontResult is what a claim from the front running beside the producer
// brought back.
type frontResult struct {
	claimed []store.ClaimedJob
	jobs    []*Job // claimed, tracked
	start   time.Time
	took    time.Duration
	err     error
}

// frontDue reports whether to start the periodic claim from the front
// beside the producer's claims after the bounds. Pools covered by limits
// claim from the front in line, as before.
func (p *pool) frontDue() bool {
	return p.frontN == 0 && len(p.limits) == 0 && p.keys.frontDue(time.Now())
}

// frontParams is the claim from the front of n jobs that runs beside the
// producer: a tenant-capped pool's (claim_capped) starts at a copy of the
// producer's cursors, since the producer goes on moving them; its own
// cursor is dropped when it ends.
func (p *pool) frontParams(n int) store.ClaimParams {
	params := p.claimParams(n)
	if p.cfg.TenantCap > 0 {
		params.TenantCap, params.TenantCursor = p.cfg.TenantCap, maps.Clone(p.tenantCursor)
	}
	return params
}

// startFront starts a claim of n jobs from the front on its own connection;
// the producer goes on claiming after the bounds meanwhile and takes the
// result from p.front (frontEnded). Two claims of one pool at once are as
// safe as two processes' claims: each job is claimed by one of them.
func (p *pool) startFront(n int) {
	start := time.Now()
	p.frontN = n
	params := p.frontParams(n)
	go func() {
		ctx, cancel := context.WithTimeout(p.r.bgCtx, 30*time.Second)
		defer cancel()
		var claimed []store.ClaimedJob
		var err error
		for races := 0; ; races++ {
			claimed, err = p.r.data.Claim(ctx, params)
			if !isEntityRace(err) || races == 2 {
				break
			}
		}
		r := frontResult{claimed: claimed, start: start, took: time.Since(start), err: err}
		if err == nil {
			r.jobs = p.took(claimed, r.took)
		}
		p.front <- r // buffered: the producer takes it when it can
	}()
}

// frontEnded hands a claim from the front's jobs to the executors and
// returns how many of the slots it held in hand are free again.
func (p *pool) frontEnded(r frontResult) (freed int) {
	n := p.frontN
	p.frontN = 0
	if r.err != nil && p.r.bgCtx.Err() == nil {
		p.r.log.Warn("skiplock: claim from the front failed; claims after the bounds go on", slog.String("pool", p.cfg.Name),
			slog.String("error", r.err.Error()))
	}
	p.keys.observe(false, r.took, len(r.claimed) == n, r.claimed, r.start.Add(r.took))
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
	p.limitRoom.Tight = false // look again whether they have room for a batch
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
