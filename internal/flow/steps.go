package flow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/skiplock/skiplock/internal/jsonerr"
	"github.com/skiplock/skiplock/internal/store"
	"github.com/skiplock/skiplock/internal/worker"
)

// Durable steps: checkpoints of a handler's progress, kept in the database
// under the job's id (which a retry keeps) until the job leaves the hot
// table. Any job can use them, workflow task or not. Names and outputs come
// validated (the root package's Step, StepTx, Sleep and WaitSignal).

// Step returns the recorded checkpoint of step name (recorded true) when
// the job has one; otherwise it runs fn, queues fn's output as the step's
// checkpoint for Step's group commit (stepWriter) and returns without
// waiting for the write. fn's error is returned as it is, and nothing is
// recorded then. A refused earlier checkpoint of the run fails Step before
// fn runs.
func (r *Run) Step(ctx context.Context, name string, fn func(context.Context) ([]byte, error)) (out []byte, recorded bool, err error) {
	if err := r.pending.check(r); err != nil {
		return nil, false, err
	}
	if out, found, err := r.recorded(ctx, name); found || err != nil {
		return out, found, err
	}
	raw, err := fn(ctx)
	if err != nil {
		return nil, false, err
	}
	e := r.engine
	e.steps.submit(ctx, e, store.StepCheckpoint{Lease: r.lease(), Name: name, Output: raw}, &r.pending)
	r.steps.put(name, raw) // this run's result from now on: if its write fails, so does the run
	return nil, false, nil
}

// StepTx is Step for work in this database that must happen exactly once:
// once the run's checkpoints on their way are written, fn runs inside a
// transaction on the client's pool, and its output is recorded as the
// step's checkpoint in that same transaction before it commits. Of two runs
// racing through the step only one can commit: the other gets
// ErrStepRecorded and its transaction rolls back. The transaction is a pgx
// one because the engine begins it on the client's pgx pool and pipelines
// the fenced checkpoint write on it.
func (r *Run) StepTx(ctx context.Context, name string, fn func(context.Context, pgx.Tx) ([]byte, error)) (out []byte, recorded bool, err error) {
	if err := r.pending.flush(r); err != nil {
		return nil, false, err
	}
	if out, found, err := r.recorded(ctx, name); found || err != nil {
		return out, found, err
	}
	e := r.engine
	var stored []byte
	err = pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		raw, err := fn(ctx, tx)
		if err != nil {
			return err
		}
		_, held, err := e.store.StepPut(ctx, tx, r.lease(), r.worker, name, raw)
		if err = r.stepPutError(name, held, false, err); err == nil {
			stored = raw
		}
		return err
	})
	if err == nil {
		r.steps.put(name, stored) // committed
	}
	return nil, false, err
}

