package faults

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/devdb"
)

// TestKill9MidWorkflow kills worker processes with SIGKILL while they run
// workflows (a root task that fans out leaves at run time, and a join that
// reads every leaf's output), each task made of a checkpointed step, a
// StepTx, and a final transaction that fans out, sets the output and
// completes the job (CompleteTx), with replacements started as a new
// process would be. See runWorkflowFaults for what is checked.
func TestKill9MidWorkflow(t *testing.T) {
	t.Parallel()
	runWorkflowFaults(t, newEnv(t), "kill -9", 150, func(e *env, ws map[string]*proc, n string, i int) bool {
		time.Sleep(time.Duration(50+100*(i%3)) * time.Millisecond) // land the kill at different steps
		ws[n].kill9(t)
		ws[n] = e.worker(n, "-archive", "-concurrency", "3")
		time.Sleep(200 * time.Millisecond)
		return i < 5
	})
}

// TestSIGSTOPMidWorkflow freezes workers (SIGSTOP) past their lease while
// they run workflow tasks, and lets them resume: the other workers' reapers
// hand the frozen tasks back and finish them; the resumed workers' writes
// are refused by the fence. The same checks as TestKill9MidWorkflow.
func TestSIGSTOPMidWorkflow(t *testing.T) {
	t.Parallel()
	runWorkflowFaults(t, newEnv(t), "SIGSTOP", 500, func(e *env, ws map[string]*proc, n string, i int) bool {
		time.Sleep(time.Duration(50+100*(i%3)) * time.Millisecond)
		ws[n].signal(syscall.SIGSTOP)
		time.Sleep(lease + 2*reaper + time.Second) // past the lease: the others reap its tasks
		ws[n].signal(syscall.SIGCONT)
		return i < 1
	})
}

// TestTerminateMidWorkflow kills every database connection of a worker
// (pg_terminate_backend, as an operator or a pooler would) while it runs
// workflow tasks, three times: its statements fail mid-task, its pool
// reconnects, and whatever it was writing either committed whole or not at
// all.
func TestTerminateMidWorkflow(t *testing.T) {
	t.Parallel()
	runWorkflowFaults(t, newEnv(t), "terminate", 200, func(e *env, ws map[string]*proc, n string, i int) bool {
		time.Sleep(time.Duration(50+100*(i%3)) * time.Millisecond)
		e.terminate(ws[n].app)
		time.Sleep(300 * time.Millisecond)
		// Three strikes, and more (up to eight) until one cut a task's run:
		// a strike between two statements costs the pool a reconnect only.
		return i < 2 || i < 7 && e.count(cutRuns) == 0
	})
}

// TestNetworkMidWorkflow puts each worker behind a TCP proxy of its own
// and, while it runs workflow tasks, resets all its connections or stalls
// them past the lease (the other workers' reapers hand its tasks back; when
// the stall ends, what it held is delivered late and refused by the fence).
// The same checks as TestKill9MidWorkflow.
func TestNetworkMidWorkflow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	u, err := url.Parse(e.url)
	require.NoError(t, err)
	if u.Port() == "" {
		t.Skip("the test database is not on TCP:", e.url)
	}
	proxies := map[string]*proxy{}
	for _, n := range []string{"a", "b", "c"} {
		proxies[n] = newProxy(t, u.Host)
	}
	var resets, stalls int
	runWorkflowFaults(t, e, "network", 300, func(e *env, ws map[string]*proc, n string, i int) bool {
		time.Sleep(time.Duration(50+100*(i%3)) * time.Millisecond)
		if i%2 == 0 {
			resets += proxies[n].DropAll()
		} else {
			stalls++
			proxies[n].Stall(lease + 2*reaper + time.Second)
			time.Sleep(lease + 2*reaper + time.Second)
		}
		time.Sleep(300 * time.Millisecond)
		return i < 3
	}, func(n string) []string { return []string{"-db", proxies[n].url(e.url)} })
	t.Logf("network mid-workflow: %d connections reset, %d stalls past the lease", resets, stalls)
	require.Positive(t, resets)
}

