package skiplock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/flow"
	"github.com/skiplock/skiplock/internal/jsonerr"
	"github.com/skiplock/skiplock/internal/sentinel"
	"github.com/skiplock/skiplock/internal/store"
	"github.com/skiplock/skiplock/internal/worker"
)

// MaxOutputBytes bounds a task's output and a durable step's result, as
// JSON text (the database refuses more: migration 007).
const MaxOutputBytes = 256 << 10

// FailurePolicy says what a workflow does when one of its tasks dies (its
// job reached the dead-letter table) or is cancelled.
type FailurePolicy string

// The failure policies.
const (
	// CancelDependents (the default) cancels every task that depends on the
	// failed one, directly or not, at once: none of them ever runs. Tasks on
	// other branches run on, and the workflow ends "failed".
	CancelDependents FailurePolicy = "cancel"
	// RunDependents runs the dependents anyway once their other parents
	// finished; TaskOutput tells them which parent did not complete.
	RunDependents FailurePolicy = "continue"
)

// Task is one task of a workflow: a job that is enqueued when every task it
// depends on has completed, in the transaction that completed the last of
// them. Until then it exists only in the workflow, never in the jobs table.
type Task struct {
	// Name identifies the task within its workflow (1 to 128 bytes, no
	// control characters); dependents and TaskOutput refer to it.
	Name string
	// DependsOn names the tasks that must complete first.
	DependsOn []string
	// Queue, Kind, Args (the payload), Priority, MaxAttempts, Tenant, Entity
	// and Metadata are the job's, as in EnqueueParams.
	Queue       string
	Kind        string
	Args        any
	Priority    int
	MaxAttempts int
	Tenant      string
	Entity      string
	Metadata    Metadata
}

// Workflow is a graph of tasks that EnqueueWorkflow enqueues together.
type Workflow struct {
	// Name says what the workflow is ("order", "nightly-export"); it need
	// not be unique. 1 to 128 bytes.
	Name string
	// Tasks may come in any order; each DependsOn must name a task of the
	// list, and the graph must have no cycle.
	Tasks []Task
	// OnFailure is the failure policy; empty means CancelDependents.
	OnFailure FailurePolicy
	// Metadata is a small JSON object the workflow keeps.
	Metadata Metadata
}

func validateTaskName(field, v string) error {
	switch {
	case v == "":
		return invalidJob(field, "must not be empty")
	case len(v) > MaxNameBytes:
		return invalidJob(field, "longer than %d bytes", MaxNameBytes)
	case strings.ContainsFunc(v, func(r rune) bool { return unicode.IsControl(r) || r == unicode.ReplacementChar }):
		return invalidJob(field, "must be valid UTF-8 without control characters")
	}
	return nil
}

// specs validates tasks as Enqueue would validate their jobs and returns
// them in an order where every task follows its parents (flow.Order).
// known reports whether a name outside tasks may be depended on (a task
// added at run time may depend on the workflow's existing tasks, which the
// database checks).
func (c *Client) specs(tasks []Task, known bool) ([]flow.TaskSpec, error) {
	if len(tasks) == 0 {
		return nil, invalidJob("tasks", "must not be empty")
	}
	names := make(map[string]bool, len(tasks))
	out := make([]flow.TaskSpec, len(tasks))
	for i, t := range tasks {
		field := fmt.Sprintf("tasks[%d]", i)
		if err := validateTaskName(field+".name", t.Name); err != nil {
			return nil, err
		}
		if names[t.Name] {
			return nil, invalidJob(field+".name", "%q is named twice", t.Name)
		}
		names[t.Name] = true
		a, err := c.prepare(EnqueueParams{Queue: t.Queue, Kind: t.Kind, Payload: t.Args, Priority: t.Priority,
			MaxAttempts: t.MaxAttempts, Tenant: t.Tenant, Entity: t.Entity, Metadata: t.Metadata})
		if err != nil {
			var fe *FieldError
			if errors.As(err, &fe) {
				return nil, &FieldError{Field: field + "." + fe.Field, Message: fe.Message, base: ErrInvalidJob}
			}
			return nil, err
		}
		payload, err := wholePayload(a)
		if err != nil { // prepare sealed it: not expected
			return nil, invalidJob(field+".args", "%v", err)
		}
		s := flow.TaskSpec{Name: t.Name, Queue: a.Queue, Kind: a.Kind, Payload: json.RawMessage(payload),
			Priority: a.Priority, MaxAttempts: a.MaxAttempts, Tenant: a.Tenant, Entity: a.Entity, DependsOn: t.DependsOn}
		if a.Metadata != nil {
			s.Metadata = json.RawMessage(*a.Metadata)
		}
		out[i] = s
	}
	ordered, err := flow.Order(out, known)
	return ordered, flowError(err)
}

