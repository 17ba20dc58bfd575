// Package flow is the workflow engine: workflows and batches of tasks, task
// outputs and fan-out at run time, durable steps (Step's group commit in
// stepwriter.go), timers and signal waits. The root package keeps the
// public names as thin facades over it: they validate what the user gives
// (as Enqueue validates a job), marshal and decode the user's values, and
// turn this package's errors into the public ones; this package works on
// validated specs and raw JSON, through the statements of
// internal/store/sql/workflow.sql.
//
// The engine meets the core in one place: it is the worker.RunHook that
// the root package's handler runner calls around each run (Engine.BeginRun,
// Run.BeforeCompleteTx, Run.EndRun). The functions a handler calls find
// their run through the handler's context (RunFrom).
package flow

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/sentinel"
	"github.com/skiplock/skiplock/internal/store"
	"github.com/skiplock/skiplock/internal/worker"
)

// Errors of the engine, defined in internal/sentinel, which the root package
// exports under the same names.
var (
	ErrNotInHandler     = sentinel.ErrNotInHandler
	ErrNotATask         = sentinel.ErrNotATask
	ErrTaskNotFinished  = sentinel.ErrTaskNotFinished
	ErrWorkflowNotFound = sentinel.ErrWorkflowNotFound
	ErrStepRecorded     = sentinel.ErrStepRecorded
	ErrSignalTimeout    = sentinel.ErrSignalTimeout
)

// FieldError is an invalid field the engine found (a cycle in the task
// graph, a callback named like a member) or the database reported (SQLSTATE
// 22023 from add_tasks or signal). The root package turns it into its
// public *FieldError.
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

// Engine is one client's workflow engine: its statements, its pool, the
// worker id its runs hold their leases under, and Step's group commit.
type Engine struct {
	store  *store.Store
	pool   *pgxpool.Pool
	worker string
	steps  stepWriter
}

// New returns the engine of a client with store st, pool and worker id.
func New(st *store.Store, pool *pgxpool.Pool, workerID string) *Engine {
	return &Engine{store: st, pool: pool, worker: workerID}
}

// BeginRun starts the engine's part of running j: the run the handler's
// workflow and step functions find through the returned context.
func (e *Engine) BeginRun(ctx context.Context, j *worker.Job) (context.Context, worker.HookedRun) {
	run := &Run{engine: e, id: j.ID, token: j.LeaseToken, worker: e.worker}
	if !j.Durable {
		run.steps.none() // no checkpoint to read: Step runs without a round trip first
	}
	return context.WithValue(ctx, runKey{}, run), run
}
