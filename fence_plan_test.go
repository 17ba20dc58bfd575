package skiplock_test

import (
	"context"
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/store"
)

// Every fenced write (heartbeat, completions, reschedule, dead-lettering)
// reaches its rows through the primary key and nothing else, custom and
// generic plans, whatever the statistics say about running rows: once with
// statistics taken while no job was running (the planner then believed the
// partial index jobs_running nearly empty and read all of it, issue 15) and
// once with statistics that know the running rows.
func TestFencedWritePlansUsePrimaryKey(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `
		INSERT INTO skiplock.jobs (queue, kind, entity)
		SELECT 'q' || (g % 4), 'k', CASE WHEN g % 5 = 0 THEN 'e' || g END
		FROM generate_series(1, 50000) AS g;
		ANALYZE skiplock.jobs;
		UPDATE skiplock.jobs SET state = 'running', locked_by = 'w', lease_token = id,
		       lease_expires_at = now() + interval '1 minute', attempts = 1
		WHERE id % 2 = 0;`)
	require.NoError(t, err)

	st := store.New("skiplock")
	primaryKey := regexp.MustCompile(`Index Scan using jobs_pkey on jobs j\b`)
	other := regexp.MustCompile(`Seq Scan on jobs\b|Bitmap Heap Scan on jobs\b|using jobs_(running|ready|ready_tenant|ready_no_tenant|unique_inflight)\b`)
	conn, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	for _, stats := range []string{"taken with no running job", "taken with running jobs"} {
		if stats == "taken with running jobs" {
			_, err := conn.Exec(ctx, "ANALYZE skiplock.jobs")
			require.NoError(t, err)
		}
		writes := st.FencedWrites("w")
		require.Len(t, writes, 13)
		for _, w := range writes {
			for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
				_, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode)
				require.NoError(t, err)
				plan := explainLines(t, conn, "EXPLAIN "+w.SQL, w.Args...)
				require.Regexp(t, primaryKey, plan, "%s, statistics %s, %s:\n%s", w.Name, stats, mode, plan)
				require.NotRegexp(t, other, plan, "%s, statistics %s, %s:\n%s", w.Name, stats, mode, plan)
				if os.Getenv("SKIPLOCK_SHOW_PLANS") != "" {
					t.Logf("%s, statistics %s, %s:\n%s", w.Name, stats, mode, plan)
				}
			}
		}
	}
	_, err = conn.Exec(ctx, "RESET plan_cache_mode")
	require.NoError(t, err)
}
