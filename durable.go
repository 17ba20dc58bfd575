package skiplock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/skiplock/skiplock/internal/store"
	"github.com/skiplock/skiplock/internal/worker"
)

// Durable steps: checkpoints of a handler's progress, kept in the database
// under the job's id (which a retry keeps) until the job leaves the hot
// table. Any job can use them, workflow task or not.

// ErrStepRecorded is returned when a step's checkpoint was recorded by
// another run of the same job meanwhile (this worker lost its lease and the
// job was claimed again): this run's result was not recorded, and a StepTx
// transaction was rolled back.
var ErrStepRecorded = errors.New("skiplock: the step was recorded by another run of the job")

// ErrSignalTimeout is returned by WaitSignal when no signal came before the
// timeout. The timeout is recorded like a received signal: a retried job
// gets ErrSignalTimeout again at once.
var ErrSignalTimeout = errors.New("skiplock: no signal before the timeout")

func validateStepName(name string) error { return validateTaskName("step", name) }

// validateUserStep also keeps Step's names apart from those Sleep and
// WaitSignal record.
func validateUserStep(name string) error {
	if err := validateStepName(name); err != nil {
		return err
	}
	for _, p := range []string{"sleep:", "wait:", "signal:"} {
		if strings.HasPrefix(name, p) {
			return invalidJob("step", "names starting with %q are Sleep's and WaitSignal's", p)
		}
	}
	return nil
}

// Step runs fn once for the job of the handler of ctx, and records its
// result durably under name: when the job runs again (a retry after a
// failure or a crash, a wake-up after Sleep or WaitSignal), Step returns the
// recorded result without calling fn. The result must marshal to JSON (at
// most MaxOutputBytes) and decode back into T.
//
// fn's own effects happen at least once: a crash after fn returned and
// before its result was recorded runs it again. For effects in this
// database that must happen exactly once, use StepTx. A step that failed
// (fn returned an error) is not recorded and runs again on the next run.
//
// Step does not wait for the checkpoint's commit: the write goes out at
// once, grouped with the checkpoints of other handlers, while the handler
// goes on. The run waits for its checkpoints before the job leaves the
// handler and before StepTx, Sleep, SleepUntil, WaitSignal and CompleteTx.
// When the handler returns nil, the checkpoints no write has carried yet
// are withdrawn instead: the job's completion, which removes its
// checkpoints, records that every step completed. Should that completion
// not commit (a crash, a lost lease), those steps run again on the retry,
// as any step does whose checkpoint a crash kept from being written.
// A run's checkpoints are written in the order their steps returned, and
// none after one that was refused; a refused checkpoint (the lease was
// lost, another run recorded the step, the database's error) fails the
// run's next Step (or the call that waits), and the run itself if the
// handler returns nil.
func Step[T any](ctx context.Context, name string, fn func(ctx context.Context) (T, error)) (T, error) {
	var v T
	run, err := runFrom(ctx)
	if err != nil {
		return v, err
	}
	if err := validateUserStep(name); err != nil {
		return v, err
	}
	if err := run.pending.check(run); err != nil {
		return v, err
	}
	if ok, err := recordedStep(ctx, run, name, &v); ok || err != nil {
		return v, err
	}
	v, err = fn(ctx)
	if err != nil {
		return v, err
	}
	raw, err := marshalOutput("step", v)
	if err != nil {
		return v, err
	}
	run.client.steps.submit(ctx, run.client, store.StepCheckpoint{Lease: run.lease(), Name: name, Output: raw}, &run.pending)
	run.steps.put(name, raw) // this run's result from now on: if its write fails, so does the run
	return v, nil
}

