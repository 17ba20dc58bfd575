package skiplock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/skiplock/skiplock/internal/worker"
)

// DrainOptions selects the jobs Client.Drain runs.
type DrainOptions struct {
	// Queues to run jobs from. Default: every queue that holds ready jobs.
	Queues []string
	// Kinds to run. Default: every kind with a registered handler, or any
	// kind when a fallback handler is registered.
	Kinds []string
	// IncludeScheduled also runs jobs scheduled in the future, retries
	// waiting out their backoff included: they are made due at once (so a
	// failing job runs until it is dead-lettered). A job that snoozes during
	// the drain keeps its new schedule.
	IncludeScheduled bool
	// Limit is the most jobs to run; 0 runs until no selected job is due.
	Limit int
}

// JobOutcome is what became of one job run by Client.Drain.
type JobOutcome string

// The outcomes of a job run by Client.Drain.
const (
	OutcomeCompleted    JobOutcome = "completed"     // deleted, archived, or completed with CompleteTx
	OutcomeRetried      JobOutcome = "retried"       // failed; back to ready after its backoff
	OutcomeSnoozed      JobOutcome = "snoozed"       // back to ready without spending the attempt
	OutcomeDeadLettered JobOutcome = "dead_lettered" // moved to the dead-letter table
	OutcomeLeaseLost    JobOutcome = "lease_lost"    // the lease expired while it ran: nothing written
)

// DrainedJob is one job run by Client.Drain, in the order they ran.
type DrainedJob struct {
	ID         int64
	Queue      string
	Kind       string
	Attempt    int
	LeaseToken int64
	Outcome    JobOutcome
	// Reason is the dead-letter reason: error, panic, timeout, discarded,
	// cancelled or unknown_kind.
	Reason string
	// Error is the handler's error (for retried and dead-lettered jobs).
	Error string
}

// DrainResult reports a Client.Drain.
type DrainResult struct {
	Jobs                                                 []DrainedJob
	Completed, Retried, Snoozed, DeadLettered, LeaseLost int
}

// Drain runs due jobs one at a time in the calling goroutine, through the
// handlers registered on c, until none of the selected jobs is due (or
// opts.Limit jobs ran): each job is claimed, run and its outcome written
// before the next is claimed, so jobs its handler enqueues run too. It
// starts no goroutine and needs no Start, which makes it the way to run jobs
// in tests: enqueue, Drain, assert (package skiplocktest wraps it).
//
// Drain claims, fences and writes exactly like a started client, under c's
// WorkerID and LeaseDuration, but nothing heartbeats: a handler that runs
// longer than the lease can lose its job to a reaper. Paused queues are
// skipped. A job that snoozes runs once per Drain: should it come due again
// within the same Drain, Drain hands it back untouched and returns.
// Register handlers before calling Drain. A handler that enqueues a new job
// forever makes an unlimited Drain run forever: set Limit.
func (c *Client) Drain(ctx context.Context, opts DrainOptions) (DrainResult, error) {
	var res DrainResult
	if opts.Limit < 0 {
		return res, invalidConfig("DrainOptions.Limit", "must not be negative, got %d", opts.Limit)
	}
	for _, q := range opts.Queues {
		if err := validateName("queue", q); err != nil {
			return res, err
		}
	}
	kinds, err := c.drainKinds(opts.Kinds)
	if err != nil {
		return res, err
	}
	cfg := worker.Config{
		Pool: c.pool, Store: c.store, WorkerID: c.cfg.WorkerID, Lease: c.cfg.LeaseDuration,
		Archive: c.cfg.keepCompleted(), Handler: c.runJob, Logger: c.cfg.Logger,
	}
	snoozed := []int64{}
	for opts.Limit == 0 || len(res.Jobs) < opts.Limit {
		queues := opts.Queues
		if len(queues) == 0 {
			var err error
			if queues, err = c.store.ReadyQueues(ctx, c.pool); err != nil {
				return res, fmt.Errorf("skiplock: drain: %w", err)
			}
			if len(queues) == 0 {
				return res, nil
			}
		}
		if opts.IncludeScheduled {
			if err := c.store.MakeDue(ctx, c.pool, queues, kinds, snoozed); err != nil {
				return res, fmt.Errorf("skiplock: drain: %w", err)
			}
		}
		again := false
		j, out, settled, err := worker.RunOne(ctx, cfg, queues, kinds, func(j *worker.Job) bool {
			again = slices.Contains(snoozed, j.ID)
			return !again
		})
		if err != nil {
			return res, fmt.Errorf("skiplock: drain: %w", err)
		}
		if j == nil || again {
			return res, nil
		}
		d := DrainedJob{ID: j.ID, Queue: j.Queue, Kind: j.Kind, Attempt: j.Attempt, LeaseToken: j.LeaseToken}
		switch settled {
		case worker.Completed:
			d.Outcome = OutcomeCompleted
			res.Completed++
		case worker.Retried:
			d.Outcome, d.Error = OutcomeRetried, out.Error
			res.Retried++
		case worker.Snoozed:
			d.Outcome = OutcomeSnoozed
			res.Snoozed++
			snoozed = append(snoozed, j.ID)
		case worker.DeadLettered:
			d.Outcome, d.Reason, d.Error = OutcomeDeadLettered, out.Reason, out.Error
			res.DeadLettered++
		default:
			d.Outcome = OutcomeLeaseLost
			res.LeaseLost++
		}
		res.Jobs = append(res.Jobs, d)
	}
	return res, nil
}

// drainKinds resolves DrainOptions.Kinds: nil means any kind (with a
// fallback handler) or every registered kind.
func (c *Client) drainKinds(kinds []string) ([]string, error) {
	for _, k := range kinds {
		if err := validateName("kind", k); err != nil {
			return nil, err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.handlers) == 0 && c.fallback == nil {
		return nil, errors.New("skiplock: Drain: no handlers registered (use skiplock.Handle)")
	}
	if len(kinds) > 0 || c.fallback != nil {
		return kinds, nil
	}
	out := make([]string, 0, len(c.handlers))
	for k := range c.handlers {
		out = append(out, k)
	}
	sort.Strings(out)
	return out, nil
}
