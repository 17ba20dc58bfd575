package skiplock_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
)

// runLog records, per task name, when each run started and ended, in order.
type runLog struct {
	mu     sync.Mutex
	events []string
	runs   map[string]int
}

func newRunLog() *runLog { return &runLog{runs: map[string]int{}} }

func (l *runLog) add(ev, name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, ev+":"+name)
	if ev == "start" {
		l.runs[name]++
	}
}

func (l *runLog) index(ev string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, e := range l.events {
		if e == ev {
			return i
		}
	}
	return -1
}

func (l *runLog) count(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.runs[name]
}

type stepArgs struct {
	Name string `json:"name"`
	N    int    `json:"n"`
	Fail bool   `json:"fail"`
}

func waitWorkflow(t *testing.T, c *skiplock.Client, id int64) skiplock.WorkflowStatus {
	t.Helper()
	var st skiplock.WorkflowStatus
	require.Eventually(t, func() bool {
		var err error
		st, err = c.WorkflowGet(context.Background(), id, true)
		require.NoError(t, err)
		return st.State != "running" && st.Open == 0
	}, 20*time.Second, 10*time.Millisecond)
	return st
}

func taskByName(st skiplock.WorkflowStatus, name string) skiplock.TaskStatus {
	for _, t := range st.TaskList {
		if t.Name == name {
			return t
		}
	}
	return skiplock.TaskStatus{}
}

func fastConfig() skiplock.Config {
	return skiplock.Config{PollInterval: 20 * time.Millisecond, Logger: quietLogger(),
		Backoff: func(int) time.Duration { return 10 * time.Millisecond }}
}

// A diamond: a, then b and c (each with a's output), then d with both.
// No task starts before all its parents completed, each runs once, and the
// outputs travel typed.
func TestWorkflowDiamond(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, fastConfig())
	log := newRunLog()
	require.NoError(t, skiplock.Handle(c, "step", func(ctx context.Context, j *skiplock.Job[stepArgs]) error {
		log.add("start", j.Args.Name)
		defer log.add("end", j.Args.Name)
		sum := j.Args.N
		info, err := skiplock.CurrentTask(ctx)
		if err != nil {
			return err
		}
		if info.Name != j.Args.Name {
			return fmt.Errorf("task %q runs job of %q", info.Name, j.Args.Name)
		}
		for _, p := range map[string][]string{"b": {"a"}, "c": {"a"}, "d": {"b", "c"}}[j.Args.Name] {
			v, err := skiplock.TaskOutput[int](ctx, p)
			if err != nil {
				return err
			}
			sum += v
		}
		return skiplock.SetOutput(ctx, sum)
	}))
	id, err := c.EnqueueWorkflow(ctx, skiplock.Workflow{Name: "diamond", Tasks: []skiplock.Task{
		{Name: "d", Kind: "step", Args: stepArgs{Name: "d", N: 1000}, DependsOn: []string{"b", "c"}},
		{Name: "b", Kind: "step", Args: stepArgs{Name: "b", N: 10}, DependsOn: []string{"a"}},
		{Name: "c", Kind: "step", Args: stepArgs{Name: "c", N: 100}, DependsOn: []string{"a"}},
		{Name: "a", Kind: "step", Args: stepArgs{Name: "a", N: 1}},
	}})
	require.NoError(t, err)
	require.Equal(t, 1, countJobs(t, db.Pool, "task_id IS NOT NULL"), "only the root is a job before anything ran")

	require.NoError(t, c.Start(ctx))
	st := waitWorkflow(t, c, id)
	require.NoError(t, c.Stop(ctx))

	require.Equal(t, "completed", st.State)
	require.Equal(t, 4, st.Completed)
	require.JSONEq(t, "1112", string(taskByName(st, "d").Output)) // 1000 + (10+1) + (100+1)
	require.ElementsMatch(t, []string{"b", "c"}, taskByName(st, "d").DependsOn)
	for _, n := range []string{"a", "b", "c", "d"} {
		require.Equal(t, 1, log.count(n), n)
	}
	require.Less(t, log.index("end:a"), log.index("start:b"))
	require.Less(t, log.index("end:a"), log.index("start:c"))
	require.Less(t, log.index("end:b"), log.index("start:d"))
	require.Less(t, log.index("end:c"), log.index("start:d"))
	// Nothing is left behind in the hot table.
	require.Zero(t, countJobs(t, db.Pool, "true"))
}

