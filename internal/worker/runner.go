// Package worker is skiplock's execution runtime: per pool a producer that
// claims batches with SKIP LOCKED and feeds a fixed set of executors; per
// process one completer that writes outcomes in batches, one heartbeater that
// extends every lease in one statement, and one reaper. Every write is fenced
// by the job's lease; a job whose lease is gone has its handler cancelled and
// nothing more written for it.
package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/notify"
	"github.com/skiplock/skiplock/internal/sentinel"
	"github.com/skiplock/skiplock/internal/service"
	"github.com/skiplock/skiplock/internal/store"
)

// Job is a claimed job as the runtime sees it.
type Job = store.ClaimedJob

// OutcomeKind says what happens to a job after its handler returned.
type OutcomeKind int

// The outcomes a handler run can have.
const (
	Complete   OutcomeKind = iota // success: delete or archive
	Retry                         // failure with attempts left: back to ready after Delay
	Snooze                        // back to ready after Delay without spending the attempt
	DeadLetter                    // final: to jobs_dead with Reason
	Release                       // handed back at shutdown (Refund when it never started)
	Nothing                       // write nothing: the handler found its lease gone (CompleteTx)
)

// String names the outcome kind for log lines.
func (k OutcomeKind) String() string {
	switch k {
	case Complete:
		return "complete"
	case Retry:
		return "retry"
	case Snooze:
		return "snooze"
	case DeadLetter:
		return "dead_letter"
	case Release:
		return "release"
	case Nothing:
		return "nothing"
	}
	return fmt.Sprintf("OutcomeKind(%d)", int(k))
}

// Outcome is what a handler run produced.
type Outcome struct {
	Kind   OutcomeKind
	Delay  time.Duration
	Reason string // DeadLetter: error, panic, timeout, discarded, cancelled, unknown_kind; Retry: error, panic, timeout
	Error  string // for last_error (storable: see errtext.Text); never contains payload data put there by skiplock
	Refund bool
	// CompletedTx: the handler completed the job in its own transaction and
	// committed it. The outcome (a Retry or DeadLetter) is a fallback for a
	// handler that did not commit after all: being fenced by the lease, it
	// matches no row once the completion committed, and then counts as a
	// completion.
	CompletedTx bool
	// SnoozedTx: the handler already returned the job to ready in its own
	// transaction (Result.SnoozedTx); Kind is Nothing and it settles as
	// snoozed.
	SnoozedTx bool
	// MaxAttempts is the job's effective attempt budget when the handler's
	// cap (Result.MaxAttempts) is below the job's own: a Retry or
	// DeadLetter writes it into the job's max_attempts, so that what is
	// stored, logged and shown is the budget that decided. 0: the job's own.
	MaxAttempts int
	// Result (JSON) and Progress (JSON, the run's last) of a Complete:
	// kept with the finished job. Both nil for a run that had neither,
	// whose completion writes nothing more (complete_archive).
	Result   []byte
	Progress []byte
}

// Handler runs one job and reports what it returned; Decide makes that the
// job's Outcome. It must honour ctx: ctx is cancelled when the lease is
// lost, when the job is cancelled, and at hard stop; context.Cause(ctx)
// says which.
type Handler func(ctx context.Context, job *Job) Result

// Causes of a handler's context cancellation.
var (
	ErrLeaseLost = sentinel.ErrLeaseLost // the public skiplock.ErrLeaseLost
	ErrCancelled = sentinel.ErrCancelled // the public skiplock.ErrCancelled
	ErrHardStop  = errors.New("skiplock: worker stopping")
)

// PoolConfig is one worker pool: what it claims and how many jobs it runs.
type PoolConfig struct {
	Name        string
	Queues      []string
	Kinds       []string // nil: any kind
	Concurrency int
	BatchSize   int
	TenantCap   int
}

