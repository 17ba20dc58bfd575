package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Workflow statements (workflow.sql). A handler's statements for its own job
// take the job's Lease and worker id, like the fenced writes of lease.sql.

// CreateWorkflow creates a workflow and its tasks (tasks: a JSON array, see
// add_tasks in migration 007) and returns its id.
func (s *Store) CreateWorkflow(ctx context.Context, db Querier, name, onFailure string, tasks []byte, metadata *string, batch bool) (int64, error) {
	var id int64
	err := db.QueryRow(ctx, s.SQL("workflow_create"), name, onFailure, string(tasks), metadata, batch).Scan(&id)
	return id, err
}

// TaskContext is the workflow task a running job executes.
type TaskContext struct {
	TaskID     int64 // 0: a plain job
	WorkflowID int64
	Name       string
}

// TaskContext returns the task job l runs; held is false when the lease is gone.
func (s *Store) TaskContext(ctx context.Context, db DBTX, l Lease, worker string) (tc TaskContext, held bool, err error) {
	var task, wf *int64
	var name *string
	err = db.QueryRow(ctx, s.SQL("task_context"), l.ID, l.Token, worker).Scan(&task, &wf, &name)
	if isNoRows(err) {
		return tc, false, nil
	}
	if err != nil {
		return tc, false, err
	}
	if task != nil && *task > 0 && wf != nil {
		tc = TaskContext{TaskID: *task, WorkflowID: *wf, Name: deref(name)}
	}
	return tc, true, nil
}

// AddTasks adds tasks (a JSON array) to the workflow of the task job l runs
// and returns how many it added (a name the workflow has already is
// skipped); held is false when the lease is gone or the job is no task.
func (s *Store) AddTasks(ctx context.Context, db Querier, l Lease, worker string, tasks []byte) (added int, held bool, err error) {
	var wf int64
	err = db.QueryRow(ctx, s.SQL("task_add"), l.ID, l.Token, worker, string(tasks)).Scan(&wf, &added)
	if isNoRows(err) {
		return 0, false, nil
	}
	return added, err == nil, err
}

// SetTaskOutput stores the output of the task job l runs; held is false
// when the lease is gone or the job is no task.
func (s *Store) SetTaskOutput(ctx context.Context, db DBTX, l Lease, worker string, output []byte) (held bool, err error) {
	var id int64
	err = s.fencedRow(ctx, db, "task_set_output", []any{l.ID, l.Token, worker, string(output)}, &id)
	if isNoRows(err) {
		return false, nil
	}
	return err == nil, err
}

// SetTaskOutputTx is SetTaskOutput inside the caller's own transaction
// (SetOutputTx), which may be a database/sql one: see fencedRowInTx.
func (s *Store) SetTaskOutputTx(ctx context.Context, db Querier, l Lease, worker string, output []byte) (held bool, err error) {
	var id int64
	err = s.fencedRowInTx(ctx, db, s.SQL("task_set_output"), []any{l.ID, l.Token, worker, string(output)}, &id)
	if isNoRows(err) {
		return false, nil
	}
	return err == nil, err
}

// TaskOutput returns a task's state and output (nil when it has none);
// found is false when the workflow has no task of that name.
func (s *Store) TaskOutput(ctx context.Context, db DBTX, workflowID int64, name string) (state string, output []byte, found bool, err error) {
	err = db.QueryRow(ctx, s.SQL("task_output"), workflowID, name).Scan(&state, &output)
	if isNoRows(err) {
		return "", nil, false, nil
	}
	return state, output, err == nil, err
}

// StepGet returns a step's checkpoint (found false: none yet) and the
// database clock.
func (s *Store) StepGet(ctx context.Context, db DBTX, jobID int64, name string) (output []byte, now time.Time, found bool, err error) {
	err = db.QueryRow(ctx, s.SQL("step_get"), jobID, name).Scan(&output, &now)
	if isNoRows(err) {
		return nil, time.Time{}, false, nil
	}
	return output, now, err == nil, err
}

// StepPut records a step's checkpoint and returns the database clock; held
// is false when the lease is gone. A second checkpoint of the same step
// fails with a unique violation (23505).
func (s *Store) StepPut(ctx context.Context, db DBTX, l Lease, worker, name string, output []byte) (now time.Time, held bool, err error) {
	err = s.fencedRow(ctx, db, "step_put", []any{l.ID, l.Token, worker, name, string(output)}, &now)
	if isNoRows(err) {
		return now, false, nil
	}
	return now, err == nil, err
}