func validatePolicy(p FailurePolicy) (string, error) {
	switch p {
	case "":
		return string(CancelDependents), nil
	case CancelDependents, RunDependents:
		return string(p), nil
	}
	return "", invalidJob("on_failure", "must be %q or %q, got %q", CancelDependents, RunDependents, p)
}

// EnqueueWorkflow enqueues wf with the client's pool and returns its id. See
// EnqueueWorkflowTx.
func (c *Client) EnqueueWorkflow(ctx context.Context, wf Workflow) (int64, error) {
	return c.EnqueueWorkflowTx(ctx, c.pool, wf)
}

// EnqueueWorkflowTx enqueues wf inside the caller's transaction (a Tx, as
// EnqueueTx takes): the workflow and its tasks
// exist if and only if that transaction commits. Tasks without parents are
// enqueued as jobs at once; the others when their parents complete. Every
// task is validated as Enqueue validates a job, and nothing is written when
// one is invalid: the error is a *FieldError naming it ("tasks[2].queue").
// Enqueue middleware does not run for tasks.
func (c *Client) EnqueueWorkflowTx(ctx context.Context, tx Tx, wf Workflow) (int64, error) {
	policy, err := validatePolicy(wf.OnFailure)
	if err != nil {
		return 0, err
	}
	return c.createWorkflow(ctx, tx, wf.Name, policy, wf.Tasks, wf.Metadata, nil)
}

func (c *Client) createWorkflow(ctx context.Context, tx Tx, name, policy string, tasks []Task, meta Metadata, callback *Task) (int64, error) {
	if err := validateTaskName("name", name); err != nil {
		return 0, err
	}
	specs, err := c.specs(tasks, false)
	if err != nil {
		return 0, err
	}
	wf := flow.Workflow{Name: name, OnFailure: policy, Tasks: specs}
	if callback != nil {
		cb, err := c.specs([]Task{*callback}, true)
		var fe *FieldError
		if errors.As(err, &fe) {
			return 0, &FieldError{Field: "callback" + strings.TrimPrefix(fe.Field, "tasks[0]"), Message: fe.Message, base: ErrInvalidJob}
		} else if err != nil {
			return 0, err
		}
		wf.Callback = &cb[0]
	}
	if wf.Metadata, err = encodeMetadata(meta); err != nil {
		return 0, err
	}
	id, err := flow.Create(ctx, c.store, tx, wf)
	return id, flowError(err)
}

// Batch is a set of jobs with a callback: the callback job is enqueued
// exactly once, when every member has finished, completed or dead. It is a
// workflow whose callback depends on every member under RunDependents; in
// the callback, BatchResult gives the counts.
type Batch struct {
	// Name says what the batch is; 1 to 128 bytes.
	Name string
	// Members are the batch's jobs; their names must be unique (their
	// DependsOn may order members among themselves).
	Members []Task
	// Callback is the job enqueued when every member has finished. Its name
	// defaults to "callback"; its DependsOn is ignored.
	Callback Task
	// Metadata is a small JSON object kept with the batch.
	Metadata Metadata
}

