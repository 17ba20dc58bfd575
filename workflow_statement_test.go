package skiplock_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
)

// runTasks makes the jobs of the named tasks of workflow id running, as a
// claim would, so that one statement can then end them all together.
func runTasks(t *testing.T, pool *pgxpool.Pool, id int64, names ...string) {
	t.Helper()
	tag, err := pool.Exec(context.Background(), `
		UPDATE skiplock.jobs AS j
		SET state = 'running', attempts = 1, locked_by = 'test', lease_token = j.id, lease_expires_at = now() + interval '1 hour'
		FROM skiplock.workflow_tasks AS t
		WHERE t.workflow_id = $1 AND t.name = ANY ($2) AND j.id = t.job_id`, id, names)
	require.NoError(t, err)
	require.EqualValues(t, len(names), tag.RowsAffected(), "every named task has a job")
}

// completeTasks removes the named tasks' jobs in ONE statement, as a
// completer batch does.
func completeTasks(t *testing.T, pool *pgxpool.Pool, id int64, names ...string) {
	t.Helper()
	tag, err := pool.Exec(context.Background(), `
		DELETE FROM skiplock.jobs AS j USING skiplock.workflow_tasks AS t
		WHERE t.workflow_id = $1 AND t.name = ANY ($2) AND j.id = t.job_id AND j.state = 'running'`, id, names)
	require.NoError(t, err)
	require.EqualValues(t, len(names), tag.RowsAffected())
}

// killTasks dead-letters the named tasks' jobs in ONE statement, as the
// completer's dead_letter does.
func killTasks(t *testing.T, pool *pgxpool.Pool, id int64, names ...string) {
	t.Helper()
	tag, err := pool.Exec(context.Background(), `
		WITH d AS (
			DELETE FROM skiplock.jobs AS j USING skiplock.workflow_tasks AS t
			WHERE t.workflow_id = $1 AND t.name = ANY ($2) AND j.id = t.job_id AND j.state = 'running'
			RETURNING j.*)
		INSERT INTO skiplock.jobs_dead (id, priority, attempts, max_attempts, run_at, created_at, queue, kind, reason, payload, last_error)
		SELECT d.id, d.priority, d.attempts, d.max_attempts, d.run_at, d.created_at, d.queue, d.kind, 'error', d.payload, 'boom'
		FROM d`, id, names)
	require.NoError(t, err)
	require.EqualValues(t, len(names), tag.RowsAffected())
}

func noop(names ...string) []skiplock.Task {
	ts := make([]skiplock.Task, len(names))
	for i, n := range names {
		ts[i] = skiplock.Task{Name: n, Kind: "step"}
	}
	return ts
}

