package main

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
)

// `skiplock job explain ID`: the reasons in text and JSON, "would be
// claimed next" for a job nothing holds, the usage and not-found exits.
func TestJobExplainCLI(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c, err := skiplock.NewClient(db.Pool, skiplock.Config{})
	require.NoError(t, err)
	// A live worker of the default queue that has not claimed yet.
	_, err = db.Pool.Exec(ctx, `INSERT INTO skiplock.workers (id, hostname, pid, queues, handles)
		VALUES ('w', 'h', 1, '{default}', '[{"queues": ["default"], "kinds": null}]')`)
	require.NoError(t, err)
	next, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "report"})
	require.NoError(t, err)
	later, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "report", RunAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	url := []string{"--database-url", db.URL}
	cli := func(args ...string) (int, string, string) { return runCLI(t, append(args, url...)...) }

	code, out, stderr := cli("job", "explain", strconv.FormatInt(next.ID, 10))
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "would be claimed next")
	require.Contains(t, out, "0 due job(s) before it")

	code, out, stderr = cli("job", "explain", strconv.FormatInt(later.ID, 10))
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "held by 1 reason(s)")
	require.Contains(t, out, "scheduled")

	code, out, stderr = cli("job", "explain", strconv.FormatInt(later.ID, 10), "--json")
	require.Equal(t, 0, code, stderr)
	var e skiplock.JobExplanation
	decodeJSON(t, out, &e)
	require.Equal(t, skiplock.JobStateScheduled, e.State)
	require.Len(t, e.Holds, 1)
	require.Equal(t, skiplock.JobHoldScheduled, e.Holds[0].Reason)
	require.NotNil(t, e.Holds[0].Until)

	wf, err := c.EnqueueWorkflow(ctx, skiplock.Workflow{Name: "report", Tasks: []skiplock.Task{
		{Name: "extract", Kind: "extract"}, {Name: "load", Kind: "load", DependsOn: []string{"extract"}}}})
	require.NoError(t, err)
	st, err := c.WorkflowGet(ctx, wf, false)
	require.NoError(t, err)
	explained := false
	for _, task := range st.TaskList {
		if task.Name == "load" {
			explained = true
			code, out, stderr = cli("job", "explain", "--task", strconv.FormatInt(task.ID, 10))
			require.Equal(t, 0, code, stderr)
			require.Contains(t, out, "workflow_dependencies")
			require.Contains(t, out, "waiting for 1: extract")
		}
	}
	require.True(t, explained)

	code, _, stderr = cli("job", "explain", "999999")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "not found")
	code, _, stderr = cli("job", "explain", "x")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "ID")
}