// EnqueueBatch enqueues b with the client's pool; see EnqueueBatchTx.
func (c *Client) EnqueueBatch(ctx context.Context, b Batch) (int64, error) {
	return c.EnqueueBatchTx(ctx, c.pool, b)
}

// EnqueueBatchTx enqueues b inside the caller's transaction and returns its
// id (a workflow id: WorkflowGet shows its progress).
func (c *Client) EnqueueBatchTx(ctx context.Context, tx Tx, b Batch) (int64, error) {
	cb := b.Callback
	if cb.Name == "" {
		cb.Name = "callback"
	}
	cb.DependsOn = nil
	return c.createWorkflow(ctx, tx, b.Name, string(RunDependents), b.Members, b.Metadata, &cb)
}

// Errors of the workflow functions called from a handler.
var (
	// ErrNotInHandler: the context is not a handler's, run by a Client.
	ErrNotInHandler = sentinel.ErrNotInHandler
	// ErrNotATask: the running job is not a workflow task.
	ErrNotATask = sentinel.ErrNotATask
	// ErrTaskNotFinished: TaskOutput asked for a task that has not completed.
	ErrTaskNotFinished = sentinel.ErrTaskNotFinished
	// ErrWorkflowNotFound: no workflow has this id.
	ErrWorkflowNotFound = sentinel.ErrWorkflowNotFound
	// ErrTaskNotFound: WorkflowTaskOutput found no task with that id in it.
	ErrTaskNotFound = errors.New("skiplock: task not found")
)

// flowError turns the workflow engine's *flow.FieldError into the public
// *FieldError (errors.Is(err, ErrInvalidJob)); other errors pass as they
// are (the engine's sentinels are the public ones).
func flowError(err error) error {
	var fe *flow.FieldError
	if errors.As(err, &fe) {
		return &FieldError{Field: fe.Field, Message: fe.Message, base: ErrInvalidJob}
	}
	return err
}

// workflowHook is the workflow engine of a client with store st, pool and
// worker id, as the one hook NewClient gives the handler runner (runJob):
// durable steps, timers, signal waits and workflow tasks find their run
// through it.
func workflowHook(st *store.Store, pool *pgxpool.Pool, workerID string) worker.RunHook {
	return flow.New(st, pool, workerID)
}

// TaskInfo says where a running task stands in the workflow it belongs to.
type TaskInfo struct {
	WorkflowID int64
	TaskID     int64
	Name       string
}

// CurrentTask returns the workflow task the handler of ctx runs;
// ErrNotATask when its job is a plain job.
func CurrentTask(ctx context.Context) (TaskInfo, error) {
	run, err := flow.RunFrom(ctx)
	if err != nil {
		return TaskInfo{}, err
	}
	ti, err := run.CurrentTask(ctx)
	return TaskInfo(ti), err
}

// TaskOutput decodes into T the output of task name of the workflow the
// handler of ctx runs in (normally one it depends on, which has completed).
// It returns ErrTaskNotFinished, wrapped with the task's state, when that
// task has not completed (under RunDependents a dead parent's dependents
// run and see this), and the zero T when it completed without an output.
func TaskOutput[T any](ctx context.Context, name string) (T, error) {
	var v T
	run, err := flow.RunFrom(ctx)
	if err != nil {
		return v, err
	}
	out, err := run.TaskOutput(ctx, name)
	if err != nil || len(out) == 0 {
		return v, err
	}
	if out, err = openRunData(ctx, fmt.Sprintf("TaskOutput %q", name), out); err != nil {
		return v, err
	}
	if err := json.Unmarshal(out, &v); err != nil {
		return v, fmt.Errorf("skiplock: TaskOutput %q: the output does not decode into %T: %s", name, v, jsonerr.Text(err))
	}
	return v, nil
}