// StepTx is Step for work in this database that must happen exactly once:
// fn runs inside a transaction on the client's pool, and the step's
// checkpoint is recorded in that same transaction before it commits. Either
// both commit or neither does, and of two runs of the job racing through the
// same step (a paused worker's lease expired and another worker claimed the
// job) only one can commit: the other gets ErrStepRecorded and its
// transaction is rolled back. fn must not commit or roll back tx.
func StepTx[T any](ctx context.Context, name string, fn func(ctx context.Context, tx pgx.Tx) (T, error)) (T, error) {
	var v T
	run, err := runFrom(ctx)
	if err != nil {
		return v, err
	}
	if err := validateUserStep(name); err != nil {
		return v, err
	}
	if err := run.pending.flush(run); err != nil {
		return v, err
	}
	if ok, err := recordedStep(ctx, run, name, &v); ok || err != nil {
		return v, err
	}
	var stored []byte
	err = pgx.BeginFunc(ctx, run.client.pool, func(tx pgx.Tx) error {
		var err error
		if v, err = fn(ctx, tx); err != nil {
			return err
		}
		raw, err := marshalOutput("step", v)
		if err != nil {
			return err
		}
		_, held, err := run.client.store.StepPut(ctx, tx, run.lease(), run.worker, name, raw)
		if err = stepPutError(run, name, held, false, err); err == nil {
			stored = raw
		}
		return err
	})
	if err == nil {
		run.steps.put(name, stored) // committed
	}
	return v, err
}

// stepCache holds a run's checkpoints, read once per run: only this job's
// lease holder records checkpoints, so besides those read at the start only
// this run's own can appear (a run that lost its lease records nothing).
type stepCache struct {
	mu     sync.Mutex // guards loaded and m (a handler may call Step from several goroutines)
	loaded bool
	m      map[string][]byte
}

// get returns the checkpoint of step name, reading the job's checkpoints
// on first use.
func (c *stepCache) get(ctx context.Context, run *jobRun, name string) ([]byte, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.loaded {
		m, err := run.client.store.StepsOfJob(ctx, run.client.pool, run.id)
		if err != nil {
			return nil, false, err
		}
		c.loaded, c.m = true, m
	}
	out, ok := c.m[name]
	return out, ok, nil
}

// none marks the cache loaded and empty, for a run of a job that can have
// no checkpoint (store.ClaimedJob.Durable).
func (c *stepCache) none() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.loaded, c.m = true, map[string][]byte{}
}

// put records this run's checkpoint of step name: committed (StepTx,
// WaitSignal) or on its way (Step: if its write is refused, so is the run).
func (c *stepCache) put(name string, output []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.loaded {
		c.m[name] = output
	}
}

// recordedStep decodes the checkpoint of step name into v when there is one.
func recordedStep[T any](ctx context.Context, run *jobRun, name string, v *T) (bool, error) {
	out, found, err := run.steps.get(ctx, run, name)
	if err != nil {
		return false, fmt.Errorf("skiplock: step %q: %w", name, err)
	}
	if !found {
		return false, nil
	}
	if err := json.Unmarshal(out, v); err != nil {
		return true, fmt.Errorf("skiplock: step %q: the recorded result does not decode into %T: %s", name, *v, jsonErrorText(err))
	}
	return true, nil
}

// stepPutError is the error of a step whose checkpoint write reported held
// (the lease), recorded (the step was recorded already: ErrStepRecorded, as
// is a unique violation) and err.
func stepPutError(run *jobRun, name string, held, recorded bool, err error) error {
	var pe *pgconn.PgError
	switch {
	case recorded || errors.As(err, &pe) && pe.Code == "23505":
		return fmt.Errorf("skiplock: step %q of job %d: %w", name, run.id, ErrStepRecorded)
	case err != nil:
		return fmt.Errorf("skiplock: step %q of job %d: %w", name, run.id, err)
	case !held:
		return fmt.Errorf("skiplock: step %q of job %d: %w", name, run.id, ErrLeaseLost)
	}
	return nil
}

type timerCheckpoint struct {
	WakeAt time.Time `json:"wake_at"`
}

// Sleep puts the job of the handler of ctx to sleep for d, counted from the
// first time this step (name) runs, by the database clock. The handler must
// return the error Sleep returns: the job goes back to the table, not to a
// goroutine, without spending an attempt and without holding a worker slot,
// and runs again when the time has come; Sleep then returns nil. It never
// wakes early: the job is due no sooner than the recorded wake time.
//
//	if err := skiplock.Sleep(ctx, "cool-off", time.Hour); err != nil {
//		return err
//	}
func Sleep(ctx context.Context, name string, d time.Duration) error {
	if d < 0 || d > MaxScheduleAhead {
		return invalidJob("sleep", "must be between 0 and 5 years, got %s", d)
	}
	return timer(ctx, "sleep:"+name, d, nil)
}

