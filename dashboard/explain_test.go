package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

// A waiting job's page says why it is not running (JobExplain): here the
// running job that holds its entity. Read-only, the entity stays hidden in
// the explanation too.
func TestJobPageExplainsAWaitingJob(t *testing.T) {
	t.Parallel()
	for _, readOnly := range []bool{false, true} {
		t.Run(fmt.Sprint("read-only=", readOnly), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Options{ReadOnly: readOnly})
			ctx := context.Background()
			const entity = "customer-4711@example.com"
			holder, err := f.client.Enqueue(ctx, skiplock.EnqueueParams{Queue: "q", Kind: "sync", Entity: entity})
			require.NoError(t, err)
			_, err = f.db.Pool.Exec(ctx, `UPDATE skiplock.jobs SET state = 'running', locked_by = 'w',
				lease_token = nextval('skiplock.lease_tokens'), lease_expires_at = now() + interval '1 minute' WHERE id = $1`, holder.ID)
			require.NoError(t, err)
			waiting, err := f.client.Enqueue(ctx, skiplock.EnqueueParams{Queue: "q", Kind: "sync", Entity: entity})
			require.NoError(t, err)

			code, body := f.get(fmt.Sprintf("/jobs/%d", waiting.ID))
			require.Equal(t, http.StatusOK, code, body)
			assert.Contains(t, body, "Why it is not running")
			assert.Contains(t, body, "entity_busy")
			assert.Contains(t, body, fmt.Sprintf("held by the running job %d", holder.ID))
			assert.Contains(t, body, "no_worker", "nobody serves q")
			if readOnly {
				assert.NotContains(t, body, "customer-4711")
			} else {
				assert.Contains(t, body, "customer-4711")
			}

			code, body = f.get(fmt.Sprintf("/jobs/%d", holder.ID))
			require.Equal(t, http.StatusOK, code, body)
			assert.NotContains(t, body, "Why it is not running", "a running job")
		})
	}
}

// The schedules page shows each schedule's owner, and names a schedule
// that fires into a kind no live worker handles, with the fix.
func TestSchedulesPageNamesOrphanSchedules(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	ctx := context.Background()
	_, err := f.client.ScheduleSync(ctx, "billing",
		skiplock.Schedule{Name: "legacy-report", Every: 60e9, Queue: "billing", Kind: "report.legacy"},
		skiplock.Schedule{Name: "invoices", Every: 3600e9, Queue: "billing", Kind: "invoice.send"})
	require.NoError(t, err)
	_, err = f.db.Pool.Exec(ctx, `INSERT INTO skiplock.workers (id, hostname, pid, queues, handles)
		VALUES ('w', 'h', 1, '{billing}', '[{"queues": ["billing"], "kinds": ["invoice.send"]}]')`)
	require.NoError(t, err)

	code, body := f.get("/schedules")
	require.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, "billing")
	assert.Contains(t, body, "No live worker handles kind <code>report.legacy</code>")
	assert.Contains(t, body, "skiplock schedule remove legacy-report")
	assert.Equal(t, 1, strings.Count(body, `class="orphan-schedule"`), "invoices is handled")
}