func marshalOutput(field string, v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, invalidJob(field, "cannot be marshalled to JSON: %v", err)
	}
	if len(raw) > MaxOutputBytes {
		return nil, invalidJob(field, "%d bytes exceeds the limit of %d bytes", len(raw), MaxOutputBytes)
	}
	if err := ValidatePayload(raw, MaxOutputBytes); err != nil && !isObjectError(err) {
		var fe *FieldError
		if errors.As(err, &fe) {
			return nil, invalidJob(field, "%s", fe.Message)
		}
		return nil, err
	}
	return raw, nil
}

// isObjectError: ValidatePayload insists on an object; an output may be any
// JSON value.
func isObjectError(err error) bool {
	var fe *FieldError
	return errors.As(err, &fe) && strings.Contains(fe.Message, "object")
}

// SetOutput stores v (marshalled to JSON, at most MaxOutputBytes) as the
// output of the task the handler of ctx runs, for its dependents to read
// with TaskOutput. It is written at once, fenced by the job's lease; a later
// call replaces it, and a retried task writes it again. For an output that
// commits exactly when the task's own writes do, use SetOutputTx. With
// Config.Encryption the output is sealed, like a payload, under the key of
// the job's tenant; TaskOutput opens it.
func SetOutput(ctx context.Context, v any) error {
	run, err := flow.RunFrom(ctx)
	if err != nil {
		return err
	}
	raw, err := sealedOutput(ctx, "output", v)
	if err != nil {
		return err
	}
	return run.SetOutput(ctx, raw)
}

// sealedOutput is v marshalled and checked as an output (marshalOutput),
// then sealed for the handler of ctx (sealRunData).
func sealedOutput(ctx context.Context, field string, v any) ([]byte, error) {
	raw, err := marshalOutput(field, v)
	if err != nil {
		return nil, err
	}
	return sealRunData(ctx, field, raw)
}

// SetOutputTx is SetOutput inside tx, the caller's transaction (a pgx transaction,
// or a *sql.Tx wrapped with SQLTx, as CompleteTx takes), typically the one
// that also calls CompleteTx: the output, the task's writes and its
// completion commit together. Like CompleteTx it puts the transaction's
// planner settings back after its write.
func SetOutputTx(ctx context.Context, tx Tx, v any) error {
	run, err := flow.RunFrom(ctx)
	if err != nil {
		return err
	}
	raw, err := sealedOutput(ctx, "output", v)
	if err != nil {
		return err
	}
	return run.SetOutputTx(ctx, tx, raw)
}

// AddTasks adds tasks to the workflow of the task the handler of ctx runs:
// fan-out decided at run time. A new task may depend on the new ones and on
// the workflow's existing tasks, the running one included (it then waits
// for this task to complete). Adding is idempotent by name: a task whose
// name the workflow already has is skipped, so a retried handler adds
// nothing twice. Use AddTasksTx to add them in the transaction that
// completes the task.
func AddTasks(ctx context.Context, tasks ...Task) error {
	run, specs, err := runTasks(ctx, tasks)
	if err != nil {
		return err
	}
	return flowError(run.AddTasks(ctx, specs))
}

// AddTasksTx is AddTasks inside tx, the caller's transaction (a pgx transaction, or
// a *sql.Tx wrapped with SQLTx).
func AddTasksTx(ctx context.Context, tx Tx, tasks ...Task) error {
	run, specs, err := runTasks(ctx, tasks)
	if err != nil {
		return err
	}
	return flowError(run.AddTasksTx(ctx, tx, specs))
}

// runTasks finds the run of the handler of ctx and validates tasks as its
// client validates a job.
func runTasks(ctx context.Context, tasks []Task) (*flow.Run, []flow.TaskSpec, error) {
	run, err := flow.RunFrom(ctx)
	if err != nil {
		return nil, nil, err
	}
	c, ok := clientFrom(ctx)
	if !ok {
		return nil, nil, ErrNotInHandler
	}
	specs, err := c.specs(tasks, true)
	return run, specs, err
}

// BatchCounts are a batch's members by how they finished.
type BatchCounts struct {
	BatchID   int64
	Members   int
	Completed int
	Dead      int
	Cancelled int
}