// SleepUntil is Sleep until t (no later than 5 years ahead).
func SleepUntil(ctx context.Context, name string, t time.Time) error {
	if time.Until(t) > MaxScheduleAhead {
		return invalidJob("sleep", "%s is more than 5 years ahead", t.UTC().Format(time.RFC3339))
	}
	return timer(ctx, "sleep:"+name, 0, &t)
}

// timer records (or reads) the timer step name and returns nil once its
// wake time has passed, or the snooze that sends the job to sleep until then.
func timer(ctx context.Context, name string, d time.Duration, at *time.Time) error {
	run, err := runFrom(ctx)
	if err != nil {
		return err
	}
	if err := validateStepName(name); err != nil {
		return err
	}
	wake, now, err := timerStep(ctx, run, name, d, at)
	if err != nil {
		return err
	}
	if !now.Before(wake) {
		return nil
	}
	return Snooze(wake.Sub(now))
}

// timerStep reads the timer step name, recording it first if needed, and
// returns its wake time and the database clock.
func timerStep(ctx context.Context, run *jobRun, name string, d time.Duration, at *time.Time) (wake, now time.Time, err error) {
	if err := run.pending.flush(run); err != nil {
		return wake, now, err
	}
	out, now, found, err := run.client.store.StepGet(ctx, run.client.pool, run.id, name)
	if err == nil && !found {
		var held bool
		out, now, held, err = run.client.store.TimerPut(ctx, run.client.pool, run.lease(), run.worker, name, d, at)
		err = stepPutError(run, name, held, false, err)
	}
	if err != nil {
		return wake, now, err
	}
	var cp timerCheckpoint
	if err := json.Unmarshal(out, &cp); err != nil {
		return wake, now, fmt.Errorf("skiplock: step %q: not a timer: %s", name, jsonErrorText(err))
	}
	return cp.WakeAt, now, nil
}

type signalCheckpoint struct {
	Payload json.RawMessage `json:"payload,omitempty"`
	Timeout bool            `json:"timeout,omitempty"`
}

// errWaiting is what WaitSignal returns while the job sleeps waiting: the
// handler returns it, and the run settles as snoozed (the job is ready again
// already, in the wait's own transaction).
type errWaiting struct{ name string }

func (e *errWaiting) Error() string { return "waiting for signal " + e.name }

