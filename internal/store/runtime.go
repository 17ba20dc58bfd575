package store

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Outcomes are one batch of job outcomes, grouped by statement and each
// sorted by job id (rows are locked in id order, as the heartbeat locks
// them, so the two never deadlock on a process's own jobs).
type Outcomes struct {
	Done []Lease
	// Finished are successes with a result or progress to keep: archived by
	// complete_archive_result (with archive off, completed as Done are).
	Finished []Finish
	Resched  []Reschedule
	Deads    []Dead
	// Announce sends the ends written (completions and dead letters) to
	// waiters (notify_done); set while a waiter listens.
	Announce bool
}

// Runtime is the data layer as the worker runtime (internal/worker) uses
// it: the statements bound to the pool they run on. It implements
// worker.Data; the runtime's unit tests use a fake instead.
type Runtime struct {
	Store *Store
	Pool  *pgxpool.Pool
}

// Claim runs one claim (Store.Claim).
func (r Runtime) Claim(ctx context.Context, req ClaimRequest) (ClaimResult, error) {
	return r.Store.Claim(ctx, r.Pool, req)
}

// LimitsCovering returns the limits covering queues and kinds.
func (r Runtime) LimitsCovering(ctx context.Context, queues, kinds []string) ([]CoveringLimit, error) {
	return r.Store.LimitsCovering(ctx, r.Pool, queues, kinds)
}

// LimitNextStart says how long until the first full rate window of limits
// has room again (full false: none is full).
func (r Runtime) LimitNextStart(ctx context.Context, limits []string) (time.Duration, bool, error) {
	return r.Store.LimitNextStart(ctx, r.Pool, limits)
}

// Heartbeat extends the leases ls (Store.Heartbeat).
func (r Runtime) Heartbeat(ctx context.Context, ls, inTx []Lease, lease time.Duration, worker string) (map[int64]bool, error) {
	return r.Store.Heartbeat(ctx, r.Pool, ls, inTx, lease, worker)
}

// Reap returns expired leases (Store.Reap).
func (r Runtime) Reap(ctx context.Context, batch int) (back, dead int, err error) {
	return r.Store.Reap(ctx, r.Pool, batch)
}

// ReapTurn takes the reaper's turn when it is due (Store.ReapTurn).
func (r Runtime) ReapTurn(ctx context.Context, gap time.Duration, worker string) (bool, error) {
	return r.Store.ReapTurn(ctx, r.Pool, gap, worker)
}

// ReapDefer puts the next reaper's turn off (Store.ReapDefer).
func (r Runtime) ReapDefer(ctx context.Context, d time.Duration) error {
	return r.Store.ReapDefer(ctx, r.Pool, d)
}

// RotateRing runs one turn of the ring (Store.RotateRing).
func (r Runtime) RotateRing(ctx context.Context, lockTimeout time.Duration) (moved int64, truncated int, err error) {
	return r.Store.RotateRing(ctx, r.Pool, lockTimeout)
}

// BeatWorker records the worker's heartbeat row (Store.BeatWorker).
func (r Runtime) BeatWorker(ctx context.Context, w WorkerBeat) error {
	return r.Store.BeatWorker(ctx, r.Pool, w)
}

// NotifyQueues sends the ready-jobs notification for queues.
func (r Runtime) NotifyQueues(ctx context.Context, queues []string) error {
	_, err := r.Pool.Exec(ctx, r.Store.SQL("notify_queues"), queues)
	return err
}

// WriteOutcomes writes o, fenced by each job's lease and worker, in one
// round trip that runs as one implicit transaction (so no transaction is
// ever left open waiting on this process, should it be paused mid-write).
// archive keeps completed jobs in jobs_done. It returns the ids whose
// lease was held.
func (r Runtime) WriteOutcomes(ctx context.Context, o Outcomes, worker string, archive bool) (map[int64]bool, error) {
	var qs []Query
	done := o.Done
	if len(o.Finished) > 0 && !archive {
		// Nothing is kept of a completed job: its result goes with it.
		done = make([]Lease, 0, len(o.Done)+len(o.Finished))
		done = append(done, o.Done...)
		for _, f := range o.Finished {
			done = append(done, f.Lease)
		}
		slices.SortFunc(done, func(a, b Lease) int { return cmp.Compare(a.ID, b.ID) })
	} else if len(o.Finished) > 0 {
		qs = append(qs, r.Store.CompleteResultQuery(o.Finished, worker, o.Announce))
	}
	if len(done) > 0 {
		qs = append(qs, r.Store.CompleteQuery(done, worker, archive, o.Announce))
	}
	if len(o.Resched) > 0 {
		qs = append(qs, r.Store.RescheduleQuery(o.Resched, worker))
	}
	if len(o.Deads) > 0 {
		qs = append(qs, r.Store.DeadLetterQuery(o.Deads, worker))
	}
	if len(qs) == 0 {
		return map[int64]bool{}, nil
	}
	// Waiters (Client.Wait) hear of completions and dead letters in the
	// same commit: with history kept, complete_archive and
	// complete_archive_result tell which jobs they completed (and their
	// results: no look-up needed); the others are a hint the waiter looks
	// up (without history, done holds every completion).
	ended := make([]int64, 0, len(done)+len(o.Finished)+len(o.Deads))
	if !archive {
		for _, l := range done {
			ended = append(ended, l.ID)
		}
	}
	for _, d := range o.Deads {
		ended = append(ended, d.ID)
	}
	var after []Query
	if len(ended) > 0 && o.Announce {
		after = append(after, Query{r.Store.SQL("notify_done"), []any{DonePayloads(ended)}})
	}
	return r.Store.WriteBatch(ctx, r.Pool, qs, after...)
}

// WriteProgress writes the coalesced progress of running jobs
// (Store.WriteProgress).
func (r Runtime) WriteProgress(ctx context.Context, ps []Progress, worker string) (map[int64]bool, error) {
	return r.Store.WriteProgress(ctx, r.Pool, ps, worker)
}

// WaitersListening reports whether a waiter listens on this database
// (Store.WaitersListening).
func (r Runtime) WaitersListening(ctx context.Context) (bool, error) {
	return r.Store.WaitersListening(ctx, r.Pool)
}