// Under the default policy a dead task's dependents never run, the other
// branch completes, and the workflow fails; WorkflowRetry runs the failed
// part again (not the completed tasks) and the workflow completes.
func TestWorkflowFailureCancelsDependentsAndRetry(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, fastConfig())
	log := newRunLog()
	var failing sync.Map
	failing.Store("b", true)
	require.NoError(t, skiplock.Handle(c, "step", func(ctx context.Context, j *skiplock.Job[stepArgs]) error {
		log.add("start", j.Args.Name)
		if _, ok := failing.Load(j.Args.Name); ok {
			return errors.New("b fails")
		}
		return nil
	}))
	id, err := c.EnqueueWorkflow(ctx, skiplock.Workflow{Name: "fails", Tasks: []skiplock.Task{
		{Name: "a", Kind: "step", Args: stepArgs{Name: "a"}},
		{Name: "b", Kind: "step", Args: stepArgs{Name: "b"}, DependsOn: []string{"a"}, MaxAttempts: 2},
		{Name: "c", Kind: "step", Args: stepArgs{Name: "c"}, DependsOn: []string{"a"}},
		{Name: "d", Kind: "step", Args: stepArgs{Name: "d"}, DependsOn: []string{"b"}},
		{Name: "e", Kind: "step", Args: stepArgs{Name: "e"}, DependsOn: []string{"d", "c"}},
	}})
	require.NoError(t, err)
	require.NoError(t, c.Start(ctx))
	defer func() { require.NoError(t, c.Stop(ctx)) }()
	st := waitWorkflow(t, c, id)
	require.Equal(t, "failed", st.State)
	require.Equal(t, "dead", taskByName(st, "b").State)
	require.Contains(t, taskByName(st, "b").Error, "b fails")
	require.Equal(t, "cancelled", taskByName(st, "d").State)
	require.Equal(t, "cancelled", taskByName(st, "e").State)
	require.Equal(t, "completed", taskByName(st, "c").State)
	require.Equal(t, 2, log.count("b"))
	require.Zero(t, log.count("d"))
	require.Zero(t, log.count("e"))

	_, err = c.WorkflowRetry(ctx, id+1000)
	require.ErrorIs(t, err, skiplock.ErrWorkflowNotFound)
	failing.Delete("b")
	n, err := c.WorkflowRetry(ctx, id)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	st = waitWorkflow(t, c, id)
	require.Equal(t, "completed", st.State)
	require.Equal(t, 5, st.Completed)
	require.Equal(t, 1, log.count("a"))
	require.Equal(t, 1, log.count("c"))
	require.Equal(t, 3, log.count("b"))
	require.Equal(t, 1, log.count("d"))
	require.Equal(t, 1, log.count("e"))
}

// Under RunDependents a dependent runs after a dead parent and sees that
// it did not complete.
func TestWorkflowRunDependents(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, fastConfig())
	var sawDead error
	require.NoError(t, skiplock.Handle(c, "step", func(ctx context.Context, j *skiplock.Job[stepArgs]) error {
		switch j.Args.Name {
		case "a":
			return skiplock.Discard(errors.New("no"))
		case "b":
			_, sawDead = skiplock.TaskOutput[int](ctx, "a")
		}
		return nil
	}))
	id, err := c.EnqueueWorkflow(ctx, skiplock.Workflow{Name: "cont", OnFailure: skiplock.RunDependents, Tasks: []skiplock.Task{
		{Name: "a", Kind: "step", Args: stepArgs{Name: "a"}},
		{Name: "b", Kind: "step", Args: stepArgs{Name: "b"}, DependsOn: []string{"a"}},
	}})
	require.NoError(t, err)
	require.NoError(t, c.Start(ctx))
	st := waitWorkflow(t, c, id)
	require.NoError(t, c.Stop(ctx))
	require.Equal(t, "failed", st.State)
	require.Equal(t, "completed", taskByName(st, "b").State)
	require.ErrorIs(t, sawDead, skiplock.ErrTaskNotFinished)
}

