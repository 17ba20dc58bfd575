package flow

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/skiplock/skiplock/internal/store"
	"github.com/skiplock/skiplock/internal/worker"
)

// Run is the engine's side of one handler run: the job's lease, its
// workflow task (looked up once), its checkpoints (read once) and those on
// their way.
type Run struct {
	engine *Engine
	id     int64
	token  int64 // copies of the lease, safe from changes to the Job's fields
	worker string

	snoozedTx atomic.Bool // WaitSignal returned the job to ready in its own transaction

	taskState taskState // the workflow task the job runs, looked up once
	steps     stepCache // the job's checkpoints, read once per run
	pending   runSteps  // Step's checkpoints on their way (stepwriter.go)
}

type runKey struct{}

// RunFrom returns the run of the handler whose context ctx is;
// ErrNotInHandler when there is none.
func RunFrom(ctx context.Context) (*Run, error) {
	run, _ := ctx.Value(runKey{}).(*Run)
	if run == nil {
		return nil, ErrNotInHandler
	}
	return run, nil
}

func (r *Run) lease() store.Lease { return store.Lease{ID: r.id, Token: r.token} }

// BeforeCompleteTx waits for the run's checkpoints on their way: the job
// leaves the hot table with them written (a CompleteTx in the handler's
// transaction). It returns the first one's error that was refused.
func (r *Run) BeforeCompleteTx() error { return r.pending.flush(r) }

// EndRun settles the run's checkpoints once the handler returned. The job
// leaves the handler with its checkpoints written, so a retry skips the
// steps that completed; a refused one fails a run that returned nil, unless
// it completed in its own transaction. A run that returned nil is about to
// complete: its checkpoints not yet carried by a write are withdrawn, as
// the completion supersedes them. It also reports a signal wait that
// returned the job to the table itself (SnoozedTx).
func (r *Run) EndRun(res worker.Result) worker.Result {
	snoozed := r.snoozedTx.Load()
	if res.Err == nil && !res.CompletedTx && !snoozed && !res.LeaseLostInTx {
		r.pending.withdraw(&r.engine.steps)
	}
	if err := r.pending.flush(r); err != nil && res.Err == nil && !res.CompletedTx {
		res.Err = err
	}
	res.SnoozedTx = snoozed
	return res
}

// taskState is a run's workflow task, looked up once (mu guards it).
type taskState struct {
	mu     sync.Mutex
	loaded bool
	tc     store.TaskContext
}

// task returns the workflow task the run's job executes (TaskID 0: none).
func (r *Run) task(ctx context.Context) (store.TaskContext, error) {
	r.taskState.mu.Lock()
	defer r.taskState.mu.Unlock()
	if r.taskState.loaded {
		return r.taskState.tc, nil
	}
	e := r.engine
	tc, held, err := e.store.TaskContext(ctx, e.pool, r.lease(), r.worker)
	switch {
	case err != nil:
		return tc, fmt.Errorf("skiplock: job %d: %w", r.id, err)
	case !held:
		return tc, fmt.Errorf("skiplock: job %d: %w", r.id, worker.ErrLeaseLost)
	}
	r.taskState.loaded, r.taskState.tc = true, tc
	return tc, nil
}

// TaskInfo is where a running task stands in its workflow.
type TaskInfo struct {
	WorkflowID int64
	TaskID     int64
	Name       string
}

// CurrentTask returns the workflow task the run's job executes;
// ErrNotATask when it is a plain job.
func (r *Run) CurrentTask(ctx context.Context) (TaskInfo, error) {
	tc, err := r.currentTask(ctx)
	if err != nil {
		return TaskInfo{}, err
	}
	return TaskInfo{WorkflowID: tc.WorkflowID, TaskID: tc.TaskID, Name: tc.Name}, nil
}

// currentTask is task, with ErrNotATask for a plain job.
func (r *Run) currentTask(ctx context.Context) (store.TaskContext, error) {
	tc, err := r.task(ctx)
	if err != nil {
		return tc, err
	}
	if tc.TaskID == 0 {
		return tc, ErrNotATask
	}
	return tc, nil
}