// TestPostgresCrashMidWorkflow crashes the database (immediate shutdown,
// crash recovery on start) twice while workers run workflows, on a private
// cluster; the second outage outlasts the leases. The trigger that moves a
// graph forward runs inside the transactions the crash aborts: a task ends,
// and releases its children, exactly when its job's removal commits.
func TestPostgresCrashMidWorkflow(t *testing.T) {
	t.Parallel()
	if _, err := devdb.BinDir(); errors.Is(err, devdb.ErrNoServer) {
		t.Skip("no PostgreSQL server binaries for a private cluster:", err)
	}
	e, c := privateEnv(t, 0)
	ctx := context.Background()
	runWorkflowFaults(t, e, "postgres crash", 400, func(e *env, ws map[string]*proc, n string, i int) bool {
		require.NoError(t, c.Crash(ctx))
		time.Sleep([]time.Duration{time.Second, lease + time.Second}[i%2])
		require.NoError(t, c.Restart(ctx))
		// Let the test's pool shed its broken connections.
		ok := 0
		waitFor(t, 30*time.Second, "the database to answer again", func() bool {
			if _, err := e.tryCount("SELECT 1"); err != nil {
				ok = 0
				return false
			}
			ok++
			return ok >= 10
		})
		return i < 1
	})
}

// cutRuns counts the task executions a fault cut short: no outcome
// recorded, or the handler's context ended.
const cutRuns = "SELECT count(*) FROM public.runs WHERE outcome IS NULL OR outcome LIKE 'ctx:%'"

// firstRuns is each workflow task job's first run (database clock), for
// the checks that measure from it: one pass over public.runs, hashed.
const firstRuns = `SELECT job_id, min(started_at) AS started_at FROM public.runs
	WHERE job_id IN (SELECT job_id FROM skiplock.workflow_tasks) GROUP BY job_id`

// wfEffectsTable is where the fault worker's workflow tasks record their
// effects (testdata/worker: wfStep).
const wfEffectsTable = `CREATE TABLE public.wf_effects (
	job_id bigint NOT NULL, task_id bigint NOT NULL, step text NOT NULL, replayed boolean NOT NULL DEFAULT false,
	value int, at timestamptz NOT NULL DEFAULT clock_timestamp())`

