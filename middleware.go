package skiplock

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/skiplock/skiplock/internal/worker"
)

// EnqueueMiddleware wraps every enqueue of a Client: Enqueue, EnqueueTx,
// EnqueueMany and EnqueueManyTx (one call per batch). jobs are the client's
// copies of the caller's parameters, before validation: a middleware may
// change them (typically adding Metadata, from a Clone so that a map the
// caller shares is never written to) and then calls next exactly once to
// validate and insert them, or returns an error without calling it to
// refuse the enqueue (nothing is written). next returns the enqueue's error.
// ctx is the caller's context; a middleware may pass a derived one to next.
//
// Middleware runs in Config.EnqueueMiddleware order, the first outermost.
// Jobs enqueued by recurring schedules and dead-letter replays are
// inserted by the database and do not pass through it.
type EnqueueMiddleware func(ctx context.Context, jobs []*EnqueueParams, next func(ctx context.Context) error) error

// WorkMiddleware wraps every run of a handler: logging fields, metrics,
// auth or trace context restored from the job's metadata, panic reporting.
// It calls next to run the rest of the chain and the handler, with ctx or a
// context derived from it (the handler receives that context), and returns
// next's error, or another: what the middleware returns is what the job's
// outcome is decided from (nil completes it; Snooze, Discard and Cancel
// work as from a handler). A panic in the handler reaches the middleware as
// a *PanicError; AttemptOutcome names how a run ended.
//
// job is read-only and carries no payload, so a logging middleware cannot
// leak one. Config.WorkMiddleware runs first (outermost), then the
// handler's own (WithMiddleware), then the handler. Registered on nothing,
// a handler runs exactly as before, with no extra work per job.
type WorkMiddleware func(ctx context.Context, job *JobInfo, next func(ctx context.Context) error) error

// JobInfo is the untyped, payload-free view of a job that work middleware
// sees.
type JobInfo struct {
	ID          int64
	Queue       string
	Kind        string
	Priority    int
	Attempt     int // 1 on the first run
	MaxAttempts int
	RunAt       time.Time
	CreatedAt   time.Time
	AttemptedAt time.Time
	Tenant      string
	Entity      string
	UniqueKey   string
	LeaseToken  int64
	WorkerID    string
	// Metadata is the job's metadata, nil when it has none. It is the map
	// the handler sees as Job.Metadata; changes are not stored.
	Metadata Metadata
}