// Data is what the runtime needs from the database: claim, extend leases,
// write outcomes, reap, report the worker, and wake other processes. The
// data layer implements it (store.Runtime, over the pool); the runtime's
// unit tests use a fake driven by channels.
type Data interface {
	Claim(ctx context.Context, r store.ClaimRequest) (store.ClaimResult, error)
	LimitsCovering(ctx context.Context, queues, kinds []string) ([]store.CoveringLimit, error)
	LimitNextStart(ctx context.Context, limits []string) (wait time.Duration, full bool, err error)
	Heartbeat(ctx context.Context, ls, inTx []store.Lease, lease time.Duration, worker string) (map[int64]bool, error)
	WriteOutcomes(ctx context.Context, o store.Outcomes, worker string, archive bool) (map[int64]bool, error)
	Reap(ctx context.Context, batch int) (back, dead int, err error)
	// ReapTurn takes the fleet's reaper turn for worker when the last
	// reap was at least gap ago and no slow reap put it off.
	ReapTurn(ctx context.Context, gap time.Duration, worker string) (bool, error)
	// ReapDefer puts the fleet's next reaper turn off by d.
	ReapDefer(ctx context.Context, d time.Duration) error
	// RotateRing runs one turn of the jobs table's ring of generations:
	// the ready rows it moved, the generation it truncated (-1: none).
	RotateRing(ctx context.Context, lockTimeout time.Duration) (moved int64, truncated int, err error)
	BeatWorker(ctx context.Context, w store.WorkerBeat) error
	NotifyQueues(ctx context.Context, queues []string) error
	// WriteProgress writes running jobs' coalesced progress, fenced by
	// their leases; it returns the ids still held.
	WriteProgress(ctx context.Context, ps []store.Progress, worker string) (map[int64]bool, error)
	// WaitersListening reports whether a process waits for jobs of this
	// database (Client.Wait): only then are ends announced.
	WaitersListening(ctx context.Context) (bool, error)
}

// data returns cfg.Data, or the data layer over Store and Pool.
func (cfg Config) data() Data {
	if cfg.Data != nil {
		return cfg.Data
	}
	return store.Runtime{Store: cfg.Store, Pool: cfg.Pool}
}

// Config configures a Runner. All durations must be set by the caller.
type Config struct {
	Pool  *pgxpool.Pool
	Store *store.Store
	// Data is where the runtime's statements go; nil: store.Runtime over
	// Store and Pool. Tests set a fake.
	Data              Data
	Logger            *slog.Logger
	WorkerID          string
	Pools             []PoolConfig
	Handler           Handler
	Lease             time.Duration
	HeartbeatInterval time.Duration
	PollInterval      time.Duration
	ReaperInterval    time.Duration // 0 disables the reaper
	Archive           bool
	PollOnly          bool
	// Listener is the process's LISTEN connection, shared with the
	// client's waiters (nil: none, poll only); the runner subscribes to
	// ready jobs and cancellations while it runs.
	Listener *notify.Listener
	// ListenURLSet reports that Listener connects to a URL of its own
	// (Config.ListenURL), which only changes what the warnings advise.
	ListenURLSet bool
	// PooledHint, when set, is logged at warn level if the listener finds a
	// pooler: what the pool's settings risk there.
	PooledHint string
}

// tracked is one job this process holds a lease on, from claim until its
// outcome is durably written.
type tracked struct {
	job     *Job
	cancel  context.CancelCauseFunc // nil until the handler starts
	started bool
	// Set by the heartbeater or the cancel listener; read by the executor
	// after the handler returns. Guarded by Runner.mu.
	lost            bool
	cancelRequested bool
	finished        bool // handler returned; outcome queued for the completer
	// endedInTx: the handler's own transaction ended the lease (EndedInTx),
	// and holds the row until it ends.
	endedInTx bool
}

// Stats is a snapshot of the runner's counters, exported to users as
// skiplock.Stats (Client.Stats).
type Stats struct {
	Claimed, Completed, Failed, DeadLettered, LeaseLost int64
	// HandedOff counts, of Claimed, the jobs this process's enqueues
	// claimed for its idle pools (handoff.go).
	HandedOff int64
	Running   int
	// ClaimP50 and ClaimP99 are over the last 1,024 claim statements.
	ClaimP50, ClaimP99 time.Duration
	ListenerUp         bool
	// Claims counts every claim statement since Start; ClaimCounts is the
	// cumulative count of those that took at most each ClaimBuckets bound;
	// ClaimSum is their total duration (a Prometheus histogram's parts).
	Claims      uint64
	ClaimCounts []uint64
	ClaimSum    time.Duration
	// Reaps counts the reaper turns this process took: each read the
	// running set for expired leases. The fleet takes about one turn per
	// reaper interval, whichever process takes it.
	Reaps int64
	// ProgressRows counts the progress writes to jobs rows (at most one
	// per job per ProgressInterval, however often handlers report).
	ProgressRows int64
}