// A task fans out N children at run time and a fan-in task waits for all
// of them; running the fan-out task twice adds nothing twice.
func TestWorkflowFanOutAtRunTime(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, fastConfig())
	log := newRunLog()
	const n = 5
	var total int
	require.NoError(t, skiplock.Handle(c, "step", func(ctx context.Context, j *skiplock.Job[stepArgs]) error {
		log.add("start", j.Args.Name)
		switch j.Args.Name {
		case "split":
			var kids []skiplock.Task
			var names []string
			for i := range n {
				name := fmt.Sprintf("ship-%d", i)
				names = append(names, name)
				kids = append(kids, skiplock.Task{Name: name, Kind: "step", Args: stepArgs{Name: "ship", N: i}, DependsOn: []string{"split"}})
			}
			kids = append(kids, skiplock.Task{Name: "notify", Kind: "step", Args: stepArgs{Name: "notify"}, DependsOn: names})
			if err := skiplock.AddTasks(ctx, kids...); err != nil {
				return err
			}
			if j.Attempt == 1 {
				return errors.New("fail once after adding")
			}
		case "ship":
			return skiplock.SetOutput(ctx, j.Args.N*10)
		case "notify":
			for i := range n {
				v, err := skiplock.TaskOutput[int](ctx, fmt.Sprintf("ship-%d", i))
				if err != nil {
					return err
				}
				total += v
			}
		}
		return nil
	}))
	id, err := c.EnqueueWorkflow(ctx, skiplock.Workflow{Name: "fan", Tasks: []skiplock.Task{
		{Name: "split", Kind: "step", Args: stepArgs{Name: "split"}},
	}})
	require.NoError(t, err)
	require.NoError(t, c.Start(ctx))
	st := waitWorkflow(t, c, id)
	require.NoError(t, c.Stop(ctx))
	require.Equal(t, "completed", st.State)
	require.Equal(t, n+2, st.Tasks)
	require.Equal(t, n, log.count("ship"))
	require.Equal(t, 1, log.count("notify"))
	require.Equal(t, 100, total)
	require.Less(t, log.index("start:split"), log.index("start:ship"))
}

// A batch's callback is enqueued once, when every member finished
// (completed or dead), and sees the counts.
func TestBatchCallback(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, fastConfig())
	var mu sync.Mutex
	var calls []skiplock.BatchCounts
	require.NoError(t, skiplock.Handle(c, "member", func(ctx context.Context, j *skiplock.Job[stepArgs]) error {
		if j.Args.Fail {
			return skiplock.Discard(errors.New("bad member"))
		}
		return nil
	}))
	require.NoError(t, skiplock.Handle(c, "done", func(ctx context.Context, j *skiplock.Job[struct{}]) error {
		bc, err := skiplock.BatchResult(ctx)
		mu.Lock()
		calls = append(calls, bc)
		mu.Unlock()
		return err
	}))
	var members []skiplock.Task
	for i := range 50 {
		members = append(members, skiplock.Task{Name: fmt.Sprint(i), Kind: "member", Args: stepArgs{N: i, Fail: i%10 == 0}})
	}
	id, err := c.EnqueueBatch(ctx, skiplock.Batch{Name: "nightly", Members: members, Callback: skiplock.Task{Kind: "done"}})
	require.NoError(t, err)
	require.NoError(t, c.Start(ctx))
	st := waitWorkflow(t, c, id)
	require.NoError(t, c.Stop(ctx))
	require.Equal(t, "completed", st.State)
	require.True(t, st.Batch)
	require.Len(t, calls, 1)
	require.Equal(t, skiplock.BatchCounts{BatchID: id, Members: 50, Completed: 45, Dead: 5}, calls[0])
}

