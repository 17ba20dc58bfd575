package worker

import (
	"context"
	"fmt"

	"github.com/skiplock/skiplock/internal/store"
)

// RunOne claims one due job from queues (of kinds, nil meaning any) and runs
// it in the calling goroutine: no producer, no heartbeat, no completer, no
// goroutine at all. The outcome is written (fenced by the lease, like every
// write) before RunOne returns. It returns a nil job when none was due.
//
// accept, if not nil, vets the claimed job before it runs: a job it refuses
// is handed back untouched (the attempt refunded) and settles as Released.
//
// Only cfg.Pool, Store, WorkerID, Lease, Archive, Handler and Logger (nil:
// no log lines) are used. As
// nothing heartbeats, a handler that runs longer than cfg.Lease can lose its
// job to the reaper, whose fencing then keeps its outcome from landing.
func RunOne(ctx context.Context, cfg Config, queues, kinds []string, accept func(*Job) bool) (*Job, Outcome, Settled, error) {
	data := cfg.data()
	res, err := data.Claim(ctx, store.ClaimRequest{
		Queues: queues, Kinds: kinds, Batch: 1, WorkerID: cfg.WorkerID, Lease: cfg.Lease,
	})
	if err != nil {
		return nil, Outcome{}, 0, fmt.Errorf("claim: %w", err)
	}
	jobs := res.Jobs
	if len(jobs) == 0 {
		return nil, Outcome{}, 0, nil
	}
	j := &jobs[0]
	var out Outcome
	if accept == nil || accept(j) {
		hctx, cancel := context.WithCancelCause(ctx)
		out = Decide(j, cfg.Handler(hctx, j), RunState{})
		cancel(nil)
	} else {
		out = Decide(j, Result{}, RunState{HandedBack: true})
	}
	if out.SnoozedTx {
		// The handler already returned the job to the table (WaitSignal).
		return j, out, Snoozed, nil
	}
	if out.Kind == Nothing {
		logSettled(cfg.Logger, result{job: j, out: out}, LeaseLost)
		return j, out, LeaseLost, nil
	}
	batch := []result{{job: j, out: out}}
	wctx := context.WithoutCancel(ctx)
	held, unwritten, err := writeIsolating(batch, func(b []result) (map[int64]bool, error) {
		return data.WriteOutcomes(wctx, planWrites(b), cfg.WorkerID, cfg.Archive)
	}, cfg.Logger)
	if err != nil {
		return j, out, 0, fmt.Errorf("write outcome of job %d: %w", j.ID, err)
	}
	out = batch[0].out
	if len(unwritten) > 0 {
		return j, out, Unwritten, fmt.Errorf("write outcome of job %d: the database refused it; the reaper returns the job once its lease expires", j.ID)
	}
	s := Settle(out, held[j.ID])
	logSettled(cfg.Logger, batch[0], s)
	return j, out, s, nil
}
