package worker

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/skiplock/skiplock/internal/store"
)

type result struct {
	job *Job
	out Outcome
}

// completer writes outcomes in batches: while one batch is being written the
// next accumulates (group commit), so an idle process writes each outcome at
// once and a busy one writes many per round trip. A batch is one pipelined
// round trip and one transaction: completions, retries and dead letters.
type completer struct {
	r  *Runner
	in chan result

	closeOnce sync.Once
	done      chan struct{}
}

const maxCompleteBatch = 500

func newCompleter(r *Runner) *completer {
	return &completer{r: r, in: make(chan result, 4096), done: make(chan struct{})}
}

func (c *completer) add(res result) { c.in <- res }

func (c *completer) start(ctx context.Context, wg *sync.WaitGroup) {
	go func() {
		defer close(c.done)
		batch := make([]result, 0, maxCompleteBatch)
		for first := range c.in {
			batch = append(batch[:0], first)
		fill:
			for len(batch) < maxCompleteBatch {
				select {
				case res, ok := <-c.in:
					if !ok {
						break fill
					}
					batch = append(batch, res)
				default:
					break fill
				}
			}
			c.flush(batch)
		}
	}()
}

// close stops accepting outcomes; the goroutine flushes what is queued.
func (c *completer) close() { c.closeOnce.Do(func() { close(c.in) }) }

func (c *completer) wait() { <-c.done }

// flush writes one batch, retrying while the database is unreachable. A job
// whose lease expired meanwhile is simply not matched by the fenced write.
func (c *completer) flush(batch []result) {
	w := planWrites(batch)
	if c.r.BeforeComplete != nil {
		c.r.BeforeComplete(w.done)
	}
	var held map[int64]bool
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.r.bgCtx), 30*time.Second)
		var err error
		held, err = w.exec(ctx, c.r.cfg)
		cancel()
		if err == nil {
			break
		}
		if attempt == 0 || attempt%20 == 0 {
			c.r.log.Warn("skiplock: writing job outcomes failed; retrying", slog.String("error", err.Error()),
				slog.Int("jobs", len(batch)))
		}
		// Give up only when stopping and the database stays away: the jobs'
		// leases expire and the reaper hands them back. Nothing is lost.
		if c.r.bgCtx.Err() != nil && attempt >= 10 {
			c.r.log.Error("skiplock: giving up on job outcomes at shutdown; the reaper will return them",
				slog.Int("jobs", len(batch)))
			held = map[int64]bool{}
			break
		}
		time.Sleep(min(time.Duration(attempt+1)*100*time.Millisecond, 2*time.Second))
	}
	ids := make([]int64, 0, len(batch))
	var entityQueues []string
	for _, res := range batch {
		ids = append(ids, res.job.ID)
		s := Settle(res.out, held[res.job.ID])
		c.r.count(res, s)
		if res.job.Entity != "" && s != LeaseLost && !slices.Contains(entityQueues, res.job.Queue) {
			entityQueues = append(entityQueues, res.job.Queue)
		}
	}
	c.wakeEntityQueues(entityQueues)
	c.r.untrack(ids)
}

// wakeEntityQueues wakes the claimers of every queue where a job of an
// entity just stopped running: the entity's next job became claimable, and
// no enqueue will announce it. Pools in this process are woken directly;
// other processes through NOTIFY (not in poll-only mode, where nobody
// listens and the poll finds it).
func (c *completer) wakeEntityQueues(queues []string) {
	if len(queues) == 0 {
		return
	}
	for _, q := range queues {
		c.r.onNotify(c.r.cfg.Store.Channel(), q)
	}
	if c.r.cfg.PollOnly {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.r.bgCtx), 5*time.Second)
	defer cancel()
	if _, err := c.r.cfg.Pool.Exec(ctx, c.r.cfg.Store.SQL("notify_queues"), queues); err != nil {
		// Best effort: other processes still find the job on their next poll.
		c.r.log.Debug("skiplock: entity wake-up not sent", slog.String("error", err.Error()))
	}
}