// Bad input names the task and the field, and writes nothing.
func TestWorkflowValidation(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{})
	cases := []struct {
		wf    skiplock.Workflow
		field string
	}{
		{skiplock.Workflow{Name: "x"}, "tasks"},
		{skiplock.Workflow{Name: "", Tasks: []skiplock.Task{{Name: "a", Kind: "k"}}}, "name"},
		{skiplock.Workflow{Name: "x", Tasks: []skiplock.Task{{Name: "a", Kind: "k"}, {Name: "b", Kind: "k", Queue: "bad queue"}}}, "tasks[1].queue"},
		{skiplock.Workflow{Name: "x", Tasks: []skiplock.Task{{Name: "a", Kind: "k"}, {Name: "a", Kind: "k"}}}, "tasks[1].name"},
		{skiplock.Workflow{Name: "x", Tasks: []skiplock.Task{{Name: "a", Kind: "k", DependsOn: []string{"zz"}}}}, "tasks[0].depends_on"},
		{skiplock.Workflow{Name: "x", Tasks: []skiplock.Task{{Name: "a", Kind: "k", DependsOn: []string{"b"}}, {Name: "b", Kind: "k", DependsOn: []string{"a"}}}}, "tasks[0].depends_on"},
		{skiplock.Workflow{Name: "x", OnFailure: "ignore", Tasks: []skiplock.Task{{Name: "a", Kind: "k"}}}, "on_failure"},
		{skiplock.Workflow{Name: "x", Tasks: []skiplock.Task{{Name: "a\x00", Kind: "k"}}}, "tasks[0].name"},
	}
	for _, tc := range cases {
		_, err := c.EnqueueWorkflow(ctx, tc.wf)
		var fe *skiplock.FieldError
		require.ErrorAs(t, err, &fe, "%+v", tc.wf)
		require.Equal(t, tc.field, fe.Field, err.Error())
		require.ErrorIs(t, err, skiplock.ErrInvalidJob)
	}
	for _, tc := range []struct {
		b     skiplock.Batch
		field string
	}{
		{skiplock.Batch{Name: "b", Members: []skiplock.Task{{Name: "callback", Kind: "k"}}, Callback: skiplock.Task{Kind: "cb"}}, "callback.name"},
		{skiplock.Batch{Name: "b", Members: []skiplock.Task{{Name: "m", Kind: "k"}}, Callback: skiplock.Task{Kind: ""}}, "callback.kind"},
		{skiplock.Batch{Name: "b", Callback: skiplock.Task{Kind: "cb"}}, "tasks"},
	} {
		_, err := c.EnqueueBatch(ctx, tc.b)
		var fe *skiplock.FieldError
		require.ErrorAs(t, err, &fe, "%+v", tc.b)
		require.Equal(t, tc.field, fe.Field, err.Error())
	}
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM skiplock.workflows) + (SELECT count(*) FROM skiplock.jobs)").Scan(&n))
	require.Zero(t, n)

	// The SQL function refuses what the Go API refuses, naming the field.
	_, err := db.Pool.Exec(ctx, `SELECT skiplock.create_workflow('x', 'cancel', '[{"name":"a","queue":"q","kind":""}]')`)
	require.ErrorContains(t, err, "kind: must not be empty")
	_, err = db.Pool.Exec(ctx, `SELECT skiplock.create_workflow('x', 'cancel', '[{"name":"a","queue":"q","kind":"k","depends_on":["b"]},{"name":"b","queue":"q","kind":"k"}]')`)
	require.ErrorContains(t, err, "depends_on: b names no earlier task")
}

// The workflow exists iff the caller's transaction commits.
func TestEnqueueWorkflowTx(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{})
	for _, commit := range []bool{false, true} {
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		_, err = c.EnqueueWorkflowTx(ctx, tx, skiplock.Workflow{Name: "tx", Tasks: []skiplock.Task{{Name: "a", Kind: "k"}}})
		require.NoError(t, err)
		if commit {
			require.NoError(t, tx.Commit(ctx))
		} else {
			require.NoError(t, tx.Rollback(ctx))
		}
	}
	sqlDB, err := sql.Open("pgx", db.URL)
	require.NoError(t, err)
	defer sqlDB.Close()
	for _, commit := range []bool{false, true} {
		tx, err := sqlDB.BeginTx(ctx, nil)
		require.NoError(t, err)
		_, err = c.EnqueueWorkflowTx(ctx, skiplock.SQLTx(tx), skiplock.Workflow{Name: "sql", Tasks: []skiplock.Task{
			{Name: "a", Kind: "k", Metadata: skiplock.Metadata{"trace": "t1"}}, {Name: "b", Kind: "k", DependsOn: []string{"a"}}}})
		require.NoError(t, err)
		if commit {
			require.NoError(t, tx.Commit())
		} else {
			require.NoError(t, tx.Rollback())
		}
	}
	ws, err := c.WorkflowList(ctx, skiplock.WorkflowFilter{})
	require.NoError(t, err)
	require.Len(t, ws, 2)
	require.Equal(t, "sql", ws[0].Name)
	require.Equal(t, 2, ws[0].Tasks)
	require.Equal(t, 2, countJobs(t, db.Pool, "true"))
	ws, err = c.WorkflowList(ctx, skiplock.WorkflowFilter{Name: "tx", State: "running"})
	require.NoError(t, err)
	require.Len(t, ws, 1)
}