// Runner runs the pools of one process.
type Runner struct {
	cfg  Config
	data Data // cfg.data()
	log  *slog.Logger

	// Queues a concurrency limit covers (queue → struct{}): their
	// completions wake claimers as entity completions do.
	limitedQueues sync.Map

	mu   sync.Mutex // guards jobs
	jobs map[int64]*tracked

	pools     []*pool
	completer *completer
	unlisten  func() // ends the runner's subscription to the listener; nil when it has none

	hardCtx    context.Context // cancelled at hard stop; parent of every handler context
	hardCancel context.CancelCauseFunc
	bgCtx      context.Context // cancelled after the final flush; for background loops
	bgCancel   context.CancelFunc
	bgWG       sync.WaitGroup

	startOnce, stopOnce sync.Once
	started             atomic.Bool
	stopped             chan struct{}

	claimed, completed, failed, dead, leaseLost atomic.Int64
	handedOff                                   atomic.Int64 // of claimed: jobs this process's enqueues claimed for its idle pools (handoff.go)
	reaps                                       atomic.Int64 // reaper turns taken
	listenerUp                                  atomic.Bool
	pollOnly                                    atomic.Bool
	warnedPolling                               atomic.Bool
	claimLat                                    latencyRing
	kinds                                       kindStats

	progress     progressBuffer // handlers' progress reports, written by progressLoop
	progressRows atomic.Int64   // progress rows written
	announce     atomic.Bool    // a waiter listens: the completer announces the ends it writes
	waitersTold  atomic.Int64   // waiters that told they started listening (onNotify), for checkWaiters
}

// New validates nothing (the root package did) and returns a Runner.
func New(cfg Config) *Runner {
	r := &Runner{cfg: cfg, data: cfg.data(), log: cfg.Logger, jobs: map[int64]*tracked{}, stopped: make(chan struct{})}
	r.pollOnly.Store(cfg.PollOnly)
	for _, pc := range cfg.Pools {
		r.pools = append(r.pools, newPool(r, pc))
	}
	r.completer = newCompleter(r)
	return r
}

// Start launches every goroutine. Stop (or StopAndCancel) must follow.
func (r *Runner) Start(ctx context.Context) error {
	r.startOnce.Do(func() {
		base := context.WithoutCancel(ctx)
		r.hardCtx, r.hardCancel = context.WithCancelCause(base)
		r.bgCtx, r.bgCancel = context.WithCancel(base)
		r.started.Store(true)
		if !r.cfg.PollOnly && r.cfg.Listener != nil {
			r.unlisten = r.cfg.Listener.Subscribe(notify.Subscription{
				Channels: []string{r.cfg.Store.Channel(), r.cfg.Store.CancelChannel(), r.cfg.Store.WaitersChannel()},
				Listen:   r.cfg.Store.Listen,
				Unlisten: r.cfg.Store.Unlisten,
				SelfTest: r.cfg.Store.NotifySelfTest,
				OnNotify: r.onNotify,
				OnConnect: func(delivered bool) {
					r.listenerUp.Store(delivered)
					if !delivered {
						r.warnPolling("skiplock: LISTEN does not work on this connection (the NOTIFY self-test got nothing back)")
					}
					r.wakeAll() // catch anything sent while we were not listening
				},
				OnDisconnect: func(error) { r.listenerUp.Store(false) },
				OnPooled: func() {
					r.listenerUp.Store(false)
					r.pollOnly.Store(true)
					what := "the database URL goes through a connection pooler (PgBouncer or similar)"
					if r.cfg.ListenURLSet {
						what = "the listen URL goes through a connection pooler too"
					}
					r.warnPolling("skiplock: " + what + "; LISTEN needs a session of its own, so this process does not LISTEN")
					if r.cfg.PooledHint != "" && !r.cfg.ListenURLSet {
						r.log.Warn("skiplock: " + r.cfg.PooledHint)
					}
				},
			})
		}
		r.completer.start(r.bgCtx, &r.bgWG)
		r.bgWG.Add(1)
		go func() { defer r.bgWG.Done(); r.heartbeatLoop(r.bgCtx) }()
		// Whether waiters listen, before the first completion: the progress
		// loop asks again every turn.
		r.checkWaiters(ctx)
		r.bgWG.Add(1)
		go func() { defer r.bgWG.Done(); r.progressLoop().Run(r.bgCtx) }()
		if r.cfg.ReaperInterval > 0 {
			for _, loop := range []*service.Periodic{r.reaper(), r.ring()} {
				r.bgWG.Add(1)
				go func() { defer r.bgWG.Done(); loop.Run(r.bgCtx) }()
			}
		}
		for _, p := range r.pools {
			p.start()
		}
		r.log.Info("skiplock: worker started", slog.String("worker_id", r.cfg.WorkerID), slog.Int("pools", len(r.pools)))
	})
	return nil
}

