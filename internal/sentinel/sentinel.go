// Package sentinel is the one home of the sentinel errors that the runtime
// (internal/worker), the workflow engine (internal/flow) and the public
// package share: the internal packages return them, and the root package
// exports each under the same name, so errors.Is works across the seam. It
// imports nothing of skiplock's, so every package may import it.
package sentinel

import "errors"

// The texts are the public ones.
var (
	// ErrLeaseLost: a write for a job was refused because this worker no longer
	// holds its lease; also the cause of a handler's context cancelled for it.
	ErrLeaseLost = errors.New("skiplock: lease lost")
	// ErrCancelled: the cause of a handler's context whose job was cancelled.
	ErrCancelled = errors.New("skiplock: job cancelled")

	// ErrNotInHandler: the context is not a handler's, run by a Client.
	ErrNotInHandler = errors.New("skiplock: not called with the context of a running handler")
	// ErrNotATask: the running job is not a workflow task.
	ErrNotATask = errors.New("skiplock: the running job is not a workflow task")
	// ErrTaskNotFinished: TaskOutput asked for a task that has not completed.
	ErrTaskNotFinished = errors.New("skiplock: the task has not completed")
	// ErrWorkflowNotFound: no workflow has this id.
	ErrWorkflowNotFound = errors.New("skiplock: workflow not found")
	// ErrStepRecorded: another run of the job recorded the step meanwhile.
	ErrStepRecorded = errors.New("skiplock: the step was recorded by another run of the job")
	// ErrSignalTimeout: no signal came before the wait's timeout.
	ErrSignalTimeout = errors.New("skiplock: no signal before the timeout")
)