// Cancelling a workflow: its pending tasks never run, a ready job is
// dead-lettered as cancelled, and the workflow ends cancelled.
func TestWorkflowCancel(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, fastConfig())
	id, err := c.EnqueueWorkflow(ctx, skiplock.Workflow{Name: "c", Tasks: []skiplock.Task{
		{Name: "a", Kind: "k"}, {Name: "b", Kind: "k", DependsOn: []string{"a"}},
	}})
	require.NoError(t, err)
	n, err := c.WorkflowCancel(ctx, id)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	st, err := c.WorkflowGet(ctx, id, false)
	require.NoError(t, err)
	require.Equal(t, "cancelled", st.State)
	require.Zero(t, st.Open)
	require.Equal(t, 2, st.Cancelled)
	require.Zero(t, countJobs(t, db.Pool, "true"))
	require.Equal(t, 1, countDead(t, db.Pool))
	_, err = c.WorkflowCancel(ctx, 999999)
	require.ErrorIs(t, err, skiplock.ErrWorkflowNotFound)
}

type counterArgs struct{}

// Checkpointed steps: a job that fails after three steps runs again and
// skips them, receiving their results, including the one whose checkpoint
// was still on its way when the handler failed; a StepTx's database effect
// exists once.
func TestStepsAreCheckpointed(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, "CREATE TABLE effects (job_id bigint NOT NULL, step text NOT NULL)")
	require.NoError(t, err)
	c := newClient(t, db.Pool, fastConfig())
	log := newRunLog()
	require.NoError(t, skiplock.Handle(c, "three", func(ctx context.Context, j *skiplock.Job[counterArgs]) error {
		a, err := skiplock.Step(ctx, "charge", func(ctx context.Context) (string, error) {
			log.add("start", "charge")
			return "ch_1", nil
		})
		if err != nil {
			return err
		}
		b, err := skiplock.StepTx(ctx, "record", func(ctx context.Context, tx skiplock.Tx) (int, error) {
			log.add("start", "record")
			_, err := tx.Exec(ctx, "INSERT INTO effects VALUES ($1, 'record')", j.ID)
			return 42, err
		})
		if err != nil {
			return err
		}
		// The last step before the failure is still on its way when the
		// handler returns: a failing run writes it (a completing one would
		// withdraw it), so the retries skip it too.
		l, err := skiplock.Step(ctx, "label", func(ctx context.Context) (string, error) {
			log.add("start", "label")
			return "lb_1", nil
		})
		if err != nil {
			return err
		}
		if a != "ch_1" || b != 42 || l != "lb_1" {
			return skiplock.Discard(fmt.Errorf("wrong replay: %q %d %q", a, b, l))
		}
		log.add("start", "ship")
		if j.Attempt < 3 {
			return errors.New("crash after two steps")
		}
		return nil
	}))
	_, err = c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "three"})
	require.NoError(t, err)
	require.NoError(t, c.Start(ctx))
	waitNoJobs(t, db.Pool)
	require.NoError(t, c.Stop(ctx))
	require.Equal(t, 1, log.count("charge"))
	require.Equal(t, 1, log.count("record"))
	require.Equal(t, 1, log.count("label"))
	require.Equal(t, 3, log.count("ship"))
	var effects, steps int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM effects), (SELECT count(*) FROM skiplock.job_steps)").Scan(&effects, &steps))
	require.Equal(t, 1, effects)
	require.Zero(t, steps, "a finished job's checkpoints are removed")
	require.Zero(t, countDead(t, db.Pool))
}