// Stop drains: no new claims, buffered jobs are handed back, running jobs get
// until ctx is done to finish; then they are cancelled and handed back to
// ready at once. It returns after every goroutine has exited.
func (r *Runner) Stop(ctx context.Context) error {
	if !r.started.Load() {
		return nil
	}
	r.stopOnce.Do(func() { r.stop(ctx) })
	<-r.stopped
	return nil
}

// StopAndCancel stops without waiting for running jobs.
func (r *Runner) StopAndCancel(ctx context.Context) error {
	if !r.started.Load() {
		return nil
	}
	r.hardCancel(ErrHardStop)
	return r.Stop(ctx)
}

func (r *Runner) stop(ctx context.Context) {
	defer close(r.stopped)
	for _, p := range r.pools {
		p.stopClaiming()
	}
	drained := make(chan struct{})
	go func() {
		for _, p := range r.pools {
			p.wait()
		}
		close(drained)
	}()
	select {
	case <-drained:
	case <-ctx.Done():
		r.log.Warn("skiplock: drain timeout; cancelling running jobs and handing them back")
		r.hardCancel(ErrHardStop)
		select {
		case <-drained:
		case <-time.After(5 * time.Second):
			r.log.Error("skiplock: handlers ignored cancellation; releasing their jobs anyway")
			r.releaseStragglers()
		}
	}
	r.hardCancel(ErrHardStop)
	r.completer.close() // flushes everything queued
	r.completer.wait()
	r.bgCancel()
	if r.unlisten != nil {
		r.unlisten()
	}
	r.bgWG.Wait()
	r.beat(context.Background(), true)
	r.log.Info("skiplock: worker stopped", slog.String("worker_id", r.cfg.WorkerID))
}

// warnPolling says, once per process and at warn level, that pickup falls
// back to polling, what that costs and the setting that fixes it.
func (r *Runner) warnPolling(why string) {
	if r.warnedPolling.Swap(true) {
		return
	}
	fix := "set --listen-url (env SKIPLOCK_LISTEN_URL; Config.ListenURL) to a direct connection to PostgreSQL, bypassing the pooler, to get millisecond pickup back"
	if r.cfg.ListenURLSet {
		fix = "point --listen-url (env SKIPLOCK_LISTEN_URL; Config.ListenURL) at PostgreSQL itself, not at the pooler"
	}
	r.log.Warn(why+": POLLING ONLY, jobs are picked up within one poll interval instead of milliseconds; "+fix,
		slog.Duration("poll_interval", r.cfg.PollInterval))
}

// releaseStragglers hands back jobs whose handlers never returned.
func (r *Runner) releaseStragglers() {
	r.mu.Lock()
	var jobs []*Job
	for _, t := range r.jobs {
		if t.started && !t.lost {
			jobs = append(jobs, t.job)
			t.lost = true // whatever the handler does later, write nothing
		}
	}
	r.mu.Unlock()
	for _, j := range jobs {
		r.completer.add(result{job: j, out: Decide(j, Result{}, RunState{Abandoned: true})})
	}
}

