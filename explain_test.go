package skiplock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
)

// "Why is job 4711 still waiting?" answered through the public API, with a
// live worker holding each reason for real: the running job that holds an
// entity, a full concurrency limit, a signal wait, a future run time, a
// paused queue; a finished job is not waiting and an unknown id is not
// found. (Every reason against the claim itself: internal/store
// TestExplainAgreesWithTheClaim.)
func TestJobExplainNamesWhatHoldsAJob(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{Logger: quietLogger(), PollInterval: 20 * time.Millisecond,
		Pools: []skiplock.WorkerPool{{Queues: []string{skiplock.DefaultQueue, "limited"}, Concurrency: 4}}})
	release := make(chan struct{})
	started := make(chan int64, 10)
	require.NoError(t, skiplock.Handle(c, "block", func(ctx context.Context, j *skiplock.Job[map[string]any]) error {
		started <- j.ID
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}))
	require.NoError(t, skiplock.Handle(c, "wait", func(ctx context.Context, j *skiplock.Job[map[string]any]) error {
		_, err := skiplock.WaitSignal(ctx, "approved", time.Hour)
		return err
	}))
	require.NoError(t, c.LimitSet(ctx, skiplock.Limit{Name: "lim", Queue: "limited", Concurrency: 1}))
	require.NoError(t, c.Start(ctx))
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	enqueue := func(p skiplock.EnqueueParams) int64 {
		t.Helper()
		res, err := c.Enqueue(ctx, p)
		require.NoError(t, err)
		return res.ID
	}
	holds := func(id int64) map[skiplock.JobHoldReason]skiplock.JobHold {
		t.Helper()
		e, err := c.JobExplain(ctx, id)
		require.NoError(t, err)
		out := map[skiplock.JobHoldReason]skiplock.JobHold{}
		for _, h := range e.Holds {
			out[h.Reason] = h
		}
		return out
	}

	holder := enqueue(skiplock.EnqueueParams{Kind: "block", Entity: "order-7"})
	require.Equal(t, holder, <-started)
	waiting := enqueue(skiplock.EnqueueParams{Kind: "block", Entity: "order-7"})
	h := holds(waiting)[skiplock.JobHoldEntityBusy]
	require.Equal(t, []int64{holder}, h.Holders)
	require.Equal(t, "order-7", h.Name)

	first := enqueue(skiplock.EnqueueParams{Queue: "limited", Kind: "block"})
	require.Equal(t, first, <-started)
	second := enqueue(skiplock.EnqueueParams{Queue: "limited", Kind: "block"})
	h = holds(second)[skiplock.JobHoldConcurrencyLimit]
	require.Equal(t, "lim", h.Name)
	require.Equal(t, []int64{first}, h.Holders)
	require.EqualValues(t, 1, h.Used)
	require.EqualValues(t, 1, h.Cap)
	require.Contains(t, h.Detail, "runs 1 of 1")

	wait := enqueue(skiplock.EnqueueParams{Kind: "wait"})
	require.Eventually(t, func() bool {
		h, ok := holds(wait)[skiplock.JobHoldSignalWait]
		return ok && h.Name == "approved" && h.Until != nil && time.Until(*h.Until) > 50*time.Minute
	}, 15*time.Second, 20*time.Millisecond)

	later := enqueue(skiplock.EnqueueParams{Kind: "block", RunAt: time.Now().Add(time.Hour)})
	e, err := c.JobExplain(ctx, later)
	require.NoError(t, err)
	require.Equal(t, skiplock.JobStateScheduled, e.State)
	require.Len(t, e.Holds, 1)
	require.Equal(t, skiplock.JobHoldScheduled, e.Holds[0].Reason)
	require.False(t, e.Next)

	require.NoError(t, c.QueuePause(ctx, skiplock.DefaultQueue))
	paused := enqueue(skiplock.EnqueueParams{Kind: "block"})
	e, err = c.JobExplain(ctx, paused)
	require.NoError(t, err)
	require.Len(t, e.Holds, 1, "%+v", e.Holds)
	require.Equal(t, skiplock.JobHoldQueuePaused, e.Holds[0].Reason)
	require.Contains(t, e.Summary, "skiplock queue resume default")

	close(release)
	getEventually(t, c, holder, skiplock.JobStateCompleted)
	e, err = c.JobExplain(ctx, holder)
	require.NoError(t, err)
	require.Equal(t, skiplock.JobStateCompleted, e.State)
	require.Empty(t, e.Holds)
	require.False(t, e.Next)

	_, err = c.JobExplain(ctx, 1<<40)
	require.ErrorIs(t, err, skiplock.ErrJobNotFound)
	_, err = c.JobExplain(ctx, 0)
	requireField(t, err, "id")
}