// A task's end is handled once per statement (migration 011): when one
// statement ends several tasks of the same workflows — a completer batch
// holding every parent of a fan-in, a failure beside a success, two
// workflows at once — each child waits for exactly the parents that ended,
// becomes a job exactly once, and every counter moves once per task.
func TestTasksEndingInOneStatement(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, fastConfig())
	get := func(id int64) skiplock.WorkflowStatus {
		st, err := c.WorkflowGet(ctx, id, false)
		require.NoError(t, err)
		return st
	}
	fanIn := func(name string, policy skiplock.FailurePolicy) int64 {
		ts := noop("root", "a", "b", "c", "join", "after")
		for i := 1; i <= 3; i++ {
			ts[i].DependsOn = []string{"root"}
		}
		ts[4].DependsOn = []string{"a", "b", "c"}
		ts[5].DependsOn = []string{"join"}
		id, err := c.EnqueueWorkflow(ctx, skiplock.Workflow{Name: name, OnFailure: policy, Tasks: ts})
		require.NoError(t, err)
		runTasks(t, db.Pool, id, "root")
		completeTasks(t, db.Pool, id, "root")
		return id
	}

	t.Run("fan-in completed at once", func(t *testing.T) {
		w1, w2 := fanIn("one", skiplock.CancelDependents), fanIn("two", skiplock.CancelDependents)
		runTasks(t, db.Pool, w1, "a", "b", "c")
		runTasks(t, db.Pool, w2, "a", "b")
		// One statement ends three parents of w1's join and two of w2's.
		_, err := db.Pool.Exec(ctx, `DELETE FROM skiplock.jobs WHERE state = 'running'`)
		require.NoError(t, err)

		st := get(w1)
		require.Equal(t, "running", st.State)
		require.Equal(t, []int{4, 2}, []int{st.Completed, st.Open})
		require.Equal(t, 1, countJobs(t, db.Pool, "task_id = (SELECT id FROM skiplock.workflow_tasks WHERE workflow_id = $1 AND name = 'join')", w1),
			"the join becomes one job")
		st = get(w2)
		require.Equal(t, []int{3, 3}, []int{st.Completed, st.Open})
		var waiting int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT waiting FROM skiplock.workflow_tasks WHERE workflow_id = $1 AND name = 'join'`, w2).Scan(&waiting))
		require.Equal(t, 1, waiting, "w2's join still waits for c")

		runTasks(t, db.Pool, w1, "join")
		completeTasks(t, db.Pool, w1, "join")
		runTasks(t, db.Pool, w1, "after")
		completeTasks(t, db.Pool, w1, "after")
		st = get(w1)
		require.Equal(t, "completed", st.State)
		require.Equal(t, []int{6, 0}, []int{st.Completed, st.Open})
		require.NotNil(t, st.FinishedAt)
	})

	t.Run("cancel policy: two failures and a success at once", func(t *testing.T) {
		id := fanIn("cancel", skiplock.CancelDependents)
		runTasks(t, db.Pool, id, "a", "b", "c")
		// a completes in its own statement; b and c die together.
		completeTasks(t, db.Pool, id, "a")
		killTasks(t, db.Pool, id, "b", "c")
		st, err := c.WorkflowGet(ctx, id, false)
		require.NoError(t, err)
		require.Equal(t, "failed", st.State)
		require.Equal(t, []int{2, 2, 2, 0}, []int{st.Completed, st.Dead, st.Cancelled, st.Open},
			"join and after are cancelled once each")
		require.Equal(t, "cancelled", taskByName(st, "join").State)
		require.Equal(t, "cancelled", taskByName(st, "after").State)
		require.Contains(t, taskByName(st, "b").Error, "boom")
		require.Zero(t, countJobs(t, db.Pool, "task_id IS NOT NULL AND task_id IN (SELECT id FROM skiplock.workflow_tasks WHERE workflow_id = $1)", id))
	})

	t.Run("continue policy: a failure beside a success", func(t *testing.T) {
		id := fanIn("continue", skiplock.RunDependents)
		runTasks(t, db.Pool, id, "a", "b", "c")
		completeTasks(t, db.Pool, id, "a")
		// b dies and c completes in the same transaction, one statement each
		// way, and the join runs once both ended.
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `
			WITH d AS (DELETE FROM skiplock.jobs AS j USING skiplock.workflow_tasks AS t
			           WHERE t.workflow_id = $1 AND t.name IN ('b', 'c') AND j.id = t.job_id RETURNING j.*, t.name),
			     dead AS (INSERT INTO skiplock.jobs_dead (id, priority, attempts, max_attempts, run_at, created_at, queue, kind, reason, payload)
			              SELECT d.id, d.priority, d.attempts, d.max_attempts, d.run_at, d.created_at, d.queue, d.kind, 'error', d.payload
			              FROM d WHERE d.name = 'b')
			SELECT count(*) FROM d`, id)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		var waiting, failed int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT waiting, parents_failed FROM skiplock.workflow_tasks WHERE workflow_id = $1 AND name = 'join'`, id).
			Scan(&waiting, &failed))
		require.Equal(t, []int{0, 1}, []int{waiting, failed})
		st := get(id)
		require.Equal(t, []int{3, 1, 0, 2}, []int{st.Completed, st.Dead, st.Cancelled, st.Open})
		require.Equal(t, "running", st.State)
		runTasks(t, db.Pool, id, "join")
		completeTasks(t, db.Pool, id, "join")
		runTasks(t, db.Pool, id, "after")
		completeTasks(t, db.Pool, id, "after")
		require.Equal(t, "failed", get(id).State, "a dead task fails the workflow even when its dependents ran")
	})

	t.Run("batch callback once", func(t *testing.T) {
		id, err := c.EnqueueBatch(ctx, skiplock.Batch{Name: "nightly", Members: noop("m1", "m2", "m3"),
			Callback: skiplock.Task{Name: "done", Kind: "step"}})
		require.NoError(t, err)
		runTasks(t, db.Pool, id, "m1", "m2", "m3")
		completeTasks(t, db.Pool, id, "m1", "m3")
		killTasks(t, db.Pool, id, "m2")
		require.Equal(t, 1, countJobs(t, db.Pool, "task_id = (SELECT id FROM skiplock.workflow_tasks WHERE workflow_id = $1 AND name = 'done')", id))
		runTasks(t, db.Pool, id, "done")
		completeTasks(t, db.Pool, id, "done")
		st := get(id)
		require.Equal(t, "completed", st.State, "a batch ends as its callback does")
		require.Equal(t, []int{3, 1, 0}, []int{st.Completed, st.Dead, st.Open})
	})
}
