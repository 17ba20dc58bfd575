package flow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/skiplock/skiplock/internal/store"
)

// TaskSpec is a task as add_tasks (migration 007) takes it, validated as
// Enqueue validates a job (the root package does that).
type TaskSpec struct {
	Name        string          `json:"name"`
	Queue       string          `json:"queue"`
	Kind        string          `json:"kind"`
	Payload     json.RawMessage `json:"payload"`
	Priority    int             `json:"priority"`
	MaxAttempts *int            `json:"max_attempts,omitempty"`
	Tenant      *string         `json:"tenant,omitempty"`
	Entity      *string         `json:"entity,omitempty"`
	Metadata    json.RawMessage `json:"metadata,omitempty"`
	DependsOn   []string        `json:"depends_on,omitempty"`
	Callback    bool            `json:"callback,omitempty"`
}

// Order checks the graph of specs and returns them in an order where every
// task follows its parents (what add_tasks requires, which makes a cycle
// impossible to store), keeping the given order where it can. known
// reports whether a name outside specs may be depended on (a task added at
// run time may depend on the workflow's existing tasks, which the database
// checks). Names must be unique; the errors name the field
// ("tasks[2].depends_on") as the caller's list numbers it.
func Order(specs []TaskSpec, known bool) ([]TaskSpec, error) {
	index := make(map[string]int, len(specs))
	for i, s := range specs {
		index[s.Name] = i
	}
	for i, s := range specs {
		for _, d := range s.DependsOn {
			if _, ok := index[d]; !ok && !known {
				return nil, &FieldError{fmt.Sprintf("tasks[%d].depends_on", i), fmt.Sprintf("%q names no task of the workflow", d)}
			}
			if d == s.Name {
				return nil, &FieldError{fmt.Sprintf("tasks[%d].depends_on", i), "a task cannot depend on itself"}
			}
		}
	}
	return topoSort(specs, index)
}

