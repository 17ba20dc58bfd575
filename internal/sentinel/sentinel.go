// Package sentinel is the one home of the sentinel errors that the runtime
// (internal/worker), the workflow engine (internal/flow) and the public
// package share: the internal packages return them, and the root package
// exports each under the same name, so errors.Is works across the seam. It
// imports nothing of skiplock's, so every package may import it.
package sentinel

import "errors"

// The texts are the public ones.
var (
	// LeaseLost: a write for a job was refused because this worker no longer
	// holds its lease; also the cause of a handler's context cancelled for it.
	LeaseLost = errors.New("skiplock: lease lost")
	// Cancelled: the cause of a handler's context whose job was cancelled.
	Cancelled = errors.New("skiplock: job cancelled")

	// NotInHandler: the context is not a handler's, run by a Client.
	NotInHandler = errors.New("skiplock: not called with the context of a running handler")
	// NotATask: the running job is not a workflow task.
	NotATask = errors.New("skiplock: the running job is not a workflow task")
	// TaskNotFinished: TaskOutput asked for a task that has not completed.
	TaskNotFinished = errors.New("skiplock: the task has not completed")
	// WorkflowNotFound: no workflow has this id.
	WorkflowNotFound = errors.New("skiplock: workflow not found")
	// StepRecorded: another run of the job recorded the step meanwhile.
	StepRecorded = errors.New("skiplock: the step was recorded by another run of the job")
	// SignalTimeout: no signal came before the wait's timeout.
	SignalTimeout = errors.New("skiplock: no signal before the timeout")
)