// Stats returns the counters.
func (r *Runner) Stats() Stats {
	r.mu.Lock()
	running := len(r.jobs)
	r.mu.Unlock()
	p50, p99 := r.claimLat.quantiles()
	counts, claims, sum := r.claimLat.histogram()
	return Stats{
		Claimed: r.claimed.Load(), Completed: r.completed.Load(), Failed: r.failed.Load(),
		DeadLettered: r.dead.Load(), LeaseLost: r.leaseLost.Load(), HandedOff: r.handedOff.Load(), Running: running,
		ClaimP50: p50, ClaimP99: p99, ListenerUp: r.listenerUp.Load(),
		Claims: claims, ClaimCounts: counts, ClaimSum: sum, Reaps: r.reaps.Load(),
		ProgressRows: r.progressRows.Load(),
	}
}

// KindStats returns this process's handler runs and outcomes per (queue,
// kind) since Start, sorted by queue and kind.
func (r *Runner) KindStats() []KindStats { return r.kinds.snapshot() }

func (r *Runner) onNotify(channel, payload string) {
	if channel == r.cfg.Store.WaitersChannel() {
		r.waitersTold.Add(1)
		r.announce.Store(true)
		return
	}
	if channel == r.cfg.Store.CancelChannel() {
		var id int64
		if _, err := fmt.Sscan(payload, &id); err == nil {
			r.requestCancel(id)
		}
		return
	}
	for _, p := range r.pools {
		if payload == "" || slices.Contains(p.cfg.Queues, payload) {
			p.wake()
		}
	}
}

func (r *Runner) wakeAll() {
	for _, p := range r.pools {
		p.wake()
	}
}

func (r *Runner) requestCancel(id int64) {
	r.mu.Lock()
	t := r.jobs[id]
	var cancel context.CancelCauseFunc
	if t != nil {
		t.cancelRequested = true
		cancel = t.cancel
	}
	r.mu.Unlock()
	if cancel != nil {
		cancel(ErrCancelled)
	}
}

func (r *Runner) track(jobs []Job) []*Job {
	out := make([]*Job, len(jobs))
	r.mu.Lock()
	for i := range jobs {
		j := &jobs[i]
		r.jobs[j.ID] = &tracked{job: j}
		out[i] = j
	}
	r.mu.Unlock()
	return out
}

// untrack forgets jobs whose outcome is settled. Only the claim it was
// given is forgotten: once a retry is written, the job can be claimed again
// (here too) before the completer gets to untrack the previous attempt, and
// the new claim must stay tracked.
func (r *Runner) untrack(jobs []*Job) {
	r.progress.forget(jobs)
	r.mu.Lock()
	for _, j := range jobs {
		if t := r.jobs[j.ID]; t != nil && t.job == j {
			delete(r.jobs, j.ID)
		}
	}
	r.mu.Unlock()
}

// execute runs one job's handler and hands its outcome to the completer;
// it returns how long the handler ran (0 for a job not run).
func (r *Runner) execute(j *Job, stopping bool) (took time.Duration) {
	r.mu.Lock()
	t := r.jobs[j.ID]
	if t == nil || t.lost {
		r.mu.Unlock()
		return 0
	}
	if stopping || r.hardCtx.Err() != nil {
		r.mu.Unlock()
		r.completer.add(result{job: j, out: Decide(j, Result{}, RunState{HandedBack: true})})
		return 0
	}
	ctx, cancel := context.WithCancelCause(r.hardCtx)
	t.cancel, t.started = cancel, true
	cancelled := t.cancelRequested
	r.mu.Unlock()
	if cancelled {
		cancel(ErrCancelled)
	}

	began := time.Now()
	res := r.cfg.Handler(context.WithValue(ctx, progressKey{}, r), j)
	took = time.Since(began)
	cause := context.Cause(ctx)
	cancel(nil)

	r.mu.Lock()
	st := RunState{LeaseLost: t.lost, CancelRequested: t.cancelRequested, HardStop: errors.Is(cause, ErrHardStop)}
	t.finished = true
	r.mu.Unlock()
	out := Decide(j, res, st)
	if out.Kind == Nothing {
		// Someone else may own the job now (or the handler's own commit
		// completed it, which the heartbeat then missed): write nothing.
		r.untrack([]*Job{j})
		r.count(result{job: j, out: out, ran: true, took: took}, Settle(out, false))
		return took
	}
	r.completer.add(result{job: j, out: out, ran: true, took: took})
	return took
}