// A workflow task that waits for its parents is explained by them
// (WorkflowTaskExplain); once enqueued, by its job's reasons.
func TestWorkflowTaskExplainNamesItsParents(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{Logger: quietLogger()})
	wf, err := c.EnqueueWorkflow(ctx, skiplock.Workflow{Name: "report", Tasks: []skiplock.Task{
		{Name: "extract", Kind: "extract"},
		{Name: "load", Kind: "load", DependsOn: []string{"extract"}},
	}})
	require.NoError(t, err)
	st, err := c.WorkflowGet(ctx, wf, false)
	require.NoError(t, err)
	tasks := map[string]int64{}
	for _, task := range st.TaskList {
		tasks[task.Name] = task.ID
	}

	e, err := c.WorkflowTaskExplain(ctx, tasks["load"])
	require.NoError(t, err)
	require.Equal(t, "pending", e.TaskState)
	require.Equal(t, wf, e.WorkflowID)
	require.Zero(t, e.ID, "no job yet")
	require.Len(t, e.Holds, 1)
	require.Equal(t, skiplock.JobHoldWorkflowDependencies, e.Holds[0].Reason)
	require.Equal(t, []int64{tasks["extract"]}, e.Holds[0].Holders)
	require.Equal(t, "extract", e.Holds[0].Name)

	e, err = c.WorkflowTaskExplain(ctx, tasks["extract"])
	require.NoError(t, err)
	require.Equal(t, "enqueued", e.TaskState)
	require.NotZero(t, e.ID)
	require.Equal(t, skiplock.JobStateReady, e.State)
	require.Len(t, e.Holds, 1)
	require.Equal(t, skiplock.JobHoldNoWorker, e.Holds[0].Reason, "nothing claims the default queue")

	_, err = c.WorkflowTaskExplain(ctx, 1<<40)
	require.ErrorIs(t, err, skiplock.ErrTaskNotFound)
}

// A job with a tenant is placed in its queue's fair share: the jobs of its
// tenant before it, the tenants, and the live pools' tenant cap.
func TestJobExplainPlacesATenantsJob(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{Logger: quietLogger(), PollInterval: 20 * time.Millisecond,
		Pools: []skiplock.WorkerPool{{Queues: []string{"capped"}, Concurrency: 1, TenantCap: 2}}})
	release := make(chan struct{})
	started := make(chan int64, 10)
	require.NoError(t, skiplock.Handle(c, "block", func(ctx context.Context, j *skiplock.Job[map[string]any]) error {
		started <- j.ID
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}))
	require.NoError(t, c.Start(ctx))
	t.Cleanup(func() {
		close(release)
		_ = c.Stop(context.Background())
	})
	var ids []int64
	for _, tenant := range []string{"acme", "acme", "acme", "globex"} {
		res, err := c.Enqueue(ctx, skiplock.EnqueueParams{Queue: "capped", Kind: "block", Tenant: tenant})
		require.NoError(t, err)
		ids = append(ids, res.ID)
	}
	<-started // a job runs and holds the pool's only slot
	var e *skiplock.JobExplanation
	require.Eventually(t, func() bool {
		var err error
		e, err = c.JobExplain(ctx, ids[2])
		return err == nil && e.TenantCap == 2
	}, 15*time.Second, 20*time.Millisecond, "the worker's beat records its pool's tenant cap")
	// What explain must report is the table's truth: a capped pool may
	// hold a claimed job beside the running one (its claim takes up to the
	// tenant cap), so count what is still ready rather than assume.
	ready := func(q string) int64 {
		var n int64
		require.NoError(t, db.Pool.QueryRow(ctx, q, ids[2]).Scan(&n))
		return n
	}
	counts := func() [2]int64 {
		return [2]int64{
			ready(`SELECT count(*) FROM skiplock.jobs WHERE queue = 'capped' AND tenant = 'acme' AND state = 'ready' AND id < $1`),
			ready(`SELECT count(DISTINCT tenant) FROM skiplock.jobs WHERE queue = 'capped' AND state = 'ready' AND $1::bigint IS NOT NULL`),
		}
	}
	// The pool goes on claiming ahead while its job runs, so the counts
	// are compared with an explanation taken between two equal counts.
	var want [2]int64
	require.Eventually(t, func() bool {
		before := counts()
		var err error
		e, err = c.JobExplain(ctx, ids[2])
		want = counts()
		return err == nil && before == want
	}, 15*time.Second, 20*time.Millisecond, "the ready jobs kept changing")
	wantAhead, wantTenants := want[0], want[1]
	require.Empty(t, e.Holds)
	require.Equal(t, "acme", e.Tenant)
	require.Equal(t, wantAhead, e.TenantAhead, "acme's jobs before it that do not run")
	require.Equal(t, wantTenants, e.Tenants)
	require.EqualValues(t, 1, e.TenantWeight)
	require.Contains(t, e.Summary, "the pools cap a tenant at 2 a claim")
}
