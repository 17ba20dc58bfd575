package worker

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

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
	var done []store.Lease
	var deads []store.Dead
	var resched []store.Reschedule
	failed := 0
	for _, res := range batch {
		l := store.Lease{ID: res.job.ID, Token: res.job.LeaseToken}
		switch res.out.Kind {
		case Complete:
			done = append(done, l)
		case Retry:
			failed++
			e := res.out.Error
			resched = append(resched, store.Reschedule{Lease: l, Delay: res.out.Delay, Error: &e})
		case Snooze:
			resched = append(resched, store.Reschedule{Lease: l, Delay: res.out.Delay, Refund: true})
		case Release:
			resched = append(resched, store.Reschedule{Lease: l, Refund: res.out.Refund})
		case DeadLetter:
			failed++
			deads = append(deads, store.Dead{Lease: l, Reason: res.out.Reason, Error: res.out.Error})
		}
	}
	if c.r.BeforeComplete != nil {
		c.r.BeforeComplete(done)
	}
	var held map[int64]bool
	for attempt := 0; ; attempt++ {
		var err error
		held, err = c.write(done, resched, deads)
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
	c.wakeEntityQueues(batch, held)
	ids := make([]int64, 0, len(batch))
	for _, res := range batch {
		ids = append(ids, res.job.ID)
		if !held[res.job.ID] {
			c.r.leaseLost.Add(1)
			c.r.log.Warn("skiplock: lease lost before the outcome was written; nothing written",
				slog.Int64("job_id", res.job.ID), slog.String("queue", res.job.Queue),
				slog.String("kind", res.job.Kind), slog.Int("attempt", res.job.Attempt))
		}
	}
	c.r.completed.Add(int64(len(done)))
	c.r.failed.Add(int64(failed))
	c.r.dead.Add(int64(len(deads)))
	c.r.untrack(ids)
}

// write sends every statement of the batch in one round trip; the pipeline
// runs as one implicit transaction.
func (c *completer) write(done []store.Lease, resched []store.Reschedule, deads []store.Dead) (map[int64]bool, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.r.bgCtx), 30*time.Second)
	defer cancel()
	held := map[int64]bool{}
	st, w := c.r.cfg.Store, c.r.cfg.WorkerID
	type step func(db store.DBTX) (map[int64]bool, error)
	var steps []step
	if len(done) > 0 {
		steps = append(steps, func(db store.DBTX) (map[int64]bool, error) { return st.Complete(ctx, db, done, w, c.r.cfg.Archive) })
	}
	if len(resched) > 0 {
		steps = append(steps, func(db store.DBTX) (map[int64]bool, error) { return st.Reschedule(ctx, db, resched, w) })
	}
	if len(deads) > 0 {
		steps = append(steps, func(db store.DBTX) (map[int64]bool, error) { return st.DeadLetter(ctx, db, deads, w) })
	}
	if len(steps) == 0 {
		return held, nil
	}
	if len(steps) == 1 {
		// A single statement is its own transaction: no BEGIN/COMMIT round trips.
		return steps[0](c.r.cfg.Pool)
	}
	err := pgx.BeginFunc(ctx, c.r.cfg.Pool, func(tx pgx.Tx) error {
		for _, s := range steps {
			m, err := s(tx)
			if err != nil {
				return err
			}
			for id := range m {
				held[id] = true
			}
		}
		return nil
	})
	return held, err
}

// wakeEntityQueues wakes the claimers of every queue where a job of an
// entity just stopped running: the entity's next job became claimable, and
// no enqueue will announce it. Pools in this process are woken directly;
// other processes through NOTIFY (not in poll-only mode, where nobody
// listens and the poll finds it).
func (c *completer) wakeEntityQueues(batch []result, held map[int64]bool) {
	var queues []string
	for _, res := range batch {
		if res.job.Entity != "" && held[res.job.ID] && !slices.Contains(queues, res.job.Queue) {
			queues = append(queues, res.job.Queue)
		}
	}
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