// PanicError is the error work middleware sees when the handler panicked.
// The job fails with reason "panic" (retried like any failure) unless a
// middleware returns something else.
type PanicError struct {
	Value any    // the value passed to panic
	Stack []byte // the panicking goroutine's stack
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// WithMiddleware adds work middleware to one kind's handler. It runs inside
// Config.WorkMiddleware, in the order given.
func WithMiddleware(mw ...WorkMiddleware) HandlerOption {
	return func(h *handlerEntry) { h.middleware = append(h.middleware, mw...) }
}

// How one handler run ended, as AttemptOutcome names it (for middleware:
// span attributes, metric labels, log fields).
const (
	AttemptCompleted = "completed" // the handler returned nil
	AttemptSnoozed   = "snoozed"   // Snooze: rescheduled, no attempt spent
	AttemptDiscarded = "discarded" // Discard, or a payload that does not decode
	AttemptCancelled = "cancelled" // Cancel
	AttemptPanic     = "panic"     // the handler panicked
	AttemptTimeout   = "timeout"   // WithTimeout passed
	AttemptError     = "error"     // any other error: retried until max attempts
)

// AttemptOutcome names how one handler run ended, from the context a work
// middleware received and the error next returned: one of the Attempt
// constants. A failed run ("error", "panic", "timeout") is retried while
// attempts remain and dead-lettered after the last one.
func AttemptOutcome(ctx context.Context, err error) string {
	if err == nil {
		return AttemptCompleted
	}
	var ce *controlError
	if errors.As(err, &ce) {
		if ce.kind == worker.Snooze {
			return AttemptSnoozed
		}
		return ce.reason
	}
	var pe *PanicError
	if errors.As(err, &pe) {
		return AttemptPanic
	}
	var de *decodeError
	if errors.As(err, &de) {
		return AttemptDiscarded
	}
	if errors.Is(context.Cause(ctx), errTimeout) {
		return AttemptTimeout
	}
	return AttemptError
}

// withMiddleware puts the client's work middleware in front of the
// handler's own, once, when the handler is registered.
func (h *handlerEntry) withMiddleware(global []WorkMiddleware) {
	if len(global) == 0 {
		return
	}
	h.middleware = append(append(make([]WorkMiddleware, 0, len(global)+len(h.middleware)), global...), h.middleware...)
}

// callHandler runs the handler through its middleware chain. Without
// middleware it is the bare handler call. With middleware, a panic in the
// handler becomes a *PanicError the middleware can see; if it comes out of
// the chain it is reported as a panic (panicked true), with the handler's
// stack. A panic in a middleware itself propagates to runJob's recover.
func (c *Client) callHandler(ctx context.Context, h *handlerEntry, j *worker.Job, run *jobRun) (panicked bool, err error) {
	if len(h.middleware) == 0 {
		return false, h.run(ctx, j, run)
	}
	info := &JobInfo{
		ID: j.ID, Queue: j.Queue, Kind: j.Kind, Priority: j.Priority, Attempt: j.Attempt, MaxAttempts: j.MaxAttempts,
		RunAt: j.RunAt, CreatedAt: j.CreatedAt, AttemptedAt: j.AttemptedAt, Tenant: j.Tenant, Entity: j.Entity,
		UniqueKey: j.UniqueKey, LeaseToken: j.LeaseToken, WorkerID: run.worker, Metadata: run.metadata(j.Metadata),
	}
	next := func(ctx context.Context) (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = &PanicError{Value: p, Stack: debug.Stack()}
			}
		}()
		return h.run(ctx, j, run)
	}
	for i := len(h.middleware) - 1; i >= 0; i-- {
		mw, inner := h.middleware[i], next
		next = func(ctx context.Context) error { return mw(ctx, info, inner) }
	}
	err = next(ctx)
	var pe *PanicError
	if errors.As(err, &pe) {
		return true, fmt.Errorf("panic: %v\n%s", pe.Value, pe.Stack)
	}
	return false, err
}

// enqueueChain runs the client's enqueue middleware around insert, which
// inserts the (possibly changed) jobs.
func (c *Client) enqueueChain(ctx context.Context, jobs []*EnqueueParams, insert func(ctx context.Context) error) error {
	mws := c.cfg.EnqueueMiddleware
	next := insert
	for i := len(mws) - 1; i >= 0; i-- {
		mw, inner := mws[i], next
		next = func(ctx context.Context) error { return mw(ctx, jobs, inner) }
	}
	return next(ctx)
}

// enqueueTxWrapped is EnqueueTx with enqueue middleware registered.
func (c *Client) enqueueTxWrapped(ctx context.Context, tx Tx, p EnqueueParams) (EnqueueResult, error) {
	var r EnqueueResult
	jobs := []*EnqueueParams{&p}
	err := c.enqueueChain(ctx, jobs, func(ctx context.Context) error {
		var err error
		r, err = c.enqueueTx(ctx, tx, *jobs[0])
		return err
	})
	return r, err
}

// enqueueManyTxWrapped is EnqueueManyTx with enqueue middleware registered.
func (c *Client) enqueueManyTxWrapped(ctx context.Context, tx Tx, ps []EnqueueParams) (int64, error) {
	jobs := make([]*EnqueueParams, len(ps))
	for i := range ps {
		p := ps[i]
		jobs[i] = &p
	}
	var n int64
	err := c.enqueueChain(ctx, jobs, func(ctx context.Context) error {
		vals := make([]EnqueueParams, len(jobs))
		for i, p := range jobs {
			vals[i] = *p
		}
		var err error
		n, err = c.enqueueManyTx(ctx, tx, vals)
		return err
	})
	return n, err
}