// StepCheckpoint is one step's checkpoint for StepPutMany.
type StepCheckpoint struct {
	Lease  Lease
	Name   string
	Output []byte
}

// StepPutMany records many steps' checkpoints in one statement (one
// commit) for worker. For each checkpoint, in order: held is false when its
// lease is gone, recorded is true when the step had been recorded already
// (StepPut's unique violation). The same job and step must not appear twice.
func (s *Store) StepPutMany(ctx context.Context, db DBTX, worker string, cps []StepCheckpoint) (held, recorded []bool, err error) {
	ids, tokens := make([]int64, len(cps)), make([]int64, len(cps))
	names, outputs := make([]string, len(cps)), make([]string, len(cps))
	for i, c := range cps {
		ids[i], tokens[i], names[i], outputs[i] = c.Lease.ID, c.Lease.Token, c.Name, string(c.Output)
	}
	type key struct {
		id   int64
		name string
	}
	inserted := map[key]bool{}
	var id int64
	var name string
	var ins bool
	err = s.fencedQuery(ctx, db, "step_put_many", []any{ids, tokens, names, outputs, worker}, func(rows pgx.Rows) error {
		_, err := pgx.ForEachRow(rows, []any{&id, &name, &ins}, func() error {
			inserted[key{id, name}] = ins
			return nil
		})
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	held, recorded = make([]bool, len(cps)), make([]bool, len(cps))
	for i, c := range cps {
		ins, ok := inserted[key{c.Lease.ID, c.Name}]
		held[i], recorded[i] = ok, ok && !ins
	}
	return held, recorded, nil
}

// WaitLock locks job l's row for a signal wait and returns its workflow
// (0: a plain job), whether it was asked to cancel, and the database clock;
// held is false when the lease is gone.
func (s *Store) WaitLock(ctx context.Context, db DBTX, l Lease, worker string) (workflowID int64, cancel bool, now time.Time, held bool, err error) {
	var wf *int64
	err = s.fencedRow(ctx, db, "wait_lock", []any{l.ID, l.Token, worker}, &wf, &cancel, &now)
	if isNoRows(err) {
		return 0, false, now, false, nil
	}
	if wf != nil {
		workflowID = *wf
	}
	return workflowID, cancel, now, err == nil, err
}

// ConsumeSignal takes the oldest unconsumed signal name addressed to jobID
// or workflowID (0: none) and returns its payload; found is false when there
// is none.
func (s *Store) ConsumeSignal(ctx context.Context, db DBTX, jobID int64, name string, workflowID int64) (payload []byte, found bool, err error) {
	var wf *int64
	if workflowID > 0 {
		wf = &workflowID
	}
	err = db.QueryRow(ctx, s.SQL("signal_consume"), jobID, name, wf).Scan(&payload)
	if isNoRows(err) {
		return nil, false, nil
	}
	return payload, err == nil, err
}

// WaitSleep returns job l to ready until wakeAt without spending its
// attempt; held is false when the lease is gone or the job was cancelled.
func (s *Store) WaitSleep(ctx context.Context, db DBTX, l Lease, worker string, wakeAt time.Time) (held bool, err error) {
	var id int64
	err = s.fencedRow(ctx, db, "wait_sleep", []any{l.ID, l.Token, worker, wakeAt}, &id)
	if isNoRows(err) {
		return false, nil
	}
	return err == nil, err
}

// SendSignal sends a signal to a workflow or a job (exactly one non-nil)
// and returns its id.
func (s *Store) SendSignal(ctx context.Context, db Querier, name string, workflowID, jobID *int64, payload string) (int64, error) {
	var id int64
	err := db.QueryRow(ctx, s.SQL("signal_send"), name, workflowID, jobID, payload).Scan(&id)
	return id, err
}

// WorkflowRow is one workflow with its task counts.
type WorkflowRow struct {
	ID                                      int64
	Name, State, OnFailure                  string
	Batch                                   bool
	Total, Open, Completed, Dead, Cancelled int
	CreatedAt                               time.Time
	FinishedAt                              *time.Time
	Metadata                                []byte
}

func scanWorkflow(row interface{ Scan(...any) error }) (WorkflowRow, error) {
	var w WorkflowRow
	err := row.Scan(&w.ID, &w.Name, &w.State, &w.OnFailure, &w.Batch, &w.Total, &w.Open, &w.Completed, &w.Dead,
		&w.Cancelled, &w.CreatedAt, &w.FinishedAt, &w.Metadata)
	return w, err
}

// WorkflowGet returns one workflow; found is false when there is none.
func (s *Store) WorkflowGet(ctx context.Context, db DBTX, id int64) (WorkflowRow, bool, error) {
	w, err := scanWorkflow(db.QueryRow(ctx, s.SQL("workflow_get"), id))
	if isNoRows(err) {
		return w, false, nil
	}
	return w, err == nil, err
}

// TaskRow is one task of a workflow, never with its payload.
type TaskRow struct {
	ID                     int64
	Name, State            string
	Queue, Kind            string
	JobID                  *int64
	CreatedAt              time.Time
	EnqueuedAt, FinishedAt *time.Time
	Error                  *string
	Output                 []byte // only when asked for
	DependsOn              []string
}

// WorkflowTasks returns a workflow's tasks in the order they were added.
func (s *Store) WorkflowTasks(ctx context.Context, db DBTX, id int64, outputs bool) ([]TaskRow, error) {
	rows, err := db.Query(ctx, s.SQL("workflow_tasks"), id, outputs)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []TaskRow
	for rows.Next() {
		var t TaskRow
		if err := rows.Scan(&t.ID, &t.Name, &t.State, &t.Queue, &t.Kind, &t.JobID, &t.CreatedAt, &t.EnqueuedAt,
			&t.FinishedAt, &t.Error, &t.Output, &t.DependsOn); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// WorkflowFilter selects workflows for WorkflowList; empty and zero match all.
type WorkflowFilter struct {
	State, Name string
	BeforeID    int64
	Limit       int
}

// WorkflowList returns workflows newest first.
func (s *Store) WorkflowList(ctx context.Context, db DBTX, f WorkflowFilter) ([]WorkflowRow, error) {
	var before any
	if f.BeforeID > 0 {
		before = f.BeforeID
	}
	rows, err := db.Query(ctx, s.SQL("workflow_list"), nullable(f.State), nullable(f.Name), before, f.Limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []WorkflowRow
	for rows.Next() {
		w, err := scanWorkflow(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, rows.Err()
}

// WorkflowCancel cancels a running workflow and returns how many tasks it
// stopped or asked to stop.
func (s *Store) WorkflowCancel(ctx context.Context, db DBTX, id int64) (int, error) {
	var n int
	err := db.QueryRow(ctx, s.SQL("workflow_cancel"), id).Scan(&n)
	return n, err
}

// WorkflowRetry runs a finished workflow's dead and cancelled tasks again
// and returns how many.
func (s *Store) WorkflowRetry(ctx context.Context, db DBTX, id int64) (int, error) {
	var n int
	err := db.QueryRow(ctx, s.SQL("workflow_retry"), id).Scan(&n)
	return n, err
}

// TimerPut records a timer step waking after delay (or at wakeAt when
// non-nil), by the database clock, and returns its checkpoint and the
// database clock; held is false when the lease is gone.
func (s *Store) TimerPut(ctx context.Context, db DBTX, l Lease, worker, name string, delay time.Duration, wakeAt *time.Time) (output []byte, now time.Time, held bool, err error) {
	err = s.fencedRow(ctx, db, "timer_put", []any{l.ID, l.Token, worker, name, Micros(delay), wakeAt}, &output, &now)
	if isNoRows(err) {
		return nil, now, false, nil
	}
	return output, now, err == nil, err
}

// DeleteWorkflowsNamed deletes every finished workflow named name, with its
// tasks, edges and signals, and returns how many.
func (s *Store) DeleteWorkflowsNamed(ctx context.Context, db DBTX, name string) (int, error) {
	var n int
	err := db.QueryRow(ctx, s.SQL("workflow_delete_named"), name).Scan(&n)
	return n, err
}

// PurgeWorkflows deletes up to limit workflows that finished longer than
// olderThan ago, with their tasks, edges and signals (retention), and
// returns how many it deleted.
func (s *Store) PurgeWorkflows(ctx context.Context, db DBTX, olderThan time.Duration, limit int) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, s.SQL("workflow_purge"), olderThan.Microseconds(), limit).Scan(&n)
	return n, err
}

// WorkflowWait is something a workflow's tasks wait for: a signal sent and
// not received yet ("signal"), a sleep ("timer") or a signal wait ("signal
// wait") with its wake time.
type WorkflowWait struct {
	What string
	Name string
	Task *string
	At   time.Time
}

// WorkflowWaits returns a workflow's pending signals and timers, oldest first.
func (s *Store) WorkflowWaits(ctx context.Context, db DBTX, id int64) ([]WorkflowWait, error) {
	rows, err := db.Query(ctx, s.SQL("workflow_waits"), id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []WorkflowWait
	for rows.Next() {
		var w WorkflowWait
		if err := rows.Scan(&w.What, &w.Name, &w.Task, &w.At); err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, rows.Err()
}

// StepsOfJob returns every checkpoint of a job by step name.
func (s *Store) StepsOfJob(ctx context.Context, db DBTX, jobID int64) (map[string][]byte, error) {
	rows, err := db.Query(ctx, s.SQL("steps_of_job"), jobID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][]byte{}
	for rows.Next() {
		var name string
		var output []byte
		if err := rows.Scan(&name, &output); err != nil {
			return nil, err
		}
		out[name] = output
	}
	return out, rows.Err()
}

// TaskOutputByID returns one task's output (nil: none); found is false when
// the workflow has no such task.
func (s *Store) TaskOutputByID(ctx context.Context, db DBTX, workflowID, taskID int64) (output []byte, found bool, err error) {
	err = db.QueryRow(ctx, s.SQL("task_output_by_id"), workflowID, taskID).Scan(&output)
	if isNoRows(err) {
		return nil, false, nil
	}
	return output, err == nil, err
}

// fencedQuery runs the fenced write name after write_settings, in one
// pipeline: in db's transaction (StepTx's, a signal wait's, which this
// process ends soon after) or in the pipeline's implicit one; each reads
// its rows. Planned on a near-empty jobs table, a write by id is a one-page
// sequential scan, and the plan is kept while the table grows (see
// lease.sql).
func (s *Store) fencedQuery(ctx context.Context, db DBTX, name string, args []any, each func(pgx.Rows) error) error {
	b := &pgx.Batch{}
	b.Queue(s.SQL("write_settings"))
	b.Queue(s.SQL(name), args...).Query(each)
	return db.SendBatch(ctx, b).Close()
}

// keyedRow runs statement name after claim_settings, in one pipeline (one
// implicit transaction), and scans its one row into dest: no JIT and no
// sequential scan of jobs, whatever the statistics say. For the statements
// that read the hot table on their own, in every process or on the fleet's
// turn (the reaper, the aging pass): under a pinned horizon those
// statistics count millions of dead versions, a plan's estimate passes
// jit_above_cost, and compiling it (inlining, optimization) took 0.2–0.9 s
// of a core per aging pass ten minutes into a pin, for a pass that found no
// queue with aging (auto_explain, docs/performance.md).
func (s *Store) keyedRow(ctx context.Context, db DBTX, name string, args []any, dest ...any) error {
	b := &pgx.Batch{}
	b.Queue(s.SQL("claim_settings"))
	b.Queue(s.SQL(name), args...).QueryRow(func(r pgx.Row) error { return r.Scan(dest...) })
	return db.SendBatch(ctx, b).Close()
}

// fencedRow is fencedQuery for a write that returns one row, scanned into
// dest (pgx.ErrNoRows when it returns none: the lease is gone).
func (s *Store) fencedRow(ctx context.Context, db DBTX, name string, args []any, dest ...any) error {
	b := &pgx.Batch{}
	b.Queue(s.SQL("write_settings"))
	b.Queue(s.SQL(name), args...).QueryRow(func(r pgx.Row) error { return r.Scan(dest...) })
	return db.SendBatch(ctx, b).Close()
}

// fencedRowInTx runs the fenced write q inside the caller's own transaction
// (CompleteTx's, SetOutputTx's) and scans its one row into dest
// (pgx.ErrNoRows when it returns none: the lease is gone). It runs after
// write_settings_save and before write_settings_restore, which put the
// caller's planner settings back for the statements it runs next (see
// lease.sql). One round trip through a pgx transaction; three statements
// through any other driver (database/sql, which has no pipeline).
func (s *Store) fencedRowInTx(ctx context.Context, db Querier, q string, args []any, dest ...any) error {
	if b, ok := db.(interface {
		SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	}); ok {
		batch := &pgx.Batch{}
		batch.Queue(s.SQL("write_settings_save"))
		batch.Queue(q, args...).QueryRow(func(r pgx.Row) error { return r.Scan(dest...) })
		batch.Queue(s.SQL("write_settings_restore"))
		return b.SendBatch(ctx, batch).Close()
	}
	var saved, savedMat, off, offMat, restored, restoredMat string
	if err := db.QueryRow(ctx, s.SQL("write_settings_save")).Scan(&saved, &savedMat, &off, &offMat); err != nil {
		return err
	}
	err := db.QueryRow(ctx, q, args...).Scan(dest...)
	if rerr := db.QueryRow(ctx, s.SQL("write_settings_restore")).Scan(&restored, &restoredMat); rerr != nil && err == nil {
		err = rerr
	}
	return err
}
