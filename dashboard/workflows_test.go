package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

// The workflow pages: the list with progress, one workflow's graph by
// level with states and jobs, and its pending signals and timers; never an
// output or a payload, and no error text on a read-only dashboard.
func TestWorkflowPages(t *testing.T) {
	t.Parallel()
	for _, readOnly := range []bool{false, true} {
		t.Run(fmt.Sprint("read-only=", readOnly), func(t *testing.T) {
			f := newFixture(t, Options{ReadOnly: readOnly})
			ctx := context.Background()
			id, err := f.client.EnqueueWorkflow(ctx, skiplock.Workflow{Name: "order", Tasks: []skiplock.Task{
				{Name: "charge", Kind: "charge", Args: map[string]string{"card": marker}},
				{Name: "ship", Kind: "ship", DependsOn: []string{"charge"}},
				{Name: "notify", Kind: "notify", DependsOn: []string{"ship"}},
			}})
			require.NoError(t, err)
			_, err = f.client.SignalSend(ctx, "paid", skiplock.SignalTarget{WorkflowID: id}, map[string]string{"by": marker})
			require.NoError(t, err)
			_, err = f.db.Pool.Exec(ctx, `UPDATE skiplock.workflow_tasks SET output = jsonb_build_object('x', $1::text),
				error = 'boom '||$1 WHERE workflow_id = $2 AND name = 'charge'`, marker, id)
			require.NoError(t, err)

			code, body := f.get("/workflows")
			require.Equal(t, http.StatusOK, code, body)
			require.Contains(t, body, fmt.Sprintf(`href="/workflows/%d"`, id))
			require.Contains(t, body, "order")
			require.NotContains(t, body, marker)

			code, body = f.get(fmt.Sprintf("/workflows/%d", id))
			require.Equal(t, http.StatusOK, code, body)
			for _, want := range []string{"charge", "ship", "notify", "Level 2", "enqueued", "pending", "paid"} {
				require.Contains(t, body, want)
			}
			if readOnly {
				require.NotContains(t, body, marker, "no output, payload or error text for viewers")
			} else {
				require.Contains(t, body, "boom "+marker, "error text for operators")
				require.NotContains(t, body, `"x"`, "outputs are never shown")
			}
			code, _ = f.get("/workflows/99999")
			require.Equal(t, http.StatusNotFound, code)
			code, _ = f.get("/workflows/x")
			require.Equal(t, http.StatusBadRequest, code)
			code, _ = f.get("/workflows?state=bogus")
			require.Equal(t, http.StatusBadRequest, code)
		})
	}
}

// A task's output is revealed like a payload: by POST, to an authenticated
// user of a dashboard that allows reveals, logged without the output, and
// escaped; refused otherwise.
func TestRevealTaskOutput(t *testing.T) {
	t.Parallel()
	log, logs := logBuffer()
	f := newFixture(t, Options{ShowPayloads: true, User: "alice", Password: "pw", Logger: log})
	ctx := context.Background()
	id, err := f.client.EnqueueWorkflow(ctx, skiplock.Workflow{Name: "order", Tasks: []skiplock.Task{{Name: "charge", Kind: "charge"}}})
	require.NoError(t, err)
	var task int64
	require.NoError(t, f.db.Pool.QueryRow(ctx, `UPDATE skiplock.workflow_tasks SET output = jsonb_build_object('m', $1::text, 'h', $2::text)
		WHERE workflow_id = $3 RETURNING id`, marker, hostile, id).Scan(&task))
	auth := basicAuth("alice", "pw")
	sameOrigin := http.Header{"Sec-Fetch-Site": {"same-origin"}, "Authorization": auth["Authorization"]}
	path := fmt.Sprintf("/workflows/%d/tasks/%d/output", id, task)

	rec := f.serve(http.MethodGet, fmt.Sprintf("/workflows/%d", id), "127.0.0.1", nil, auth)
	require.Equal(t, http.StatusOK, rec.Code)
	require.Contains(t, rec.Body.String(), `hx-post="`+path+`"`)
	require.NotContains(t, rec.Body.String(), marker)

	rec = f.serve(http.MethodPost, path, "127.0.0.1", url.Values{}, sameOrigin)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Contains(t, rec.Body.String(), marker)
	require.NotContains(t, rec.Body.String(), "<script>alert")
	require.Regexp(t, fmt.Sprintf(`msg="dashboard: task output revealed" workflow_id=%d task_id=%d user=alice`, id, task), logs.String())
	require.NotContains(t, logs.String(), marker)

	rec = f.serve(http.MethodPost, path, "127.0.0.1", url.Values{}, nil)
	require.NotEqual(t, http.StatusOK, rec.Code, "anonymous")
	require.NotContains(t, rec.Body.String(), marker)
	rec = f.serve(http.MethodPost, fmt.Sprintf("/workflows/%d/tasks/999999/output", id), "127.0.0.1", url.Values{}, sameOrigin)
	require.Equal(t, http.StatusNotFound, rec.Code)

	plain := newFixture(t, Options{})
	code, body, _ := plain.do(http.MethodPost, path, url.Values{}, http.Header{"Sec-Fetch-Site": {"same-origin"}})
	require.Equal(t, http.StatusForbidden, code)
	require.NotContains(t, body, marker)
}