// WaitSignal waits for the signal name addressed to the job of the handler
// of ctx, or to its workflow, for at most timeout from the first time this
// wait runs. It returns the signal's payload once one arrived (a signal sent
// before the wait began is kept, and is received at once), ErrSignalTimeout
// when none came in time, or, while there is none yet, an error the handler
// must return: the job then goes back to the table until the timeout without
// holding a worker slot, and a signal makes it due at once.
//
// Each signal is received once: it is taken, and the wait's checkpoint
// recorded, in one transaction, so a retried job receives the same payload
// again from the checkpoint and never takes a second signal. Several waits
// in one handler need different names (or signals sent again).
//
//	payment, err := skiplock.WaitSignal(ctx, "payment_received", 24*time.Hour)
//	if err != nil {
//		return err // ErrSignalTimeout, or the wait itself
//	}
func WaitSignal(ctx context.Context, name string, timeout time.Duration) (json.RawMessage, error) {
	run, err := runFrom(ctx)
	if err != nil {
		return nil, err
	}
	if err := validateStepName(name); err != nil {
		return nil, invalidJob("signal", "%s", err.(*FieldError).Message)
	}
	if timeout <= 0 || timeout > MaxScheduleAhead {
		return nil, invalidJob("timeout", "must be between 0 and 5 years, got %s", timeout)
	}
	got := "signal:" + name
	var cp signalCheckpoint
	if ok, err := recordedStep(ctx, run, got, &cp); ok || err != nil {
		return signalResult(cp, err)
	}
	deadline, _, err := timerStep(ctx, run, "wait:"+name, timeout, nil)
	if err != nil {
		return nil, err
	}
	st := run.client.store
	var slept bool
	err = pgx.BeginFunc(ctx, run.client.pool, func(tx pgx.Tx) error {
		// Locking the job's row first orders this wait against signal(),
		// which locks it after storing the signal: either the signal is
		// visible to the statements below, or signal() runs after this
		// transaction and finds the job asleep, and makes it due.
		wf, cancel, now, held, err := st.WaitLock(ctx, tx, run.lease(), run.worker)
		switch {
		case err != nil:
			return err
		case !held:
			return ErrLeaseLost
		case cancel:
			return ErrCancelled
		}
		payload, found, err := st.ConsumeSignal(ctx, tx, run.id, name, wf)
		if err != nil {
			return err
		}
		switch {
		case found:
			cp = signalCheckpoint{Payload: payload}
		case !now.Before(deadline):
			cp = signalCheckpoint{Timeout: true}
		default:
			if held, err = st.WaitSleep(ctx, tx, run.lease(), run.worker, deadline); err != nil {
				return err
			} else if !held {
				return ErrLeaseLost
			}
			slept = true
			return nil
		}
		raw, err := json.Marshal(cp)
		if err != nil {
			return err
		}
		_, held, err = st.StepPut(ctx, tx, run.lease(), run.worker, got, raw)
		return stepPutError(run, got, held, false, err)
	})
	switch {
	case err != nil:
		return nil, fmt.Errorf("skiplock: WaitSignal %q: %w", name, err)
	case slept:
		run.snoozedTx.Store(true)
		return nil, &errWaiting{name: name}
	}
	if raw, err := json.Marshal(cp); err == nil {
		run.steps.put(got, raw)
	}
	return signalResult(cp, nil)
}

func signalResult(cp signalCheckpoint, err error) (json.RawMessage, error) {
	switch {
	case err != nil:
		return nil, err
	case cp.Timeout:
		return nil, ErrSignalTimeout
	case cp.Payload == nil:
		return json.RawMessage("{}"), nil
	}
	return cp.Payload, nil
}

// ErrCancelled is the context.Cause of a handler whose job was cancelled,
// and what WaitSignal returns for a job cancelled while it waited.
var ErrCancelled = worker.ErrCancelled

// SignalTarget names whom a signal is for: exactly one of a running
// workflow (any of its tasks waiting for the name receives it) or a job in
// flight.
type SignalTarget struct {
	WorkflowID int64
	JobID      int64
}

// MaxSignalPayloadBytes bounds a signal's payload (a JSON object).
const MaxSignalPayloadBytes = 64 << 10

// Signal sends the signal name with payload (a value marshalled to a JSON
// object, or raw JSON; nil means {}) to target and returns its id. It is
// kept until a wait receives it, so it may be sent before the wait begins.
// SQL callers use skiplock.signal(name => ..., workflow_id => ..., payload => ...).
func (c *Client) Signal(ctx context.Context, name string, target SignalTarget, payload any) (int64, error) {
	return c.SignalTx(ctx, c.pool, name, target, payload)
}

// SignalTx is Signal inside the caller's transaction (a pgx.Tx): the signal
// exists, and wakes its receiver, only if that transaction commits.
func (c *Client) SignalTx(ctx context.Context, tx store.DBTX, name string, target SignalTarget, payload any) (int64, error) {
	if err := validateTaskName("name", name); err != nil {
		return 0, err
	}
	if (target.WorkflowID == 0) == (target.JobID == 0) {
		return 0, invalidJob("target", "give exactly one of WorkflowID and JobID")
	}
	raw, err := marshalPayload(payload)
	if err != nil {
		return 0, err
	}
	if len(raw) == 0 {
		raw = []byte("{}")
	}
	if err := ValidatePayload(raw, MaxSignalPayloadBytes); err != nil {
		return 0, err
	}
	var wf, job *int64
	if target.WorkflowID != 0 {
		wf = &target.WorkflowID
	} else {
		job = &target.JobID
	}
	id, err := c.store.SendSignal(ctx, tx, name, wf, job, string(raw))
	if err != nil {
		return 0, workflowError("signal", err)
	}
	return id, nil
}