// runWorkflowFaults runs 6 workflows (a root that waits for the signal
// "go", then fans out five leaves at run time, each of which sleeps 300 ms
// on a timer, and a join that sums their outputs; every task pauses pause
// ms twice) and 2 batches of 3 members (napping too) with a callback, on
// three workers. Two signals are sent to each workflow, to half of them
// before the workers start and to the rest after the first strike, while
// their roots wait. It strikes a worker that has tasks in flight with fault
// until fault says stop, and checks, once every workflow finished, the
// checker's invariants for every task's job and the workflow ones:
//   - no task started before every parent completed (by the database's
//     clock: a task's first run starts after its parents' completions);
//   - the lease holder never ran a step whose checkpoint was recorded (step
//     "one" records whether its checkpoint existed when it ran);
//   - the StepTx effect and the final effect exist exactly once per task;
//   - no timer woke before its time, counted from the task's first run;
//   - each workflow's wait took exactly one of its two signals, the first,
//     and every run past the wait received that one;
//   - each batch's callback completed exactly once, with every member
//     counted;
//   - every workflow completed, and the join's output is the leaves' sum.
func runWorkflowFaults(t *testing.T, e *env, what string, pause int, fault func(e *env, ws map[string]*proc, n string, i int) bool, workerArgs ...func(name string) []string) {
	ctx := context.Background()
	_, err := e.pool.Exec(ctx, wfEffectsTable)
	require.NoError(t, err)

	const workflows, fanout, nap = 6, 5, 300
	const batches, members = 2, 3
	var wfIDs, batchIDs []int64
	for range workflows {
		id, err := e.client.EnqueueWorkflow(ctx, skiplock.Workflow{Name: "chaos", Tasks: []skiplock.Task{
			{Name: "split", Kind: "wfstep", Args: map[string]any{"sleep": pause, "fanout": fanout, "nap": nap, "wait": true}, MaxAttempts: 20},
		}})
		require.NoError(t, err)
		wfIDs = append(wfIDs, id)
	}
	for range batches {
		var ms []skiplock.Task
		for i := range members {
			ms = append(ms, skiplock.Task{Name: fmt.Sprintf("m-%d", i), Kind: "wfstep", MaxAttempts: 20,
				Args: map[string]any{"sleep": pause, "value": i + 1, "nap": nap}})
		}
		id, err := e.client.EnqueueBatch(ctx, skiplock.Batch{Name: "chaos-batch", Members: ms,
			Callback: skiplock.Task{Kind: "wfstep", MaxAttempts: 20, Args: map[string]any{"sleep": pause, "callback": true}}})
		require.NoError(t, err)
		batchIDs = append(batchIDs, id)
	}
	// Two signals per workflow: the wait takes the first; the second must
	// stay where it is. Half are sent before anything runs, the other half
	// once their root is parked in its wait (its job back in the table with
	// the wait's checkpoint), whatever the faults do meanwhile.
	send := func(id int64) error {
		for n := 1; n <= 2; n++ {
			if _, err := e.client.SignalSend(ctx, "go", skiplock.SignalTarget{WorkflowID: id}, map[string]int{"n": n}); err != nil {
				return err
			}
		}
		return nil
	}
	for i := 0; i < workflows; i += 2 {
		require.NoError(t, send(wfIDs[i]))
	}
	parked := make(chan int, 1)
	go func() {
		sent := 0
		deadline := time.Now().Add(60 * time.Second)
		for i := 1; i < workflows && time.Now().Before(deadline); {
			n, err := e.tryCount(`SELECT count(*) FROM skiplock.workflow_tasks AS t
				JOIN skiplock.jobs AS j ON j.id = t.job_id AND j.state = 'ready'
				JOIN skiplock.job_steps AS s ON s.job_id = j.id AND s.name = 'wait:go'
				WHERE t.workflow_id = $1 AND t.name = 'split'`, wfIDs[i])
			if err == nil && n == 1 && send(wfIDs[i]) == nil {
				sent++
				i += 2
				continue
			}
			time.Sleep(20 * time.Millisecond)
		}
		parked <- sent
	}()
	names := []string{"a", "b", "c"}
	ws := map[string]*proc{}
	for _, n := range names {
		args := []string{"-archive", "-concurrency", "3"}
		for _, f := range workerArgs {
			args = append(args, f(n)...)
		}
		ws[n] = e.worker(n, args...)
	}

	strikes := 0
	for i := 0; ; i++ {
		n := names[i%len(names)]
		p := ws[n]
		waitFor(t, 20*time.Second, p.app+" to be running tasks", func() bool {
			return e.inFlight(p.app) > 0 || e.count("SELECT count(*) FROM skiplock.jobs") == 0
		})
		if e.inFlight(p.app) == 0 {
			break
		}
		strikes++
		if !fault(e, ws, n, i) {
			break
		}
	}
	require.Equal(t, workflows/2, <-parked, "signals sent to roots parked in their wait")
	require.GreaterOrEqual(t, strikes, 2, "the faults must land on workers with tasks in flight")

	waitFor(t, 90*time.Second, "every workflow to finish", func() bool {
		n, err := e.tryCount("SELECT count(*) FROM skiplock.workflows WHERE state = 'running'")
		return err == nil && n == 0
	})
	e.waitDrained(30 * time.Second)
	for _, p := range ws {
		p.signal(syscall.SIGTERM)
	}
	for _, p := range ws {
		require.True(t, p.wait(15*time.Second), "%s did not drain", p.app)
	}

	// Every task's job, for the checker: each was committed (by the
	// transaction that released its task) and must have completed.
	jobs := taskJobs(t, e)
	require.Len(t, jobs, workflows*(fanout+2)+batches*(members+1))
	r := checkInvariants(t, e, checkOpts{committed: jobs, archive: true})
	require.Equal(t, len(jobs), r.Completed)

	for _, id := range wfIDs {
		st, err := e.client.WorkflowGet(ctx, id, true)
		require.NoError(t, err)
		require.Equal(t, "completed", st.State, "workflow %d", id)
		require.Equal(t, fanout+2, st.Completed, "workflow %d", id)
		for _, task := range st.TaskList {
			if task.Name == "join" {
				require.JSONEq(t, "15", string(task.Output), "workflow %d: the join sums the leaves 1..5", id)
			}
		}
	}
	for _, id := range batchIDs {
		st, err := e.client.WorkflowGet(ctx, id, false)
		require.NoError(t, err)
		require.Equal(t, "completed", st.State, "batch %d", id)
		require.Equal(t, members+1, st.Completed, "batch %d", id)
	}
	require.Empty(t, workflowViolations(t, e), "workflow invariants")
	require.Zero(t, e.count(`SELECT count(*) FROM skiplock.workflow_tasks AS t WHERE (t.name LIKE 'leaf-%' OR t.name LIKE 'm-%')
		AND NOT EXISTS (SELECT 1 FROM public.wf_effects AS f WHERE f.task_id = t.id AND f.step = 'woke')`), "a napping task completed without waking")
	slept := e.count("SELECT count(*) FROM public.runs WHERE outcome = 'sleep'")
	waited := e.count("SELECT count(*) FROM public.runs WHERE outcome = 'wait'")
	require.Positive(t, slept, "no timer put its job back to sleep")
	cut := e.count(cutRuns)
	require.Positive(t, cut, "no task execution was cut by a fault")
	t.Logf("%s mid-workflow: %d strikes cut %d task executions; %d workflows of %d tasks and %d batches of %d completed; reaped %d; %d step-one runs beyond one per task; %d runs put to sleep by a timer, %d by a signal wait",
		what, strikes, cut, workflows, fanout+2, batches, members+1, r.Reaped,
		e.count("SELECT count(*) - count(DISTINCT task_id) FROM public.wf_effects WHERE step = 'one'"), slept, waited)
}