// EndedInTx records that the handler of job id (the lease token) has ended
// its lease in its own transaction, which holds the row until it ends:
// CompleteTx completed the job, or WaitSignal returned it to ready to
// sleep. A heartbeat that then finds the lease absent found that
// transaction committed, or still holding the row (the heartbeat locks the
// rows of these leases with SKIP LOCKED and leaves a held one out:
// lease.sql), not the lease lost. Before this, a heartbeat that fell
// between that commit and the handler's return cancelled the handler's
// context while its Commit read the server's reply: the Commit failed at
// the client, the handler returned the error, and a job completed (or put
// to sleep) in the database was counted and logged as a lost lease (Stats
// a job short: `skiplock bench --handler completetx` stalled at 19,999 of
// 20,000, two runs in thirty at 1,500 commits a second; issue 40). The
// mark stays until a heartbeat that began after it finds the row there and
// free, which only a rollback leaves; it is then dropped (heartbeat).
func (r *Runner) EndedInTx(id, token int64) {
	r.mu.Lock()
	if t := r.jobs[id]; t != nil && t.job.LeaseToken == token {
		t.endedInTx = true
	}
	r.mu.Unlock()
}

// NoteEndedInTx is EndedInTx for the Runner that runs the handler whose
// context ctx is; false when ctx is no such handler's.
func NoteEndedInTx(ctx context.Context, id, token int64) bool {
	r, _ := ctx.Value(progressKey{}).(*Runner)
	if r == nil {
		return false
	}
	r.EndedInTx(id, token)
	return true
}

// markLost records that the lease of id is gone and cancels its handler.
func (r *Runner) markLost(id int64) {
	r.mu.Lock()
	t := r.jobs[id]
	var cancel context.CancelCauseFunc
	if t != nil && !t.lost {
		t.lost = true
		cancel = t.cancel
		if !t.started {
			delete(r.jobs, id) // never started: nothing will report back
			r.leaseLost.Add(1)
		}
	}
	r.mu.Unlock()
	if cancel != nil {
		cancel(ErrLeaseLost)
	}
}

func (r *Runner) heartbeatLoop(ctx context.Context) {
	t := time.NewTicker(r.cfg.HeartbeatInterval)
	defer t.Stop()
	r.beat(ctx, false)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.heartbeat(ctx)
			r.beat(ctx, false)
		}
	}
}

// heartbeat extends every lease this process holds in one statement. The
// leases a handler's own transaction ended (EndedInTx) go apart: that
// transaction may hold their rows locked for as long as the handler keeps
// it open, and the statement does not wait for them (store.Heartbeat).
func (r *Runner) heartbeat(ctx context.Context) {
	r.mu.Lock()
	leases := make([]store.Lease, 0, len(r.jobs))
	var ended []store.Lease // leases the handler's transaction ended before this heartbeat began
	for id, t := range r.jobs {
		switch {
		case t.lost:
		case t.endedInTx:
			ended = append(ended, store.Lease{ID: id, Token: t.job.LeaseToken})
		default:
			leases = append(leases, store.Lease{ID: id, Token: t.job.LeaseToken})
		}
	}
	r.mu.Unlock()
	if len(leases)+len(ended) == 0 {
		return
	}
	// Lock rows in id order, as the completer does: the two never deadlock
	// (the ended leases' rows are locked without waiting).
	byID := func(a, b store.Lease) int { return cmp.Compare(a.ID, b.ID) }
	slices.SortFunc(leases, byID)
	slices.SortFunc(ended, byID)
	qctx, cancel := context.WithTimeout(ctx, r.cfg.HeartbeatInterval)
	alive, err := r.data.Heartbeat(qctx, leases, ended, r.cfg.Lease, r.cfg.WorkerID)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("skiplock: heartbeat failed; will retry", slog.String("error", err.Error()),
				slog.Int("jobs", len(leases)+len(ended)))
		}
		return
	}
	for i, l := range slices.Concat(leases, ended) {
		cancelReq, ok := alive[l.ID]
		if !ok {
			// Gone: reaped and maybe re-claimed, or completed by a flush that
			// raced this heartbeat, or ended by the handler's own
			// transaction, which committed or still holds the row
			// (EndedInTx). Only a job still tracked and running is lost.
			r.mu.Lock()
			t := r.jobs[l.ID]
			settled := t != nil && (t.finished || t.endedInTx)
			r.mu.Unlock()
			if t != nil && !settled {
				r.markLost(l.ID)
			}
			continue
		}
		if i >= len(leases) { // one of ended
			// Still there after the handler's transaction ended the lease:
			// that transaction rolled back, and the job runs as before.
			r.mu.Lock()
			if t := r.jobs[l.ID]; t != nil && t.job.LeaseToken == l.Token {
				t.endedInTx = false
			}
			r.mu.Unlock()
		}
		if cancelReq {
			r.requestCancel(l.ID)
		}
	}
}

