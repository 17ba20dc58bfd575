package worker

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/skiplock/skiplock/internal/store"
)

type result struct {
	job *Job
	out Outcome
	// ran: the handler was called, and took took (for the per-kind
	// duration histogram).
	ran  bool
	took time.Duration
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
// whose lease expired meanwhile is simply not matched by the fenced write. A
// job whose outcome the database refuses for its data is written apart from
// the rest (see writeIsolating), so it never holds the batch back.
func (c *completer) flush(batch []result) {
	batch, superseded := c.supersede(batch)
	// c.write never fails: it retries transient errors, and a refusal is
	// isolated to its job.
	held, unwritten, _ := writeIsolating(batch, c.write, c.r.log)
	jobs := make([]*Job, 0, len(batch)+len(superseded))
	for _, res := range superseded {
		jobs = append(jobs, res.job)
		c.r.count(res, LeaseLost)
	}
	var entityQueues []string
	for _, res := range batch {
		jobs = append(jobs, res.job)
		s := Settle(res.out, held[res.job.ID])
		if slices.Contains(unwritten, res.job.ID) {
			s = Unwritten
		}
		c.r.count(res, s)
		// A finished job of an entity, or of a queue a concurrency limit
		// covers, may be what the next ready job waits for.
		_, limited := c.r.limitedQueues.Load(res.job.Queue)
		if (res.job.Entity != "" || limited) && s != LeaseLost && s != Unwritten && !slices.Contains(entityQueues, res.job.Queue) {
			entityQueues = append(entityQueues, res.job.Queue)
		}
	}
	c.wakeEntityQueues(entityQueues)
	c.r.untrack(jobs)
}

// supersede splits off the outcomes of attempts whose job's newer attempt
// (a higher lease token) is in the same batch: writing an earlier batch took
// longer than the lease (a database away, a connection reset), the reaper
// handed the job back, and this process claimed and ran it again before
// the next flush. Lease tokens only grow, so the older attempt's lease is
// gone; written with the newer one's, the fenced statement received the job
// twice and its result, which names jobs by id, settled both as the newer
// one's. An older attempt alone in its batch is written as any other, and
// the fence refuses it. Only a job this process has claimed again (its
// tracked claim is another) is looked for in the batch: one look at the
// tracked jobs per batch, nothing allocated unless an attempt is superseded.
func (c *completer) supersede(batch []result) (current, superseded []result) {
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	for i, res := range batch {
		t := c.r.jobs[res.job.ID]
		older := t != nil && t.job != res.job && slices.ContainsFunc(batch, func(o result) bool {
			return o.job.ID == res.job.ID && o.job.LeaseToken > res.job.LeaseToken
		})
		switch {
		case older && current == nil:
			current = append(make([]result, 0, len(batch)), batch[:i]...)
			superseded = append(superseded, res)
		case older:
			superseded = append(superseded, res)
		case current != nil:
			current = append(current, res)
		}
	}
	if current == nil {
		return batch, nil
	}
	return current, superseded
}

// write writes batch in one round trip, retrying while the database is
// unreachable. It returns at once, with the error, when the database
// refuses the batch for its data (retrying the same rows cannot succeed),
// and gives up, writing nothing, when stopping while the database stays
// away: the jobs' leases expire and the reaper hands them back.
func (c *completer) write(batch []result) (map[int64]bool, error) {
	w := planWrites(batch)
	w.Announce = c.r.announce.Load()
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.r.bgCtx), 30*time.Second)
		held, err := c.r.data.WriteOutcomes(ctx, w, c.r.cfg.WorkerID, c.r.cfg.Archive)
		cancel()
		if err == nil {
			return held, nil
		}
		if _, refused := refusedForData(err); refused {
			return nil, err
		}
		if attempt == 0 || attempt%20 == 0 {
			c.r.log.Warn("skiplock: writing job outcomes failed; retrying", slog.String("error", err.Error()),
				slog.Int("jobs", len(batch)))
		}
		// Give up only when stopping and the database stays away. Nothing is lost.
		if c.r.bgCtx.Err() != nil && attempt >= 10 {
			c.r.log.Error("skiplock: giving up on job outcomes at shutdown; the reaper will return them",
				slog.Int("jobs", len(batch)))
			return map[int64]bool{}, nil
		}
		time.Sleep(min(time.Duration(attempt+1)*100*time.Millisecond, 2*time.Second))
	}
}

