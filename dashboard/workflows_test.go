package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

// The workflow pages: the list with progress, one workflow's graph by
// level with states and jobs, and its pending signals and timers; never an
// output or a payload, and no error text on a read-only dashboard.
func TestWorkflowPages(t *testing.T) {
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
			_, err = f.client.Signal(ctx, "paid", skiplock.SignalTarget{WorkflowID: id}, map[string]string{"by": marker})
			require.NoError(t, err)
			_, err = f.db.Pool.Exec(ctx, `UPDATE `+f.d.store.Table("workflow_tasks")+` SET output = jsonb_build_object('x', $1::text),
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