// Sleep sends the job back to the table and never wakes it early.
func TestSleepNeverEarly(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, fastConfig())
	log := newRunLog()
	var first, woke time.Time
	require.NoError(t, skiplock.Handle(c, "sleeper", func(ctx context.Context, j *skiplock.Job[counterArgs]) error {
		log.add("start", "sleeper")
		if first.IsZero() {
			first = time.Now()
		}
		if err := skiplock.Sleep(ctx, "nap", 400*time.Millisecond); err != nil {
			return err
		}
		woke = time.Now()
		return nil
	}))
	_, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "sleeper", MaxAttempts: 1})
	require.NoError(t, err)
	require.NoError(t, c.Start(ctx))
	waitNoJobs(t, db.Pool)
	require.NoError(t, c.Stop(ctx))
	require.Equal(t, 2, log.count("sleeper"), "one run to fall asleep, one to wake; no attempt spent")
	require.GreaterOrEqual(t, woke.Sub(first), 400*time.Millisecond)
	require.Zero(t, countDead(t, db.Pool))
}

// Signals: one sent before the wait is received at once; one sent while
// the job sleeps in its wait (from SQL) wakes it; a wait with none times out.
func TestWaitSignal(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, fastConfig())
	var mu sync.Mutex
	got := map[int64]string{}
	runs := map[int64]int{}
	waiting := make(chan int64, 10)
	require.NoError(t, skiplock.Handle(c, "waiter", func(ctx context.Context, j *skiplock.Job[stepArgs]) error {
		mu.Lock()
		runs[j.ID]++
		mu.Unlock()
		timeout := time.Minute
		if j.Args.Name == "timeout" {
			// Long enough that the wait begins before its deadline: the
			// deadline is recorded first, and a run that reaches the wait
			// after it times out at once, in one run (300 ms did under make
			// test's load, 2026-11-30: runs 1, not 2).
			timeout = 1500 * time.Millisecond
		}
		p, err := skiplock.WaitSignal(ctx, "paid", timeout)
		switch {
		case errors.Is(err, skiplock.ErrSignalTimeout):
			p = json.RawMessage(`"timeout"`)
		case err != nil:
			waiting <- j.ID
			return err
		}
		mu.Lock()
		got[j.ID] = string(p)
		mu.Unlock()
		return nil
	}))
	early, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "waiter", Payload: stepArgs{Name: "early"}})
	require.NoError(t, err)
	_, err = c.SignalSend(ctx, "paid", skiplock.SignalTarget{JobID: early.ID}, map[string]int{"amount": 1})
	require.NoError(t, err)
	late, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "waiter", Payload: stepArgs{Name: "late"}})
	require.NoError(t, err)
	none, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "waiter", Payload: stepArgs{Name: "timeout"}})
	require.NoError(t, err)
	require.NoError(t, c.Start(ctx))
	defer func() { require.NoError(t, c.Stop(ctx)) }()
	for id := range waiting {
		if id == late.ID {
			break
		}
	}
	_, err = db.Pool.Exec(ctx, "SELECT skiplock.signal(name => 'paid', job_id => $1, payload => '{\"amount\": 2}')", late.ID)
	require.NoError(t, err)
	waitNoJobs(t, db.Pool)
	mu.Lock()
	defer mu.Unlock()
	require.JSONEq(t, `{"amount": 1}`, got[early.ID])
	require.Equal(t, 1, runs[early.ID])
	require.JSONEq(t, `{"amount": 2}`, got[late.ID])
	require.Equal(t, 2, runs[late.ID])
	require.JSONEq(t, `"timeout"`, got[none.ID])
	require.Equal(t, 2, runs[none.ID])

	_, err = c.SignalSend(ctx, "paid", skiplock.SignalTarget{JobID: late.ID}, nil)
	require.ErrorContains(t, err, "job_id")
	_, err = c.SignalSend(ctx, "paid", skiplock.SignalTarget{}, nil)
	var fe *skiplock.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "target", fe.Field)
}