// beat writes this process's row in the workers table.
func (r *Runner) beat(ctx context.Context, stopped bool) {
	st := r.Stats()
	queues := []string{}
	conc := 0
	var handles []store.PoolHandles
	for _, p := range r.pools {
		queues = append(queues, p.cfg.Queues...)
		conc += p.cfg.Concurrency
		handles = append(handles, store.PoolHandles{Queues: p.cfg.Queues, Kinds: p.cfg.Kinds, TenantCap: p.cfg.TenantCap})
	}
	var p99 *float64
	if st.ClaimP99 > 0 {
		v := float64(st.ClaimP99) / float64(time.Millisecond)
		p99 = &v
	}
	host, _ := os.Hostname()
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := r.data.BeatWorker(qctx, store.WorkerBeat{
		ID: r.cfg.WorkerID, Hostname: host, PID: os.Getpid(), Queues: queues, Concurrency: conc,
		Running: st.Running, Claimed: st.Claimed, Completed: st.Completed, Failed: st.Failed,
		ClaimP99MS: p99, Stopped: stopped, Handles: handles,
	})
	if err != nil && ctx.Err() == nil {
		r.log.Debug("skiplock: worker row update failed", slog.String("error", err.Error()))
	}
}

// reaper is the reaper's loop: a turn (reapTurn) every ReaperInterval ±
// 50 %, the jitter keeping many processes from reaping in lockstep.
func (r *Runner) reaper() *service.Periodic {
	return &service.Periodic{Name: "reaper", Interval: r.cfg.ReaperInterval, Jitter: 0.5, Logger: r.log, Tick: r.reapTurn}
}

// reapTurn reaps when this process takes the fleet's turn: a reap reads the
// whole running set, and while a long transaction pins the horizon that set
// is full of the dead entries of every job finished since the pin, so N
// processes reaping on their own timers paid for them N times per interval.
// The turn makes it about once per interval for the fleet
// (ReaperInterval/2 since the last reap, by any process), and a reap that
// took t puts the next turn off by reapBackoff × t when that is longer than
// the gap, at most max(Lease/2, ReaperInterval): the reaper's share of the
// database stays bounded however long the pin, and an expired lease still
// goes back within that bound.
func (r *Runner) reapTurn(ctx context.Context) error {
	gap := r.cfg.ReaperInterval / 2
	limit := max(r.cfg.Lease/2, r.cfg.ReaperInterval)
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	mine, err := r.data.ReapTurn(qctx, gap, r.cfg.WorkerID)
	cancel()
	if err == nil && !mine {
		return nil // another process reaped less than gap ago
	}
	// On an error, reap anyway: reaping twice is harmless, not reaping
	// strands jobs.
	r.reaps.Add(1)
	start := time.Now()
	r.Reap(ctx)
	if off := min(reapBackoff*time.Since(start), limit); off > gap && ctx.Err() == nil {
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := r.data.ReapDefer(qctx, off); err != nil && ctx.Err() == nil {
			r.log.Debug("skiplock: reaper turn not deferred", slog.String("error", err.Error()))
		}
		cancel()
	}
	return nil // Reap logged its own failure
}