// taskJobs returns the jobs of every workflow task that has one: each was
// inserted by a committed enqueue or by the completion that released it.
func taskJobs(t *testing.T, e *env) []int64 {
	t.Helper()
	rows, err := e.pool.Query(context.Background(), "SELECT job_id FROM skiplock.workflow_tasks WHERE job_id IS NOT NULL ORDER BY job_id")
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	return ids
}

// workflowViolations checks the workflow invariants on e's database, once
// every workflow finished, and returns the violated ones with their counts:
//   - task-before-parent: a task's first run started before one of its
//     parents completed (database clock);
//   - step-rerun: the lease holder ran step "one" although its checkpoint
//     existed (the fault worker records it);
//   - effect-not-once: a StepTx effect ("two") or a final effect ("done")
//     exists other than once for a task that has it;
//   - done-missing: a completed task without its final effect;
//   - not-completed: a workflow or a task that did not complete;
//   - checkpoint-left: a checkpoint outlived its job;
//   - timer-early: a run went past its timer sooner than the nap after the
//     task's first run started;
//   - signal-not-once: a waiting workflow whose signals were taken other
//     than exactly once;
//   - signal-payload: a run past the wait received another signal than the
//     one its workflow's wait took;
//   - signal-lost: a waiting task completed with no run past its wait;
//   - callback-not-once: a batch whose callback completed other than once;
//   - callback-counts: a callback that saw a member unfinished or failed.
//
// Each check reads every table it needs once and joins by hash: a chaos
// run of 30 minutes leaves ~300k runs and ~20k task dependencies, where a
// subquery per row over public.runs (which has no index on job_id, to keep
// the workers' inserts cheap) would take hours.
func workflowViolations(t *testing.T, e *env) map[string]int {
	t.Helper()
	checks := map[string]string{
		"task-before-parent": `WITH first_run AS (` + firstRuns + `)
			SELECT count(*) FROM skiplock.workflow_tasks AS c
			JOIN first_run AS r ON r.job_id = c.job_id
			JOIN skiplock.workflow_deps AS d ON d.task_id = c.id
			JOIN skiplock.workflow_tasks AS p ON p.id = d.parent_id
			WHERE r.started_at <= p.finished_at`,
		"step-rerun": `SELECT count(*) FROM public.wf_effects WHERE replayed`,
		"effect-not-once": `SELECT count(*) FROM (SELECT task_id, step FROM public.wf_effects WHERE step IN ('two', 'done')
			GROUP BY task_id, step HAVING count(*) <> 1) AS x`,
		"done-missing": `SELECT count(*) FROM skiplock.workflow_tasks AS t WHERE t.state = 'completed'
			AND NOT EXISTS (SELECT 1 FROM public.wf_effects AS f WHERE f.task_id = t.id AND f.step = 'done')`,
		"not-completed": `SELECT (SELECT count(*) FROM skiplock.workflows WHERE state <> 'completed')
			+ (SELECT count(*) FROM skiplock.workflow_tasks WHERE state <> 'completed')`,
		"checkpoint-left": `SELECT count(*) FROM skiplock.job_steps AS s
			WHERE NOT EXISTS (SELECT 1 FROM skiplock.jobs AS j WHERE j.id = s.job_id)`,
		"timer-early": `WITH first_run AS (` + firstRuns + `)
			SELECT count(*) FROM public.wf_effects AS f JOIN first_run AS r ON r.job_id = f.job_id
			WHERE f.step = 'woke' AND f.at < r.started_at + f.value * interval '1 millisecond'`,
		"signal-not-once": `SELECT count(*) FROM skiplock.workflows AS w
			JOIN (SELECT workflow_id, count(*) FILTER (WHERE consumed_at IS NOT NULL) AS taken
				FROM skiplock.signals GROUP BY workflow_id) AS s ON s.workflow_id = w.id
			WHERE s.taken <> 1`,
		"signal-payload": `WITH first_taken AS (SELECT DISTINCT ON (workflow_id) workflow_id, (payload->>'n')::int AS n
				FROM skiplock.signals WHERE consumed_at IS NOT NULL ORDER BY workflow_id, id)
			SELECT count(*) FROM public.wf_effects AS f
			JOIN skiplock.workflow_tasks AS t ON t.id = f.task_id
			LEFT JOIN first_taken AS s ON s.workflow_id = t.workflow_id
			WHERE f.step = 'got' AND f.value IS DISTINCT FROM s.n`,
		"signal-lost": `SELECT count(*) FROM skiplock.workflow_tasks AS t WHERE t.state = 'completed'
			AND EXISTS (SELECT 1 FROM skiplock.signals AS s WHERE s.workflow_id = t.workflow_id) AND t.name = 'split'
			AND NOT EXISTS (SELECT 1 FROM public.wf_effects AS f WHERE f.task_id = t.id AND f.step = 'got')`,
		"callback-not-once": `SELECT count(*) FROM skiplock.workflows AS w
			LEFT JOIN (SELECT t.workflow_id, count(*) AS n FROM public.wf_effects AS f
				JOIN skiplock.workflow_tasks AS t ON t.id = f.task_id
				WHERE f.step = 'callback' GROUP BY t.workflow_id) AS c ON c.workflow_id = w.id
			WHERE w.is_batch AND coalesce(c.n, 0) <> 1`,
		"callback-counts": `SELECT count(*) FROM public.wf_effects AS f JOIN skiplock.workflow_tasks AS t ON t.id = f.task_id
			JOIN skiplock.workflows AS w ON w.id = t.workflow_id
			WHERE f.step = 'callback' AND f.value <> (w.tasks_total - 1) * 1000`,
	}
	out := map[string]int{}
	for name, q := range checks {
		if n := e.count(q); n > 0 {
			out[name] = n
		}
	}
	return out
}