// Signals sent at every moment of a wait (before the job is claimed, while
// its handler looks for the signal, after it went to sleep) are each
// received exactly once, long before the wait's timeout: none is lost in
// the gap between a wait finding nothing and its job going to sleep.
func TestSignalRacesWait(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, fastConfig())
	var mu sync.Mutex
	got := map[int64]string{}
	require.NoError(t, skiplock.Handle(c, "waiter", func(ctx context.Context, j *skiplock.Job[stepArgs]) error {
		p, err := skiplock.WaitSignal(ctx, "go", time.Minute)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if _, dup := got[j.ID]; dup {
			return skiplock.Discard(errors.New("received twice"))
		}
		got[j.ID] = string(p)
		return nil
	}))
	const n = 40
	ids := make([]int64, n)
	for i := range ids {
		r, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "waiter", Payload: stepArgs{N: i}})
		require.NoError(t, err)
		ids[i] = r.ID
	}
	require.NoError(t, c.Start(ctx))
	defer func() { require.NoError(t, c.Stop(ctx)) }()
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i%20) * 15 * time.Millisecond)
			_, err := c.SignalSend(ctx, "go", skiplock.SignalTarget{JobID: id}, map[string]int{"n": i})
			require.NoError(t, err)
		}()
	}
	wg.Wait()
	require.Eventually(t, func() bool { return countJobs(t, db.Pool, "true") == 0 }, 20*time.Second, 10*time.Millisecond,
		"every wait receives its signal long before its one-minute timeout")
	mu.Lock()
	defer mu.Unlock()
	for i, id := range ids {
		require.JSONEq(t, fmt.Sprintf(`{"n": %d}`, i), got[id])
	}
	require.Zero(t, countDead(t, db.Pool))
}

// A signal addressed to a workflow is received by one waiting task: two
// tasks waiting for the same name need two signals, and each gets one.
func TestWorkflowSignalReceivedOnce(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, fastConfig())
	var mu sync.Mutex
	var got []string
	require.NoError(t, skiplock.Handle(c, "approve", func(ctx context.Context, j *skiplock.Job[stepArgs]) error {
		p, err := skiplock.WaitSignal(ctx, "approved", time.Minute)
		if err != nil {
			return err
		}
		mu.Lock()
		got = append(got, string(p))
		mu.Unlock()
		return nil
	}))
	id, err := c.EnqueueWorkflow(ctx, skiplock.Workflow{Name: "two-approvals", Tasks: []skiplock.Task{
		{Name: "a", Kind: "approve"}, {Name: "b", Kind: "approve"},
	}})
	require.NoError(t, err)
	_, err = c.SignalSend(ctx, "approved", skiplock.SignalTarget{WorkflowID: id}, map[string]string{"by": "ann"})
	require.NoError(t, err)
	require.NoError(t, c.Start(ctx))
	defer func() { require.NoError(t, c.Stop(ctx)) }()
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 1
	}, 10*time.Second, 10*time.Millisecond)
	time.Sleep(200 * time.Millisecond) // the other task sleeps in its wait
	st, err := c.WorkflowGet(ctx, id, false)
	require.NoError(t, err)
	require.Equal(t, "running", st.State)
	_, err = db.Pool.Exec(ctx, `SELECT skiplock.signal(name => 'approved', workflow_id => $1, payload => '{"by": "bob"}')`, id)
	require.NoError(t, err)
	st = waitWorkflow(t, c, id)
	require.Equal(t, "completed", st.State)
	require.ElementsMatch(t, []string{`{"by": "ann"}`, `{"by": "bob"}`}, got)
}

