package health_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/health"
)

// A schedule whose kind no live worker handles (its code was removed) is
// named, with its owner, its waiting fires and the fix; one a live worker
// handles is not, and nothing is named while no worker is live at all.
func TestOrphanSchedulesAreNamedWithTheFix(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	exec := func(sql string) {
		t.Helper()
		_, err := db.Pool.Exec(ctx, sql)
		require.NoError(t, err)
	}
	exec(`INSERT INTO skiplock.schedules (name, every, queue, kind, owner, next_fire_at) VALUES
		('invoices', '1 hour', 'billing', 'invoice.send', 'billing', now() + interval '1 hour'),
		('old-report', '1 minute', 'billing', 'report.legacy', 'billing', now() + interval '1 minute'),
		('cleanup', '1 day', 'maint', 'cleanup', NULL, now() + interval '1 day')`)
	exec(`INSERT INTO skiplock.jobs (queue, kind, unique_key, run_at) VALUES
		('billing', 'report.legacy', 'schedule:old-report:2026-11-28T10:00:00Z', now() - interval '2 hours'),
		('billing', 'report.legacy', 'schedule:old-report:2026-11-28T10:01:00Z', now() - interval '1 hour'),
		('billing', 'report.legacy', 'schedule:old-reports:2026-11-28T10:00:00Z', now())`)

	none, err := health.OrphanSchedules(ctx, db.Pool, "skiplock")
	require.NoError(t, err)
	require.Empty(t, none, "no live worker: the workers check speaks")

	exec(`INSERT INTO skiplock.workers (id, hostname, pid, queues, handles) VALUES
		('w1', 'h', 1, '{billing}', '[{"queues": ["billing"], "kinds": ["invoice.send"]}]'),
		('w2', 'h', 2, '{maint}', '[{"queues": ["maint"], "kinds": null}]')`)
	got, err := health.OrphanSchedules(ctx, db.Pool, "skiplock")
	require.NoError(t, err)
	require.Len(t, got, 1)
	o := got[0]
	require.Equal(t, "old-report", o.Name)
	require.Equal(t, "report.legacy", o.Kind)
	require.Equal(t, "billing", o.Owner)
	require.EqualValues(t, 2, o.Waiting, "its own fires only, not another schedule's with a longer name")
	require.NotNil(t, o.Oldest)
	require.Contains(t, o.Fix(), "skiplock schedule remove old-report")

	checks, err := health.Doctor(ctx, db.Pool, "skiplock")
	require.NoError(t, err)
	var c *health.Check
	for i := range checks {
		if checks[i].Name == "orphan_schedules" {
			c = &checks[i]
		}
	}
	require.NotNil(t, c)
	require.Equal(t, health.StatusWarn, c.Status)
	require.Contains(t, c.Figure, `old-report (kind "report.legacy", queue billing, owner billing, 2 fire(s) waiting)`)
	require.Contains(t, c.Fix, "ScheduleSync")
}