// refusedForData reports whether err is the database refusing a statement
// for the data it carried: SQLSTATE class 22 (data exception, such as an
// invalid byte sequence) or 23 (integrity constraint violation). Writing
// the same rows again cannot succeed. It returns the SQLSTATE.
func refusedForData(err error) (string, bool) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "22") || strings.HasPrefix(pe.Code, "23")) {
		return pe.Code, true
	}
	return "", false
}

// writeIsolating writes the outcomes of batch through write (one round
// trip, one transaction). When the database refuses the batch for its data,
// it writes the halves apart, recursively, until the refused job is alone:
// every other job's outcome is written as usual. The refused job's outcome
// is written again with a safe error text (safeOutcome), which keeps its
// retry or dead-letter path; should that be refused too, nothing is written
// for it, and its lease expires and the reaper returns it. Nothing is lost.
// A changed outcome is stored back into batch. It returns the ids whose
// lease was held, the ids for which nothing could be written, and write's
// first error that is not a refusal (after which it stops).
func writeIsolating(batch []result, write func([]result) (map[int64]bool, error), log *slog.Logger) (held map[int64]bool, unwritten []int64, err error) {
	held, err = write(batch)
	if err == nil {
		return held, nil, nil
	}
	code, refused := refusedForData(err)
	if !refused {
		return nil, nil, err
	}
	if len(batch) > 1 {
		mid := len(batch) / 2
		held, unwritten, err = writeIsolating(batch[:mid], write, log)
		if err != nil {
			return nil, nil, err
		}
		held2, unwritten2, err := writeIsolating(batch[mid:], write, log)
		if err != nil {
			return nil, nil, err
		}
		maps.Copy(held, held2)
		return held, append(unwritten, unwritten2...), nil
	}
	res := &batch[0]
	j := res.job
	attrs := []slog.Attr{slog.Int64("job_id", j.ID), slog.String("queue", j.Queue), slog.String("kind", j.Kind),
		slog.Int("attempt", j.Attempt), slog.String("outcome", res.out.Kind.String()), slog.String("sqlstate", code)}
	if safe, ok := safeOutcome(res.out, code); ok {
		logAttrs(log, slog.LevelWarn, "skiplock: the database refused a job's outcome; writing it with a safe error text", attrs...)
		held, err = write([]result{{job: j, out: safe}})
		if err == nil {
			res.out = safe
			return held, nil, nil
		}
		if code, refused = refusedForData(err); !refused {
			return nil, nil, err
		}
		attrs[len(attrs)-1] = slog.String("sqlstate", code)
	}
	logAttrs(log, slog.LevelError, "skiplock: the database refused a job's outcome; nothing written, the reaper returns the job once its lease expires", attrs...)
	return map[int64]bool{}, []int64{j.ID}, nil
}

// safeOutcome is out with an error text the database cannot refuse (ASCII,
// naming the SQLSTATE of the refusal); false when out carries no error text
// or already had this one.
func safeOutcome(out Outcome, code string) (Outcome, bool) {
	if out.Kind != Retry && out.Kind != DeadLetter {
		return out, false
	}
	text := "skiplock: the database refused this job's error text (SQLSTATE " + code + "); it was not stored"
	if out.Error == text {
		return out, false
	}
	out.Error = text
	return out, true
}