// count updates the counters for one written outcome and logs the surprises.
func (r *Runner) count(res result, s Settled) {
	j := res.job
	switch s {
	case Completed:
		r.completed.Add(1)
	case Retried:
		r.failed.Add(1)
	case DeadLettered:
		r.failed.Add(1)
		r.dead.Add(1)
	case LeaseLost:
		r.leaseLost.Add(1)
		r.log.Warn("skiplock: lease lost before the outcome was written; nothing written",
			slog.Int64("job_id", j.ID), slog.String("queue", j.Queue),
			slog.String("kind", j.Kind), slog.Int("attempt", j.Attempt))
	}
	if res.out.CompletedTx && s != Completed {
		r.log.Warn("skiplock: the handler returned nil after CompleteTx, but its transaction did not commit; the attempt failed",
			slog.Int64("job_id", j.ID), slog.String("queue", j.Queue),
			slog.String("kind", j.Kind), slog.Int("attempt", j.Attempt))
	}
}

// Settled is what became of a job once its outcome was written.
type Settled int

// The ways an outcome can settle.
const (
	Completed    Settled = iota // deleted or archived (or completed in the handler's transaction)
	Retried                     // back to ready after a failure
	Snoozed                     // back to ready without spending the attempt
	Released                    // handed back at shutdown
	DeadLettered                // moved to jobs_dead
	LeaseLost                   // the lease was gone: nothing written
)

// Settle says what became of out given whether its fenced write matched the
// job (held).
func Settle(out Outcome, held bool) Settled {
	switch {
	case out.CompletedTx && !held:
		return Completed
	case !held || out.Kind == Nothing:
		return LeaseLost
	}
	switch out.Kind {
	case Complete:
		return Completed
	case Retry:
		return Retried
	case Snooze:
		return Snoozed
	case Release:
		return Released
	default:
		return DeadLettered
	}
}

// writes are one batch of outcomes, grouped by statement.
type writes struct {
	done    []store.Lease
	resched []store.Reschedule
	deads   []store.Dead
}

func planWrites(batch []result) writes {
	var w writes
	for _, res := range batch {
		l := store.Lease{ID: res.job.ID, Token: res.job.LeaseToken}
		switch res.out.Kind {
		case Complete:
			w.done = append(w.done, l)
		case Retry:
			e := res.out.Error
			w.resched = append(w.resched, store.Reschedule{Lease: l, Delay: res.out.Delay, Error: &e})
		case Snooze:
			w.resched = append(w.resched, store.Reschedule{Lease: l, Delay: res.out.Delay, Refund: true})
		case Release:
			w.resched = append(w.resched, store.Reschedule{Lease: l, Refund: res.out.Refund})
		case DeadLetter:
			w.deads = append(w.deads, store.Dead{Lease: l, Reason: res.out.Reason, Error: res.out.Error})
		}
	}
	// Lock rows in id order, as the heartbeat does, so that the two never
	// deadlock on a process's own jobs.
	slices.SortFunc(w.done, func(a, b store.Lease) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortFunc(w.resched, func(a, b store.Reschedule) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortFunc(w.deads, func(a, b store.Dead) int { return cmp.Compare(a.ID, b.ID) })
	return w
}

// exec sends every statement of the batch in one round trip; the pipeline
// runs as one implicit transaction (so no transaction is ever left open
// waiting on this process, should it be paused mid-write). It returns the
// ids whose lease was held.
func (w writes) exec(ctx context.Context, cfg Config) (map[int64]bool, error) {
	st, wid := cfg.Store, cfg.WorkerID
	var qs []store.Query
	if len(w.done) > 0 {
		qs = append(qs, st.CompleteQuery(w.done, wid, cfg.Archive))
	}
	if len(w.resched) > 0 {
		qs = append(qs, st.RescheduleQuery(w.resched, wid))
	}
	if len(w.deads) > 0 {
		qs = append(qs, st.DeadLetterQuery(w.deads, wid))
	}
	switch len(qs) {
	case 0:
		return map[int64]bool{}, nil
	case 1:
		// A single statement: no pipeline needed.
		return store.CollectIDs(ctx, cfg.Pool, qs[0])
	}
	return store.WriteBatch(ctx, cfg.Pool, qs)
}
