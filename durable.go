package skiplock

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/internal/flow"
	"github.com/skiplock/skiplock/internal/jsonerr"
	"github.com/skiplock/skiplock/internal/sentinel"
)

// Durable steps: checkpoints of a handler's progress, kept in the database
// under the job's id (which a retry keeps) until the job leaves the hot
// table. Any job can use them, workflow task or not. The engine is
// internal/flow; these functions validate, marshal and decode.

// ErrStepRecorded is returned when a step's checkpoint was recorded by
// another run of the same job meanwhile (this worker lost its lease and the
// job was claimed again): this run's result was not recorded, and a StepTx
// transaction was rolled back.
var ErrStepRecorded = sentinel.ErrStepRecorded

// ErrSignalTimeout is returned by WaitSignal when no signal came before the
// timeout. The timeout is recorded like a received signal: a retried job
// gets ErrSignalTimeout again at once.
var ErrSignalTimeout = sentinel.ErrSignalTimeout

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
// handler returns nil. With Config.Encryption the recorded result is
// sealed, like a payload, under the key of the job's tenant.
func Step[T any](ctx context.Context, name string, fn func(ctx context.Context) (T, error)) (T, error) {
	var v T
	run, err := flow.RunFrom(ctx)
	if err != nil {
		return v, err
	}
	if err := validateUserStep(name); err != nil {
		return v, err
	}
	out, recorded, err := run.Step(ctx, name, func(ctx context.Context) ([]byte, error) {
		var err error
		if v, err = fn(ctx); err != nil {
			return nil, err
		}
		return sealedOutput(ctx, "step", v)
	})
	if recorded {
		return v, decodeStep(ctx, name, out, &v)
	}
	return v, err
}

// StepTx is Step for work in this database that must happen exactly once:
// fn runs inside a transaction on the client's pool, and the step's
// checkpoint is recorded in that same transaction before it commits. Either
// both commit or neither does, and of two runs of the job racing through the
// same step (a paused worker's lease expired and another worker claimed the
// job) only one can commit: the other gets ErrStepRecorded and its
// transaction is rolled back. fn must not commit or roll back tx.
//
// Unlike the other …Tx functions, StepTx does not take the caller's
// transaction but gives fn one, a Tx like the one the others take (Exec,
// Query, QueryRow): the step begins it on the client's pool, so that it
// alone decides when it commits (after the checkpoint), and pipelines the
// fenced checkpoint write on it. Work that must go through database/sql
// cannot join it; use CompleteTx, SetOutputTx or AddTasksTx in that
// transaction instead.
func StepTx[T any](ctx context.Context, name string, fn func(ctx context.Context, tx Tx) (T, error)) (T, error) {
	var v T
	run, err := flow.RunFrom(ctx)
	if err != nil {
		return v, err
	}
	if err := validateUserStep(name); err != nil {
		return v, err
	}
	out, recorded, err := run.StepTx(ctx, name, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		var err error
		if v, err = fn(ctx, tx); err != nil {
			return nil, err
		}
		return sealedOutput(ctx, "step", v)
	})
	if recorded {
		return v, decodeStep(ctx, name, out, &v)
	}
	return v, err
}

// decodeStep decodes the recorded result of step name into v, opened
// first if it was sealed.
func decodeStep[T any](ctx context.Context, name string, out []byte, v *T) error {
	out, err := openRunData(ctx, fmt.Sprintf("step %q", name), out)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(out, v); err != nil {
		return fmt.Errorf("skiplock: step %q: the recorded result does not decode into %T: %s", name, *v, jsonerr.Text(err))
	}
	return nil
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
	run, err := flow.RunFrom(ctx)
	if err != nil {
		return err
	}
	if err := validateStepName(name); err != nil {
		return err
	}
	wait, err := run.Timer(ctx, name, d, at)
	if err != nil || wait == 0 {
		return err
	}
	return Snooze(wait)
}

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
// in one handler need different names (or signals sent again). A payload
// sealed by its sender (Config.Encryption) is opened with this client's
// keyring.
//
//	payment, err := skiplock.WaitSignal(ctx, "payment_received", 24*time.Hour)
//	if err != nil {
//		return err // ErrSignalTimeout, or the wait itself
//	}
func WaitSignal(ctx context.Context, name string, timeout time.Duration) (json.RawMessage, error) {
	run, err := flow.RunFrom(ctx)
	if err != nil {
		return nil, err
	}
	if err := validateStepName(name); err != nil {
		return nil, invalidJob("signal", "%s", err.(*FieldError).Message)
	}
	if timeout <= 0 || timeout > MaxScheduleAhead {
		return nil, invalidJob("timeout", "must be between 0 and 5 years, got %s", timeout)
	}
	payload, err := run.WaitSignal(ctx, name, timeout)
	if err != nil {
		return nil, err
	}
	return openRunData(ctx, fmt.Sprintf("WaitSignal %q", name), payload)
}

// ErrCancelled is the context.Cause of a handler whose job was cancelled,
// and what WaitSignal returns for a job cancelled while it waited.
var ErrCancelled = sentinel.ErrCancelled

// SignalTarget names whom a signal is for: exactly one of a running
// workflow (any of its tasks waiting for the name receives it) or a job in
// flight.
type SignalTarget struct {
	WorkflowID int64
	JobID      int64
}

// MaxSignalPayloadBytes bounds a signal's payload (a JSON object).
const MaxSignalPayloadBytes = 64 << 10

// SignalSend sends the signal name with payload (a value marshalled to a JSON
// object, or raw JSON; nil means {}) to target and returns its id. It is
// kept until a wait receives it, so it may be sent before the wait begins.
// With Config.Encryption the payload is sealed under the keyring's current
// key (the sender does not know its receiver's tenant); the limit applies to
// the plaintext and to the envelope, about 4/3 of it. SQL callers use
// skiplock.signal(name => ..., workflow_id => ..., payload => ...), which
// stores what it is given.
func (c *Client) SignalSend(ctx context.Context, name string, target SignalTarget, payload any) (int64, error) {
	return c.SignalSendTx(ctx, c.pool, name, target, payload)
}

// SignalSendTx is SignalSend inside the caller's transaction (a pgx transaction, or a
// *sql.Tx wrapped with SQLTx, as EnqueueTx takes): the signal exists, and
// wakes its receiver, only if that transaction commits.
func (c *Client) SignalSendTx(ctx context.Context, tx Tx, name string, target SignalTarget, payload any) (int64, error) {
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
	if k := c.cfg.Encryption; k != nil {
		if raw, err = k.seal(raw, ""); err != nil {
			return 0, invalidJob("payload", "%v", err)
		}
		if len(raw) > MaxSignalPayloadBytes {
			return 0, invalidJob("payload", "sealed, %d bytes exceeds the limit of %d bytes (an envelope is about 4/3 of its plaintext)",
				len(raw), MaxSignalPayloadBytes)
		}
	}
	id, err := flow.Signal(ctx, c.store, tx, name, target.WorkflowID, target.JobID, raw)
	return id, flowError(err)
}
