package skiplock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock/internal/errtext"
	"github.com/skiplock/skiplock/internal/jsonerr"
	"github.com/skiplock/skiplock/internal/worker"
)

// JobRow is a claimed job's row, the same for every payload type: Job[T]
// embeds it, so job.ID and the rest read as fields of the Job.
type JobRow struct {
	// ID is the job's id, stable across attempts: the idempotency key of
	// the job's effects.
	ID int64
	// Queue and Kind are the job's queue and kind.
	Queue string
	Kind  string
	// Priority: larger runs earlier.
	Priority int
	// Attempt is the number of this attempt: 1 on the first run, counted
	// when the job is claimed (so a run cut short by a crash counts).
	Attempt int
	// MaxAttempts is the job's attempt budget: a failure at attempt
	// MaxAttempts is final. It is the effective budget: the handler's
	// WithMaxAttempts when lower than the job's (which a failure then
	// stores with the job).
	MaxAttempts int
	// Payload is the job's payload as stored (a JSON object), opened
	// first if it was sealed (Config.Encryption); Job.Args is it decoded.
	Payload json.RawMessage
	// RunAt is when the job was due; CreatedAt when it was enqueued;
	// AttemptedAt when this attempt was claimed (all by the database clock).
	RunAt       time.Time
	CreatedAt   time.Time
	AttemptedAt time.Time
	// Tenant, Entity and UniqueKey are the job's keys ("" when unset).
	Tenant    string
	Entity    string
	UniqueKey string
	// LeaseToken is this claim's fencing token. Every claim takes a new one
	// from a database sequence, so the tokens of successive leases of the
	// same job strictly increase: a worker that lost its lease always holds
	// a smaller token than the job's current owner. External systems can
	// fence writes with it (accept a write only if its token is at least
	// the highest one seen for the job). See docs/fencing.md.
	LeaseToken int64
}

// Job is a job as its handler sees it, with the payload decoded into T. Its
// row's fields (JobRow) are promoted: job.ID, job.Attempt, job.LeaseToken.
type Job[T any] struct {
	JobRow
	Args T // the payload decoded into T
	// WorkerID is the process that holds the lease.
	WorkerID string
	// Metadata is the job's metadata set at enqueue (trace context, request
	// ids, tags), nil when it has none. See Metadata.
	Metadata Metadata

	run *jobRun // nil for a Job not handed to a handler by a Client
}

// jobRun links one handler run to the client that runs it: CompleteTx
// reports through it, and the runner reads it once the handler returned.
type jobRun struct {
	client *Client
	id     int64
	token  int64 // copies of the lease, safe from changes to the Job's fields
	worker string
	tenant string // the job's: the key that seals what the run stores (sealRunData)

	completedTx atomic.Bool // a CompleteTx succeeded (its transaction may still roll back)
	leaseLost   atomic.Bool // a CompleteTx found the lease gone
	returned    atomic.Bool // the handler returned: CompleteTx is refused from now on

	hooked worker.HookedRun // the run hook's side of the run (the workflow engine's)

	meta Metadata // the job's metadata, decoded once per run (metadata.go)

	out runOutput // the run's result and last progress report (results.go)
}

// runKey is the context key of a handler's jobRun.
type runKey struct{}

// clientFrom returns the client whose handler's context ctx is; ok is
// false when ctx is no handler's.
func clientFrom(ctx context.Context) (c *Client, ok bool) {
	run, _ := ctx.Value(runKey{}).(*jobRun)
	if run == nil {
		return nil, false
	}
	return run.client, true
}

// LogValue keeps accidental logging of a job safe: id, queue, kind and
// attempt only, never the payload.
func (j *Job[T]) LogValue() slog.Value {
	return slog.GroupValue(slog.Int64("job_id", j.ID), slog.String("queue", j.Queue),
		slog.String("kind", j.Kind), slog.Int("attempt", j.Attempt))
}

// HandlerFunc handles one job. Return nil to complete it, an error to fail
// the attempt (retried with backoff until MaxAttempts, then dead-lettered),
// or one of Snooze, Discard and Cancel. ctx is cancelled when the lease is
// lost, the job is cancelled, its timeout passes, or the worker hard-stops.
type HandlerFunc[T any] func(ctx context.Context, job *Job[T]) error

// HandlerOption tunes one kind's handler.
type HandlerOption func(*handlerEntry)

// WithTimeout bounds each run of the kind; the run fails with reason
// "timeout" when it passes.
func WithTimeout(d time.Duration) HandlerOption { return func(h *handlerEntry) { h.timeout = d } }