// BatchResult returns the counts of the batch whose callback the handler of
// ctx runs. Every member has finished by then, so they are final.
func BatchResult(ctx context.Context) (BatchCounts, error) {
	run, err := flow.RunFrom(ctx)
	if err != nil {
		return BatchCounts{}, err
	}
	bc, err := run.BatchCounts(ctx)
	return BatchCounts(bc), err
}

// WorkflowStatus is a workflow and its tasks, as WorkflowGet returns it.
type WorkflowStatus struct {
	ID         int64          `json:"id"`
	Name       string         `json:"name"`
	State      string         `json:"state"` // running, completed, failed, cancelled
	OnFailure  FailurePolicy  `json:"on_failure"`
	Batch      bool           `json:"batch"`
	Tasks      int            `json:"tasks"`
	Open       int            `json:"open"` // pending or enqueued
	Completed  int            `json:"completed"`
	Dead       int            `json:"dead"`
	Cancelled  int            `json:"cancelled"`
	CreatedAt  time.Time      `json:"created_at"`
	FinishedAt *time.Time     `json:"finished_at,omitempty"`
	Metadata   Metadata       `json:"metadata,omitempty"`
	TaskList   []TaskStatus   `json:"task_list,omitempty"`
	States     map[string]int `json:"states,omitempty"` // tasks per state (WorkflowGet only)
}

// TaskStatus is one task of a workflow; Output is set only when asked for:
// like a payload, it may hold personal data.
type TaskStatus struct {
	ID         int64           `json:"id"`
	Name       string          `json:"name"`
	State      string          `json:"state"` // pending, enqueued, completed, dead, cancelled
	Queue      string          `json:"queue"`
	Kind       string          `json:"kind"`
	JobID      *int64          `json:"job_id,omitempty"`
	DependsOn  []string        `json:"depends_on,omitempty"`
	CreatedAt  time.Time       `json:"created_at"`
	EnqueuedAt *time.Time      `json:"enqueued_at,omitempty"`
	FinishedAt *time.Time      `json:"finished_at,omitempty"`
	Error      string          `json:"error,omitempty"`
	Output     json.RawMessage `json:"output,omitempty"`
}

func workflowStatus(w store.WorkflowRow) WorkflowStatus {
	meta, _ := decodeMetadata(w.Metadata)
	return WorkflowStatus{ID: w.ID, Name: w.Name, State: w.State, OnFailure: FailurePolicy(w.OnFailure), Batch: w.Batch,
		Tasks: w.Total, Open: w.Open, Completed: w.Completed, Dead: w.Dead, Cancelled: w.Cancelled,
		CreatedAt: w.CreatedAt, FinishedAt: w.FinishedAt, Metadata: meta}
}

// WorkflowGet returns a workflow with its tasks; their outputs only when
// withOutputs is set (a sealed output opened when the client's keyring can
// open it, as stored otherwise). ErrWorkflowNotFound when there is none.
func (c *Client) WorkflowGet(ctx context.Context, id int64, withOutputs bool) (WorkflowStatus, error) {
	w, ts, err := flow.Get(ctx, c.store, c.pool, id, withOutputs)
	if err != nil {
		return WorkflowStatus{}, err
	}
	st := workflowStatus(w)
	st.States = map[string]int{}
	for _, t := range ts {
		st.States[t.State]++
		s := TaskStatus{ID: t.ID, Name: t.Name, State: t.State, Queue: t.Queue, Kind: t.Kind, JobID: t.JobID,
			DependsOn: t.DependsOn, CreatedAt: t.CreatedAt, EnqueuedAt: t.EnqueuedAt, FinishedAt: t.FinishedAt}
		if t.Output != nil {
			s.Output = c.openIfSealed(t.Output)
		}
		if t.Error != nil {
			s.Error = *t.Error
		}
		st.TaskList = append(st.TaskList, s)
	}
	return st, nil
}