// recorded returns the checkpoint of step name; found is false when there
// is none.
func (r *Run) recorded(ctx context.Context, name string) (out []byte, found bool, err error) {
	out, found, err = r.steps.get(ctx, r, name)
	if err != nil {
		return nil, false, fmt.Errorf("skiplock: step %q: %w", name, err)
	}
	return out, found, nil
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
func (c *stepCache) get(ctx context.Context, run *Run, name string) ([]byte, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.loaded {
		e := run.engine
		m, err := e.store.StepsOfJob(ctx, e.pool, run.id)
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

// stepPutError is the error of a step whose checkpoint write reported held
// (the lease), recorded (the step was recorded already: ErrStepRecorded, as
// is a unique violation) and err.
func (r *Run) stepPutError(name string, held, recorded bool, err error) error {
	var pe *pgconn.PgError
	switch {
	case recorded || errors.As(err, &pe) && pe.Code == "23505":
		return fmt.Errorf("skiplock: step %q of job %d: %w", name, r.id, ErrStepRecorded)
	case err != nil:
		return fmt.Errorf("skiplock: step %q of job %d: %w", name, r.id, err)
	case !held:
		return fmt.Errorf("skiplock: step %q of job %d: %w", name, r.id, worker.ErrLeaseLost)
	}
	return nil
}

type timerCheckpoint struct {
	WakeAt time.Time `json:"wake_at"`
}

// Timer records (or reads) the timer step name, waking d after it was
// first recorded, or at *at when at is set, by the database clock. It
// returns how long the job must still sleep: 0 once the wake time has
// passed (it never wakes early).
func (r *Run) Timer(ctx context.Context, name string, d time.Duration, at *time.Time) (time.Duration, error) {
	wake, now, err := r.timerStep(ctx, name, d, at)
	if err != nil {
		return 0, err
	}
	if !now.Before(wake) {
		return 0, nil
	}
	return wake.Sub(now), nil
}

// timerStep reads the timer step name, recording it first if needed, and
// returns its wake time and the database clock.
func (r *Run) timerStep(ctx context.Context, name string, d time.Duration, at *time.Time) (wake, now time.Time, err error) {
	if err := r.pending.flush(r); err != nil {
		return wake, now, err
	}
	e := r.engine
	out, now, found, err := e.store.StepGet(ctx, e.pool, r.id, name)
	if err == nil && !found {
		var held bool
		out, now, held, err = e.store.TimerPut(ctx, e.pool, r.lease(), r.worker, name, d, at)
		err = r.stepPutError(name, held, false, err)
	}
	if err != nil {
		return wake, now, err
	}
	var cp timerCheckpoint
	if err := json.Unmarshal(out, &cp); err != nil {
		return wake, now, fmt.Errorf("skiplock: step %q: not a timer: %s", name, jsonerr.Text(err))
	}
	return cp.WakeAt, now, nil
}

type signalCheckpoint struct {
	Payload json.RawMessage `json:"payload,omitempty"`
	Timeout bool            `json:"timeout,omitempty"`
}

// errWaiting is what WaitSignal returns while the job sleeps waiting: the
// handler returns it, and the run settles as snoozed (the job is ready again
// already, in the wait's own transaction: EndRun reports SnoozedTx).
type errWaiting struct{ name string }

func (e *errWaiting) Error() string { return "waiting for signal " + e.name }

// WaitSignal waits for the signal name addressed to the run's job, or to
// its workflow, for at most timeout from the first time this wait runs. It
// returns the signal's payload once one arrived, ErrSignalTimeout when none
// came in time, or, while there is none yet, an error the handler must
// return: the job went back to the table until the timeout, in the wait's
// own transaction, and a signal makes it due at once.
//
// The signal is taken, and the wait's checkpoint recorded, in one
// transaction, so a retried job receives the same payload again from the
// checkpoint and never takes a second signal.
func (r *Run) WaitSignal(ctx context.Context, name string, timeout time.Duration) (json.RawMessage, error) {
	got := "signal:" + name
	var cp signalCheckpoint
	if out, found, err := r.recorded(ctx, got); err != nil {
		return nil, err
	} else if found {
		if err := json.Unmarshal(out, &cp); err != nil {
			return nil, fmt.Errorf("skiplock: step %q: the recorded result does not decode into %T: %s", got, cp, jsonerr.Text(err))
		}
		return signalResult(cp)
	}
	deadline, _, err := r.timerStep(ctx, "wait:"+name, timeout, nil)
	if err != nil {
		return nil, err
	}
	e := r.engine
	st := e.store
	var slept bool
	err = pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		// Locking the job's row first orders this wait against signal(),
		// which locks it after storing the signal: either the signal is
		// visible to the statements below, or signal() runs after this
		// transaction and finds the job asleep, and makes it due.
		wf, cancel, now, held, err := st.WaitLock(ctx, tx, r.lease(), r.worker)
		switch {
		case err != nil:
			return err
		case !held:
			return worker.ErrLeaseLost
		case cancel:
			return worker.ErrCancelled
		}
		payload, found, err := st.ConsumeSignal(ctx, tx, r.id, name, wf)
		if err != nil {
			return err
		}
		switch {
		case found:
			cp = signalCheckpoint{Payload: payload}
		case !now.Before(deadline):
			cp = signalCheckpoint{Timeout: true}
		default:
			if held, err = st.WaitSleep(ctx, tx, r.lease(), r.worker, deadline); err != nil {
				return err
			} else if !held {
				return worker.ErrLeaseLost
			}
			// The job is ready again once tx commits: a heartbeat that
			// finds its lease gone from then on finds this commit.
			worker.NoteEndedInTx(ctx, r.id, r.token)
			slept = true
			return nil
		}
		raw, err := json.Marshal(cp)
		if err != nil {
			return err
		}
		_, held, err = st.StepPut(ctx, tx, r.lease(), r.worker, got, raw)
		return r.stepPutError(got, held, false, err)
	})
	switch {
	case err != nil:
		return nil, fmt.Errorf("skiplock: WaitSignal %q: %w", name, err)
	case slept:
		r.snoozedTx.Store(true)
		return nil, &errWaiting{name: name}
	}
	if raw, err := json.Marshal(cp); err == nil {
		r.steps.put(got, raw)
	}
	return signalResult(cp)
}

func signalResult(cp signalCheckpoint) (json.RawMessage, error) {
	switch {
	case cp.Timeout:
		return nil, ErrSignalTimeout
	case cp.Payload == nil:
		return json.RawMessage("{}"), nil
	}
	return cp.Payload, nil
}

// Signal sends the signal name with payload (a JSON object, validated) to a
// running workflow or a job in flight (exactly one of workflowID and jobID
// is non-zero) in db, and returns its id.
func Signal(ctx context.Context, st *store.Store, db store.Querier, name string, workflowID, jobID int64, payload []byte) (int64, error) {
	var wf, job *int64
	if workflowID != 0 {
		wf = &workflowID
	} else {
		job = &jobID
	}
	id, err := st.SendSignal(ctx, db, name, wf, job, string(payload))
	if err != nil {
		return 0, dbError("signal", err)
	}
	return id, nil
}