// WithBackoff overrides the retry delay for the kind.
func WithBackoff(f func(attempt int) time.Duration) HandlerOption {
	return func(h *handlerEntry) { h.backoff = f }
}

// WithMaxAttempts caps the attempts of jobs of this kind run by this client:
// a failure at attempt n (or the job's own max_attempts, if lower) is final.
// The cap is stored as the job's max_attempts: by Enqueue on this client, and
// with the first failure wherever the job was enqueued.
func WithMaxAttempts(n int) HandlerOption { return func(h *handlerEntry) { h.maxAttempts = n } }

type handlerEntry struct {
	run         func(ctx context.Context, j *worker.Job, run *jobRun) error
	timeout     time.Duration
	backoff     func(attempt int) time.Duration
	maxAttempts int
	middleware  []WorkMiddleware // Config.WorkMiddleware, then WithMiddleware's; empty: none
}

// Handle registers fn for kind on c. Call it before Start.
func Handle[T any](c *Client, kind string, fn HandlerFunc[T], opts ...HandlerOption) error {
	if err := validateName("kind", kind); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runner.Load() != nil {
		return errors.New("skiplock: Handle: client already started")
	}
	if _, dup := c.handlers[kind]; dup {
		return fmt.Errorf("skiplock: Handle: kind %q already has a handler", kind)
	}
	c.handlers[kind] = newEntry(c, fn, opts)
	return nil
}

// HandleFallback registers fn for every kind without its own handler, which
// also makes pools without Kinds claim any kind. `skiplock work --exec` uses it.
func HandleFallback(c *Client, fn HandlerFunc[json.RawMessage], opts ...HandlerOption) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runner.Load() != nil {
		return errors.New("skiplock: HandleFallback: client already started")
	}
	c.fallback = newEntry(c, fn, opts)
	return nil
}

func newEntry[T any](c *Client, fn HandlerFunc[T], opts []HandlerOption) *handlerEntry {
	h := &handlerEntry{}
	h.run = func(ctx context.Context, wj *worker.Job, run *jobRun) error {
		// The runtime's row has JobRow's fields in JobRow's order: the
		// conversion is a copy, with no allocation (a field added to one and
		// not the other fails to compile here).
		j := &Job[T]{JobRow: JobRow(wj.ClaimedRow), WorkerID: run.worker, Metadata: run.metadata(wj.Metadata), run: run}
		if h.maxAttempts > 0 && h.maxAttempts < j.MaxAttempts {
			j.MaxAttempts = h.maxAttempts // the budget that decides, as the failure writes it
		}
		if err := decodeArgs(wj.Payload, &j.Args); err != nil {
			return &decodeError{err: err}
		}
		return fn(ctx, j)
	}
	for _, o := range opts {
		o(h)
	}
	h.withMiddleware(c.cfg.WorkMiddleware)
	return h
}

func decodeArgs[T any](raw []byte, dst *T) error {
	switch p := any(dst).(type) {
	case *json.RawMessage:
		*p = append((*p)[:0], raw...)
		return nil
	case *[]byte:
		*p = append((*p)[:0], raw...)
		return nil
	}
	return json.Unmarshal(raw, dst)
}

type decodeError struct{ err error }

// Error says why without quoting the payload (see jsonerr.Text).
func (e *decodeError) Error() string {
	return "payload does not decode into the handler's type: " + jsonerr.Text(e.err)
}

// Snooze reschedules the job after d without spending an attempt.
func Snooze(d time.Duration) error { return &controlError{kind: worker.Snooze, delay: d} }

// Discard sends the job to the dead-letter table at once with reason
// "discarded", whatever attempts remain.
func Discard(reason error) error {
	return &controlError{kind: worker.DeadLetter, reason: "discarded", err: reason}
}

// Cancel ends the job without retrying: it goes to the dead-letter table with
// reason "cancelled".
func Cancel(reason error) error {
	return &controlError{kind: worker.DeadLetter, reason: "cancelled", err: reason}
}

type controlError struct {
	kind   worker.OutcomeKind
	delay  time.Duration
	reason string
	err    error
}

func (e *controlError) Error() string {
	if e.err != nil {
		return e.reason + ": " + e.err.Error()
	}
	if e.kind == worker.Snooze {
		return "snoozed for " + e.delay.String()
	}
	return e.reason
}

func (e *controlError) Unwrap() error { return e.err }

// DefaultBackoff is capped exponential backoff with jitter:
// 1s·2^(attempt-1) scaled by a random factor in [0.5, 1), at most one hour.
func DefaultBackoff(attempt int) time.Duration {
	base := time.Hour
	if attempt < 13 {
		base = min(time.Hour, time.Second<<max(attempt-1, 0))
	}
	return time.Duration(float64(base) * (0.5 + rand.Float64()*0.5))
}