// ring is the loop that turns the jobs table's ring of generations about
// once a second, ± 20 % (migration 016): the generation that stopped taking
// inserts a period ago gives its ready rows to jobs_keyed and is truncated
// once empty, so the table holds about three periods of jobs whatever holds
// the vacuum horizon back. Every process turns it; an advisory lock lets
// one at a time do the work, and the others' turns return at once. A turn
// that cannot have its lock within ringLockTimeout (a long reader of the
// table) leaves the generation for the next turn: only the table's size
// waits on it.
func (r *Runner) ring() *service.Periodic {
	failing := false // a failure is logged once per streak (an outage fails every turn); the loop's alone
	return &service.Periodic{Name: "ring", Interval: ringEvery, Jitter: 0.2, Logger: r.log,
		Tick: func(ctx context.Context) error {
			qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			moved, truncated, err := r.data.RotateRing(qctx, ringLockTimeout)
			cancel()
			switch {
			case err != nil && ctx.Err() == nil && !failing:
				failing = true
				r.log.Warn("skiplock: ring turn failed; retrying every second", slog.String("error", err.Error()))
			case err != nil:
			case failing:
				failing = false
				r.log.Info("skiplock: ring turns again")
			case moved > 0 || truncated >= 0:
				r.log.Debug("skiplock: ring turned", slog.Int64("moved", moved), slog.Int("truncated", truncated))
			}
			return nil
		}}
}

// ringEvery is how often each process turns the ring (jittered ± 20 %);
// ringLockTimeout is the longest a turn waits for a generation's lock, which
// new statements on that generation queue behind meanwhile.
const (
	ringEvery       = time.Second
	ringLockTimeout = 50 * time.Millisecond
)

// reapBackoff bounds the reaper's share of the database: after a reap that
// took t, the fleet's next one waits at least reapBackoff × t (a 5 % duty
// cycle), within the bound reapTurn sets.
const reapBackoff = 20

// Reap runs the reaper once, in bounded batches.
func (r *Runner) Reap(ctx context.Context) {
	for ctx.Err() == nil {
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		back, dead, err := r.data.Reap(qctx, 1000)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("skiplock: reaper failed", slog.String("error", err.Error()))
			}
			return
		}
		r.dead.Add(int64(dead))
		if back+dead > 0 {
			r.log.Info("skiplock: reaped expired leases", slog.Int("back_to_ready", back), slog.Int("dead_lettered", dead))
		}
		if back+dead < 1000 {
			return
		}
	}
}

// ClaimBuckets are the upper bounds of the claim-latency histogram
// (Stats.ClaimCounts), in seconds: 0.5 ms to 2.5 s.
var ClaimBuckets = []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}

// latencyRing keeps the last 1024 claim durations for quantiles, and a
// cumulative histogram of all of them.
type latencyRing struct {
	mu     sync.Mutex // guards everything below
	buf    [1024]time.Duration
	n      int
	counts [13]uint64 // per ClaimBuckets bound, then +Inf; not cumulative
	sum    time.Duration
}

func (l *latencyRing) add(d time.Duration) {
	i := sort.SearchFloat64s(ClaimBuckets, d.Seconds())
	l.mu.Lock()
	l.buf[l.n%len(l.buf)] = d
	l.n++
	l.counts[i]++
	l.sum += d
	l.mu.Unlock()
}

// histogram returns the cumulative count per ClaimBuckets bound, the total
// count and the sum of all claim durations.
func (l *latencyRing) histogram() (cumulative []uint64, count uint64, sum time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	cumulative = make([]uint64, len(ClaimBuckets))
	var acc uint64
	for i := range ClaimBuckets {
		acc += l.counts[i]
		cumulative[i] = acc
	}
	return cumulative, acc + l.counts[len(ClaimBuckets)], l.sum
}

func (l *latencyRing) quantiles() (p50, p99 time.Duration) {
	l.mu.Lock()
	n := min(l.n, len(l.buf))
	s := append([]time.Duration(nil), l.buf[:n]...)
	l.mu.Unlock()
	if n == 0 {
		return 0, 0
	}
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[n*50/100], s[min(n-1, n*99/100)]
}