// WorkflowFilter selects workflows for WorkflowList; zero values match all.
type WorkflowFilter struct {
	State    string // running, completed, failed, cancelled
	Name     string
	BeforeID int64 // for paging: ids below this one
	Limit    int   // default 50
}

// WorkflowList returns workflows newest first, without their tasks.
func (c *Client) WorkflowList(ctx context.Context, f WorkflowFilter) ([]WorkflowStatus, error) {
	switch f.State {
	case "", "running", "completed", "failed", "cancelled":
	default:
		return nil, invalidJob("state", "must be running, completed, failed or cancelled, got %q", f.State)
	}
	if f.Limit <= 0 {
		f.Limit = 50
	}
	rows, err := flow.List(ctx, c.store, c.pool, store.WorkflowFilter{State: f.State, Name: f.Name, BeforeID: f.BeforeID, Limit: f.Limit})
	if err != nil {
		return nil, err
	}
	out := make([]WorkflowStatus, 0, len(rows))
	for _, w := range rows {
		out = append(out, workflowStatus(w))
	}
	return out, nil
}

// WorkflowCancel cancels a running workflow: its pending tasks never run,
// its ready jobs go to the dead-letter table as cancelled, and its running
// jobs' handlers are cancelled (their jobs dead-lettered as cancelled when
// they return). It returns how many tasks it stopped or asked to stop (0
// for a workflow that already finished); ErrWorkflowNotFound when there is none.
func (c *Client) WorkflowCancel(ctx context.Context, id int64) (int, error) {
	n, err := flow.Cancel(ctx, c.store, c.pool, id)
	return n, flowError(err)
}

// WorkflowRetry runs a finished workflow's dead and cancelled tasks again
// (completed ones keep their outputs and do not run again) and returns how
// many. A running workflow is refused.
func (c *Client) WorkflowRetry(ctx context.Context, id int64) (int, error) {
	n, err := flow.Retry(ctx, c.store, c.pool, id)
	return n, flowError(err)
}

// WorkflowWait is something a workflow's tasks wait for: a signal sent and
// not received yet (What "signal", At when it was sent), a sleep ("timer",
// At its wake time) or a signal wait ("signal wait", At its timeout).
type WorkflowWait struct {
	What string `json:"what"`
	// Name is the signal's or the sleep's name.
	Name string `json:"name"`
	// Task is the name of the task that waits ("" for a signal addressed to
	// the workflow and not received yet).
	Task string    `json:"task,omitempty"`
	At   time.Time `json:"at"`
}

// WorkflowWaitList returns what the workflow's tasks wait for (pending
// signals, timers and signal waits), oldest first; none for an unknown id.
func (c *Client) WorkflowWaitList(ctx context.Context, id int64) ([]WorkflowWait, error) {
	waits, err := c.store.WorkflowWaits(ctx, c.pool, id)
	if err != nil {
		return nil, fmt.Errorf("skiplock: workflow waits: %w", err)
	}
	out := make([]WorkflowWait, len(waits))
	for i, w := range waits {
		out[i] = WorkflowWait{What: w.What, Name: w.Name, At: w.At}
		if w.Task != nil {
			out[i].Task = *w.Task
		}
	}
	return out, nil
}

// WorkflowTaskOutput returns the output of one task of a workflow, by ids
// (nil when the task set none), or ErrTaskNotFound when the workflow has no
// such task. Like a payload, an output may hold personal data: read it only
// when a person asked to see it, and never log it. A sealed output is opened
// when the client's keyring can open it, and returned as stored, the
// envelope, otherwise. A handler reads its parents' outputs with TaskOutput.
func (c *Client) WorkflowTaskOutput(ctx context.Context, workflowID, taskID int64) (json.RawMessage, error) {
	raw, found, err := c.store.TaskOutputByID(ctx, c.pool, workflowID, taskID)
	switch {
	case err != nil:
		return nil, fmt.Errorf("skiplock: workflow task output: %w", err)
	case !found:
		return nil, ErrTaskNotFound
	}
	return json.RawMessage(c.openIfSealed(raw)), nil
}