// Tasks added below a failed task under CancelDependents are cancelled at
// once, and so are the new tasks below them; the others wait as usual.
func TestAddTasksBelowFailedTask(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{})
	id, err := c.EnqueueWorkflow(ctx, skiplock.Workflow{Name: "w", Tasks: []skiplock.Task{{Name: "a", Kind: "k"}, {Name: "b", Kind: "k"}}})
	require.NoError(t, err)
	st, err := c.WorkflowGet(ctx, id, false)
	require.NoError(t, err)
	_, err = c.JobCancel(ctx, *taskByName(st, "a").JobID)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `SELECT skiplock.add_tasks($1, '[
		{"name": "x", "queue": "default", "kind": "k", "depends_on": ["a"]},
		{"name": "y", "queue": "default", "kind": "k", "depends_on": ["x", "b"]},
		{"name": "z", "queue": "default", "kind": "k", "depends_on": ["b"]}]')`, id)
	require.NoError(t, err)
	st, err = c.WorkflowGet(ctx, id, false)
	require.NoError(t, err)
	require.Equal(t, "cancelled", taskByName(st, "a").State)
	require.Equal(t, "cancelled", taskByName(st, "x").State)
	require.Equal(t, "cancelled", taskByName(st, "y").State)
	require.Equal(t, "pending", taskByName(st, "z").State)
	require.Equal(t, 5, st.Tasks)
	require.Equal(t, 2, st.Open) // b and z
	require.Equal(t, 3, st.Cancelled)
	require.Equal(t, "running", st.State)
}

// Drain runs a signal wait like the workers do: the job goes to sleep in
// its wait (settled as snoozed, no lease-lost warning) and, once signalled,
// the next Drain receives the signal and completes it.
func TestDrainWaitSignal(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{Logger: quietLogger()})
	var got string
	require.NoError(t, skiplock.Handle(c, "waiter", func(ctx context.Context, j *skiplock.Job[struct{}]) error {
		p, err := skiplock.WaitSignal(ctx, "go", time.Hour)
		if err != nil {
			return err
		}
		got = string(p)
		return nil
	}))
	r, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "waiter"})
	require.NoError(t, err)
	res, err := c.Drain(ctx, skiplock.DrainOptions{})
	require.NoError(t, err)
	require.Equal(t, 1, res.Snoozed)
	require.Zero(t, res.LeaseLost)
	_, err = c.SignalSend(ctx, "go", skiplock.SignalTarget{JobID: r.ID}, map[string]int{"n": 1})
	require.NoError(t, err)
	res, err = c.Drain(ctx, skiplock.DrainOptions{})
	require.NoError(t, err)
	require.Equal(t, 1, res.Completed)
	require.JSONEq(t, `{"n": 1}`, got)
}

// A signal wakes only a job asleep in a wait for its name: never a job
// waiting out a retry's backoff or a Sleep, even one that waited for the
// same name before.
func TestSignalWakesOnlyItsWait(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{Logger: quietLogger(), Backoff: func(int) time.Duration { return time.Hour }})
	require.NoError(t, skiplock.Handle(c, "k", func(ctx context.Context, j *skiplock.Job[stepArgs]) error {
		switch j.Args.Name {
		case "backoff":
			if _, err := skiplock.WaitSignal(ctx, "go", time.Hour); err != nil {
				return err
			}
			return errors.New("fails after its wait: an hour's backoff")
		case "sleep":
			return skiplock.Sleep(ctx, "nap", time.Hour)
		}
		return nil
	}))
	backoff, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "k", Payload: stepArgs{Name: "backoff"}})
	require.NoError(t, err)
	sleeper, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "k", Payload: stepArgs{Name: "sleep"}})
	require.NoError(t, err)
	_, err = c.SignalSend(ctx, "go", skiplock.SignalTarget{JobID: backoff.ID}, nil)
	require.NoError(t, err)
	res, err := c.Drain(ctx, skiplock.DrainOptions{})
	require.NoError(t, err)
	require.Equal(t, 1, res.Retried)
	require.Equal(t, 1, res.Snoozed)
	runAt := func(id int64) time.Time {
		var at time.Time
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT run_at FROM skiplock.jobs WHERE id = $1", id).Scan(&at))
		return at
	}
	before := map[int64]time.Time{backoff.ID: runAt(backoff.ID), sleeper.ID: runAt(sleeper.ID)}
	_, err = c.SignalSend(ctx, "go", skiplock.SignalTarget{JobID: backoff.ID}, nil)
	require.NoError(t, err)
	_, err = c.SignalSend(ctx, "nap", skiplock.SignalTarget{JobID: sleeper.ID}, nil)
	require.NoError(t, err)
	for id, at := range before {
		require.True(t, at.After(time.Now().Add(30*time.Minute)), "job %d is due in an hour", id)
		require.Equal(t, at, runAt(id), "job %d was not made due by a signal", id)
	}
}