// TestWorkflowChecksCanFire seeds one violation of each workflow invariant
// into a database and requires workflowViolations to report every one: a
// check that cannot fire proves nothing.
func TestWorkflowChecksCanFire(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	_, err := e.pool.Exec(ctx, wfEffectsTable)
	require.NoError(t, err)
	require.Empty(t, workflowViolations(t, e), "an empty database violates nothing")

	id, err := e.client.EnqueueWorkflow(ctx, skiplock.Workflow{Name: "seeded", Tasks: []skiplock.Task{
		{Name: "a", Kind: "wfstep"}, {Name: "b", Kind: "wfstep", DependsOn: []string{"a"}}}})
	require.NoError(t, err)
	exec := func(q string, args ...any) {
		t.Helper()
		_, err := e.pool.Exec(ctx, q, args...)
		require.NoError(t, err)
	}
	// b "ran" before a completed; a is completed without its final effect;
	// b has two "two" effects and a rerun step; the workflow never ended;
	// a checkpoint outlived its job.
	exec(`UPDATE skiplock.workflow_tasks SET state = 'completed', finished_at = now() WHERE workflow_id = $1 AND name = 'a'`, id)
	exec(`UPDATE skiplock.workflow_tasks SET job_id = 424242 WHERE workflow_id = $1 AND name = 'b'`, id)
	// One start time for the run and the wake-up below: two now() calls a
	// loaded moment apart could put the wake-up past the nap.
	started := time.Now().Add(-time.Minute)
	exec(`INSERT INTO public.runs (job_id, attempt, worker, lease_token, pid, started_at)
		VALUES (424242, 1, 'w', 1, 1, $1)`, started)
	exec(`INSERT INTO public.wf_effects (job_id, task_id, step, replayed)
		SELECT 424242, t.id, x.step, x.replayed FROM skiplock.workflow_tasks AS t,
		(VALUES ('two', false), ('two', false), ('one', true)) AS x(step, replayed)
		WHERE t.workflow_id = $1 AND t.name = 'b'`, id)
	exec(`INSERT INTO skiplock.job_steps (job_id, name, output) VALUES (424243, 'one', '1')`)
	// b woke 100 ms into a 300 ms nap; its workflow's two signals were both
	// taken, and b received the second.
	exec(`INSERT INTO public.wf_effects (job_id, task_id, step, value, at)
		SELECT 424242, t.id, 'woke', 300, $2::timestamptz + interval '100 milliseconds'
		FROM skiplock.workflow_tasks AS t WHERE t.workflow_id = $1 AND t.name = 'b'`, id, started)
	exec(`INSERT INTO skiplock.signals (name, workflow_id, payload, consumed_by, consumed_at)
		VALUES ('go', $1, '{"n": 1}', 1, now()), ('go', $1, '{"n": 2}', 2, now())`, id)
	exec(`INSERT INTO public.wf_effects (job_id, task_id, step, value)
		SELECT 424242, t.id, 'got', 2 FROM skiplock.workflow_tasks AS t WHERE t.workflow_id = $1 AND t.name = 'b'`, id)
	// A waiting root completed though no run got past its wait.
	waiting, err := e.client.EnqueueWorkflow(ctx, skiplock.Workflow{Name: "seeded", Tasks: []skiplock.Task{{Name: "split", Kind: "wfstep"}}})
	require.NoError(t, err)
	exec(`UPDATE skiplock.workflow_tasks SET state = 'completed', finished_at = now() WHERE workflow_id = $1`, waiting)
	exec(`INSERT INTO skiplock.signals (name, workflow_id) VALUES ('go', $1)`, waiting)
	// A batch of two whose callback completed twice, having seen one member.
	batch, err := e.client.EnqueueBatch(ctx, skiplock.Batch{Name: "seeded",
		Members:  []skiplock.Task{{Name: "m-0", Kind: "wfstep"}, {Name: "m-1", Kind: "wfstep"}},
		Callback: skiplock.Task{Kind: "wfstep"}})
	require.NoError(t, err)
	exec(`INSERT INTO public.wf_effects (job_id, task_id, step, value)
		SELECT 424244, t.id, 'callback', 1000 FROM skiplock.workflow_tasks AS t, generate_series(1, 2)
		WHERE t.workflow_id = $1 AND t.name = 'callback'`, batch)

	got := workflowViolations(t, e)
	for _, name := range []string{"task-before-parent", "step-rerun", "effect-not-once", "done-missing", "not-completed", "checkpoint-left",
		"timer-early", "signal-not-once", "signal-payload", "signal-lost", "callback-not-once", "callback-counts"} {
		require.Contains(t, got, name, "the %s check did not fire: %v", name, got)
	}
}