func logAttrs(log *slog.Logger, level slog.Level, msg string, attrs ...slog.Attr) {
	if log != nil {
		log.LogAttrs(context.Background(), level, msg, attrs...)
	}
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
	if err := c.r.data.NotifyQueues(ctx, queues); err != nil {
		// Best effort: other processes still find the job on their next poll.
		c.r.log.Debug("skiplock: entity wake-up not sent", slog.String("error", err.Error()))
	}
}

// count updates the counters for one settled outcome and logs it.
func (r *Runner) count(res result, s Settled) {
	r.kinds.add(res.job.Queue, res.job.Kind, s, res.ran, res.took)
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
	}
	logSettled(r.log, res, s)
}

// logSettled logs what became of a job when it is worth a line: every
// failed attempt with its error text (storable and bounded, see errtext.Text;
// skiplock never puts payload data in it), the move to the dead-letter
// table at error level with its reason, a lost lease, and a CompleteTx
// whose transaction did not commit.
func logSettled(log *slog.Logger, res result, s Settled) {
	j, out := res.job, res.out
	maxAttempts := j.MaxAttempts
	if out.MaxAttempts > 0 {
		maxAttempts = out.MaxAttempts // the handler's cap, written with the outcome
	}
	job := []slog.Attr{slog.Int64("job_id", j.ID), slog.String("queue", j.Queue),
		slog.String("kind", j.Kind), slog.Int("attempt", j.Attempt)}
	switch s {
	case Retried:
		logAttrs(log, slog.LevelWarn, "skiplock: job failed; will retry", append(job,
			slog.Int("max_attempts", maxAttempts), slog.String("reason", out.Reason),
			slog.Duration("retry_in", out.Delay), slog.String("error", out.Error))...)
	case DeadLettered:
		logAttrs(log, slog.LevelError, "skiplock: job moved to the dead-letter table", append(job,
			slog.Int("max_attempts", maxAttempts), slog.String("reason", out.Reason),
			slog.String("error", out.Error))...)
	case LeaseLost:
		logAttrs(log, slog.LevelWarn, "skiplock: lease lost before the outcome was written; nothing written", job...)
	}
	if out.CompletedTx && s != Completed {
		logAttrs(log, slog.LevelWarn, "skiplock: the handler returned nil after CompleteTx, but its transaction did not commit; the attempt failed", job...)
	}
}

// planWrites groups a batch's outcomes by statement, each sorted by job id.
func planWrites(batch []result) store.Outcomes {
	var w store.Outcomes
	for _, res := range batch {
		l := store.Lease{ID: res.job.ID, Token: res.job.LeaseToken}
		switch res.out.Kind {
		case Complete:
			if res.out.Result == nil && res.out.Progress == nil {
				w.Done = append(w.Done, l)
			} else {
				w.Finished = append(w.Finished, store.Finish{Lease: l, Result: res.out.Result, Progress: res.out.Progress})
			}
		case Retry:
			e := res.out.Error
			w.Resched = append(w.Resched, store.Reschedule{Lease: l, Delay: res.out.Delay, Error: &e, MaxAttempts: res.out.MaxAttempts,
				Ended: res.out.CompletedTx})
		case Snooze:
			w.Resched = append(w.Resched, store.Reschedule{Lease: l, Delay: res.out.Delay, Refund: true})
		case Release:
			w.Resched = append(w.Resched, store.Reschedule{Lease: l, Refund: res.out.Refund})
		case DeadLetter:
			w.Deads = append(w.Deads, store.Dead{Lease: l, Reason: res.out.Reason, Error: res.out.Error, MaxAttempts: res.out.MaxAttempts,
				Ended: res.out.CompletedTx})
		}
	}
	// Lock rows in id order, as the heartbeat does, so that the two never
	// deadlock on a process's own jobs.
	slices.SortFunc(w.Done, func(a, b store.Lease) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortFunc(w.Finished, func(a, b store.Finish) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortFunc(w.Resched, func(a, b store.Reschedule) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortFunc(w.Deads, func(a, b store.Dead) int { return cmp.Compare(a.ID, b.ID) })
	return w
}
