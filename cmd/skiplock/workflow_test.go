package main

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
)

// The workflow and signal commands: get, list, cancel, retry and signal
// send act by id; outputs only with --outputs; bad input is a usage error
// naming the flag or argument, an unknown id a runtime error.
func TestWorkflowCLI(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c, err := skiplock.NewClient(db.Pool, skiplock.Config{})
	require.NoError(t, err)
	id, err := c.EnqueueWorkflow(ctx, skiplock.Workflow{Name: "order", Tasks: []skiplock.Task{
		{Name: "charge", Kind: "charge"}, {Name: "ship", Kind: "ship", DependsOn: []string{"charge"}},
	}})
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `UPDATE skiplock.workflow_tasks SET output = '{"secret": "`+opsSecret+`"}' WHERE name = 'charge'`)
	require.NoError(t, err)
	wid := strconv.FormatInt(id, 10)
	url := []string{"--database-url", db.URL}
	cli := func(args ...string) (int, string, string) { return runCLI(t, append(args, url...)...) }

	code, out, stderr := cli("workflow", "get", wid)
	require.Equal(t, 0, code, stderr)
	for _, want := range []string{"order", "running", "charge", "enqueued", "ship", "pending"} {
		require.Contains(t, out, want)
	}
	require.NotContains(t, out, opsSecret, "no outputs unless asked")
	code, out, stderr = cli("workflow", "get", wid, "--outputs", "--json")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, opsSecret)
	var st skiplock.WorkflowStatus
	decodeJSON(t, out, &st)
	require.Equal(t, 2, st.Open)
	require.Equal(t, []string{"charge"}, st.TaskList[1].DependsOn)

	code, out, stderr = cli("workflow", "list", "--state", "running", "--json")
	require.Equal(t, 0, code, stderr)
	var ws []skiplock.WorkflowStatus
	decodeJSON(t, out, &ws)
	require.Len(t, ws, 1)

	code, out, stderr = cli("signal", "send", "paid", "--workflow", wid, "--payload", `{"amount": 5}`, "--json")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, `"name":"paid"`)
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM skiplock.signals WHERE workflow_id = $1", id).Scan(&n))
	require.Equal(t, 1, n)

	code, _, stderr = cli("workflow", "retry", wid)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "still running")
	code, out, stderr = cli("workflow", "cancel", wid)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "2 tasks cancelled")
	code, out, stderr = cli("workflow", "retry", wid)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "2 tasks retried")

	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"workflow", "get"}, 2, "ID"},
		{[]string{"workflow", "get", "x"}, 2, "ID"},
		{[]string{"workflow", "get", "99999"}, 1, "not found"},
		{[]string{"workflow", "list", "--state", "done"}, 2, "--state"},
		{[]string{"workflow", "list", "--limit", "0"}, 2, "--limit"},
		{[]string{"workflow", "cancel", "99999"}, 1, "not found"},
		{[]string{"signal", "send", "paid"}, 2, "--workflow, --job"},
		{[]string{"signal", "send", "paid", "--workflow", wid, "--job", "1"}, 2, "--workflow, --job"},
		{[]string{"signal", "send", "paid", "--workflow", wid, "--payload", "[1]"}, 2, "--payload"},
		{[]string{"signal", "send", "paid", "--workflow", wid, "--payload", "{"}, 2, "--payload"},
		{[]string{"signal", "send", "--workflow", wid}, 2, "NAME"},
		{[]string{"signal", "send", "paid", "--job", "99999"}, 1, "--job"},
		{[]string{"bench", "--workflow", "chain:3"}, 2, "--workflow"},
		{[]string{"bench", "--workflow", "fanout:3", "--handler", "noop"}, 2, "--handler"},
		{[]string{"bench", "--latency", "--workflow", "fanout:3"}, 2, "--workflow"},
	} {
		code, _, stderr := cli(tc.args...)
		require.Equal(t, tc.code, code, "%v: %s", tc.args, stderr)
		require.Contains(t, stderr, tc.msg, tc.args)
	}
}