// topoSort orders specs so that every task follows its parents in the
// list, keeping the given order where it can; a cycle is reported by the
// name of a task on it.
func topoSort(specs []TaskSpec, index map[string]int) ([]TaskSpec, error) {
	const (
		unseen = iota
		visiting
		done
	)
	mark := make([]int, len(specs))
	out := make([]TaskSpec, 0, len(specs))
	var visit func(i int) error
	visit = func(i int) error {
		switch mark[i] {
		case done:
			return nil
		case visiting:
			return &FieldError{fmt.Sprintf("tasks[%d].depends_on", i), fmt.Sprintf("the tasks form a cycle through %q", specs[i].Name)}
		}
		mark[i] = visiting
		for _, d := range specs[i].DependsOn {
			if j, ok := index[d]; ok {
				if err := visit(j); err != nil {
					return err
				}
			}
		}
		mark[i] = done
		out = append(out, specs[i])
		return nil
	}
	for i := range specs {
		if err := visit(i); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Workflow is a workflow to create: validated, its tasks in Order.
type Workflow struct {
	Name      string
	OnFailure string // "cancel" or "continue"
	Tasks     []TaskSpec
	// Callback, when set, makes the workflow a batch: the callback task
	// depends on every member and runs once they all finished.
	Callback *TaskSpec
	Metadata *string // JSON object text; nil: none
}

// Create creates wf in db (the caller's transaction, or a pool) and returns
// its id. Tasks without parents are enqueued as jobs at once.
func Create(ctx context.Context, st *store.Store, db store.Querier, wf Workflow) (int64, error) {
	specs := wf.Tasks
	if wf.Callback != nil {
		cb := *wf.Callback
		cb.Callback = true
		cb.DependsOn = make([]string, 0, len(specs))
		for _, s := range specs {
			if s.Name == cb.Name {
				return 0, &FieldError{"callback.name", fmt.Sprintf("%q is also a member's name", s.Name)}
			}
			cb.DependsOn = append(cb.DependsOn, s.Name)
		}
		specs = append(specs[:len(specs):len(specs)], cb)
	}
	raw, err := json.Marshal(specs)
	if err != nil {
		return 0, err
	}
	id, err := st.CreateWorkflow(ctx, db, wf.Name, wf.OnFailure, raw, wf.Metadata, wf.Callback != nil)
	if err != nil {
		return 0, dbError("enqueue", err)
	}
	return id, nil
}

// AddTasks adds specs (validated, in Order) to the workflow of the task the
// run executes, on the client's pool.
func (r *Run) AddTasks(ctx context.Context, specs []TaskSpec) error {
	return r.addTasks(ctx, r.engine.pool, specs)
}

// AddTasksTx is AddTasks inside tx, the caller's transaction.
func (r *Run) AddTasksTx(ctx context.Context, tx store.Querier, specs []TaskSpec) error {
	return r.addTasks(ctx, tx, specs)
}

func (r *Run) addTasks(ctx context.Context, db store.Querier, specs []TaskSpec) error {
	raw, err := json.Marshal(specs)
	if err != nil {
		return err
	}
	_, held, err := r.engine.store.AddTasks(ctx, db, r.lease(), r.worker, raw)
	switch {
	case err != nil:
		return dbError("AddTasks", err)
	case !held:
		if _, terr := r.task(ctx); terr != nil {
			return fmt.Errorf("skiplock: AddTasks: %w", terr)
		}
		return fmt.Errorf("skiplock: AddTasks: job %d: %w", r.id, ErrNotATask)
	}
	return nil
}

// SetOutput stores output (JSON, validated) as the output of the task the
// run executes, fenced by the job's lease, on the client's pool.
func (r *Run) SetOutput(ctx context.Context, output []byte) error {
	held, err := r.engine.store.SetTaskOutput(ctx, r.engine.pool, r.lease(), r.worker, output)
	return r.setOutputResult(ctx, held, err)
}

// SetOutputTx is SetOutput inside tx, the caller's transaction (pgx or
// database/sql): the caller's planner settings are put back after it.
func (r *Run) SetOutputTx(ctx context.Context, tx store.Querier, output []byte) error {
	held, err := r.engine.store.SetTaskOutputTx(ctx, tx, r.lease(), r.worker, output)
	return r.setOutputResult(ctx, held, err)
}

func (r *Run) setOutputResult(ctx context.Context, held bool, err error) error {
	switch {
	case err != nil:
		return fmt.Errorf("skiplock: SetOutput: job %d: %w", r.id, err)
	case !held:
		if _, terr := r.task(ctx); terr != nil {
			return fmt.Errorf("skiplock: SetOutput: %w", terr)
		}
		return fmt.Errorf("skiplock: SetOutput: job %d: %w", r.id, ErrNotATask)
	}
	return nil
}

// TaskOutput returns the output (JSON; nil when it has none) of task name
// of the workflow the run's task belongs to. ErrTaskNotFinished, wrapped
// with the task's state, when that task has not completed.
func (r *Run) TaskOutput(ctx context.Context, name string) ([]byte, error) {
	tc, err := r.currentTask(ctx)
	if err != nil {
		return nil, err
	}
	e := r.engine
	state, out, found, err := e.store.TaskOutput(ctx, e.pool, tc.WorkflowID, name)
	switch {
	case err != nil:
		return nil, fmt.Errorf("skiplock: TaskOutput %q: %w", name, err)
	case !found:
		return nil, fmt.Errorf("skiplock: TaskOutput: workflow %d has no task %q", tc.WorkflowID, name)
	case state != "completed":
		return nil, fmt.Errorf("skiplock: TaskOutput %q: it is %s: %w", name, state, ErrTaskNotFinished)
	}
	return out, nil
}

// BatchCounts are a batch's members by how they finished.
type BatchCounts struct {
	BatchID   int64
	Members   int
	Completed int
	Dead      int
	Cancelled int
}

// BatchCounts returns the counts of the batch whose callback the run
// executes. Every member has finished by then, so they are final.
func (r *Run) BatchCounts(ctx context.Context) (BatchCounts, error) {
	tc, err := r.currentTask(ctx)
	if err != nil {
		return BatchCounts{}, err
	}
	e := r.engine
	w, found, err := e.store.WorkflowGet(ctx, e.pool, tc.WorkflowID)
	if err != nil || !found {
		return BatchCounts{}, fmt.Errorf("skiplock: BatchResult: workflow %d: %w", tc.WorkflowID, errors.Join(err, ErrWorkflowNotFound))
	}
	// The callback itself is the one open task.
	return BatchCounts{BatchID: w.ID, Members: w.Total - 1, Completed: w.Completed, Dead: w.Dead, Cancelled: w.Cancelled}, nil
}

// Get returns a workflow and its tasks (their outputs only when outputs is
// set); ErrWorkflowNotFound when there is none.
func Get(ctx context.Context, st *store.Store, db store.DBTX, id int64, outputs bool) (store.WorkflowRow, []store.TaskRow, error) {
	w, found, err := st.WorkflowGet(ctx, db, id)
	if err != nil {
		return w, nil, fmt.Errorf("skiplock: workflow get: %w", err)
	}
	if !found {
		return w, nil, ErrWorkflowNotFound
	}
	ts, err := st.WorkflowTasks(ctx, db, id, outputs)
	if err != nil {
		return w, nil, fmt.Errorf("skiplock: workflow get: %w", err)
	}
	return w, ts, nil
}

// List returns workflows newest first, without their tasks.
func List(ctx context.Context, st *store.Store, db store.DBTX, f store.WorkflowFilter) ([]store.WorkflowRow, error) {
	rows, err := st.WorkflowList(ctx, db, f)
	if err != nil {
		return nil, fmt.Errorf("skiplock: workflow list: %w", err)
	}
	return rows, nil
}

// Cancel cancels a running workflow and returns how many tasks it stopped
// or asked to stop; ErrWorkflowNotFound when there is none.
func Cancel(ctx context.Context, st *store.Store, db store.DBTX, id int64) (int, error) {
	n, err := st.WorkflowCancel(ctx, db, id)
	if err != nil {
		return 0, dbError("cancel", err)
	}
	return n, nil
}

// Retry runs a finished workflow's dead and cancelled tasks again and
// returns how many; a running workflow is refused.
func Retry(ctx context.Context, st *store.Store, db store.DBTX, id int64) (int, error) {
	n, err := st.WorkflowRetry(ctx, db, id)
	if err != nil {
		return 0, dbError("retry", err)
	}
	return n, nil
}

// dbError turns the workflow functions' validation errors (SQLSTATE 22023)
// into a *FieldError, or ErrWorkflowNotFound for the field "id", and
// strips PostgreSQL's detail from the others (it can echo row values).
func dbError(op string, err error) error {
	if f, m, ok := store.InvalidField(err); ok {
		if f == "id" {
			return fmt.Errorf("skiplock: workflow %s: %w (%s)", op, ErrWorkflowNotFound, m)
		}
		return &FieldError{Field: f, Message: m}
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		// The message only: PostgreSQL's detail can echo row values.
		return fmt.Errorf("skiplock: workflow %s: %s (SQLSTATE %s)", op, strings.TrimPrefix(pg.Message, "skiplock: "), pg.Code)
	}
	return fmt.Errorf("skiplock: workflow %s: %w", op, err)
}