// runJob is the worker.Handler: it finds the kind's handler, runs it with its
// timeout, turns panics into failures and reports what the handler returned;
// worker.Decide makes that the job's outcome.
func (c *Client) runJob(ctx context.Context, j *worker.Job) worker.Result {
	h := c.handlers[j.Kind]
	if h == nil {
		h = c.fallback
	}
	if h == nil {
		return worker.Result{Err: errors.New("no handler registered for kind " + j.Kind), Final: "unknown_kind"}
	}
	if h.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, h.timeout, errTimeout)
		defer cancel()
	}
	if j.Sealed != nil || isEnvelope(j.Payload) {
		plain, err := c.openPayload(j)
		if err != nil {
			return c.unopenable(ctx, j, err)
		}
		j.Payload = plain
	}
	run := &jobRun{client: c, id: j.ID, token: j.LeaseToken, worker: c.cfg.WorkerID, tenant: j.Tenant}
	// The run hook (the workflow engine: durable steps, workflow tasks)
	// finds its run through ctx, and so do the workflow functions.
	ctx, run.hooked = c.runHook.BeginRun(ctx, j)
	ctx = context.WithValue(ctx, runKey{}, run)
	err, panicked := func() (err error, panicked bool) {
		defer func() {
			if p := recover(); p != nil {
				panicked = true
				err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
			}
		}()
		panicked, err = c.callHandler(ctx, h, j, run)
		return err, panicked
	}()
	// The hook settles its part of the run (its writes for the job, which
	// can fail a run that returned nil) before CompleteTx is refused.
	res := run.hooked.EndRun(worker.Result{Err: err, CompletedTx: run.completedTx.Load(), LeaseLostInTx: run.leaseLost.Load()})
	run.returned.Store(true)
	err = res.Err
	res.Panicked, res.CompletedTx, res.LeaseLostInTx = panicked, run.completedTx.Load(), run.leaseLost.Load()
	res.Value, res.Progress = run.out.take()
	res.MaxAttempts, res.Backoff = h.maxAttempts, c.cfg.Backoff
	if h.backoff != nil {
		res.Backoff = h.backoff
	}
	if err == nil {
		return res
	}
	var ce *controlError
	var de *decodeError
	switch {
	case errors.As(err, &ce):
		if ce.kind == worker.Snooze {
			res.Snooze, res.SnoozeFor = true, ce.delay
		} else {
			res.Final = ce.reason
		}
	case errors.As(err, &de):
		// The job can never run: say why (the decoder's error, never the
		// payload) before it goes to the dead-letter table.
		res.Final = "discarded"
		c.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "skiplock: payload does not decode into the handler's type; discarding the job",
			slog.Int64("job_id", j.ID), slog.String("queue", j.Queue), slog.String("kind", j.Kind),
			slog.Int("attempt", j.Attempt), slog.String("error", errtext.Text(de.Error())))
	case panicked:
		c.cfg.Logger.LogAttrs(ctx, slog.LevelError, "skiplock: handler panicked",
			slog.Int64("job_id", j.ID), slog.String("queue", j.Queue), slog.String("kind", j.Kind), slog.Int("attempt", j.Attempt))
	case errors.Is(context.Cause(ctx), errTimeout):
		res.TimedOut = h.timeout
	}
	return res
}

var errTimeout = errors.New("skiplock: handler timeout")

// openPayload opens a sealed payload with the client's keyring.
func (c *Client) openPayload(j *worker.Job) ([]byte, error) {
	plain, err := c.openSealed(j.Payload, j.Sealed)
	if err != nil && c.cfg.Encryption == nil {
		return nil, fmt.Errorf("payload: %w", err)
	}
	return plain, err
}

// unopenable is the outcome of a job whose sealed payload does not open.
// A key the keyring does not hold (a tenant's key deleted: crypto-shredded)
// or an altered envelope can never open: the job is dead-lettered at once,
// with an error naming the key. A client without a keyring fails the
// attempt, retried as usual: a worker that has the keyring may take it.
func (c *Client) unopenable(ctx context.Context, j *worker.Job, err error) worker.Result {
	final := "discarded"
	if c.cfg.Encryption == nil {
		final = ""
	}
	c.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "skiplock: sealed payload does not open",
		slog.Int64("job_id", j.ID), slog.String("queue", j.Queue), slog.String("kind", j.Kind),
		slog.Int("attempt", j.Attempt), slog.Bool("dead_letter", final != ""), slog.String("error", err.Error()))
	return worker.Result{Err: err, Final: final, Backoff: c.cfg.Backoff}
}
