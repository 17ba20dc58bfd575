package skiplock_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
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
		INSERT INTO skiplock.jobs (queue, kind, entity, gen)
		SELECT 'q' || (g % 4), 'k', CASE WHEN g % 5 = 0 THEN 'e' || g END,
		       CASE WHEN g % 5 = 0 THEN -1 ELSE g % 4 - 1 END -- every partition (migration 016) holds jobs
		FROM generate_series(1, 50000) AS g;
		ANALYZE skiplock.jobs;
		UPDATE skiplock.jobs SET state = 'running', locked_by = 'w', lease_token = id,
		       lease_expires_at = now() + interval '1 minute', attempts = 1
		WHERE id % 2 = 0;`)
	require.NoError(t, err)

	st := store.New("skiplock")
	primaryKey := regexp.MustCompile(`Index Scan using jobs_pkey on jobs j\b`)
	other := regexp.MustCompile(`Seq Scan on jobs\b|Bitmap Heap Scan on jobs\b|using jobs_(running|ready|ready_tenant|unique_inflight)\b`)
	conn, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	for _, stats := range []string{"taken with no running job", "taken with running jobs"} {
		if stats == "taken with running jobs" {
			_, err := conn.Exec(ctx, "ANALYZE skiplock.jobs")
			require.NoError(t, err)
		}
		writes := st.FencedWrites("w")
		require.Len(t, writes, 15)
		for _, w := range writes {
			for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
				_, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode)
				require.NoError(t, err)
				plan := dbtest.Explain(t, conn, "EXPLAIN "+w.SQL, w.Args...)
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

// The hot path's statements (every claim variant, the batched fenced
// writes) reach their rows by key whatever plan the connection cached. A
// statement's plan is cached per connection (a generic plan after a few
// runs) and made again only when the table's statistics change. Made while
// the table was nearly empty (a fresh queue, or the minutes after an ANALYZE
// of an empty table), the plan found the claimed or completed rows by
// scanning the whole table or primary key and filtering: free then, and once
// the table had grown, or filled with dead versions under a pinned horizon,
// 150-180 ms a statement until the next ANALYZE. Seen twice on 2026-11-26
// with auto_explain: the pressure suite's 2,000 jobs/s collapsing to 200/s
// for 30 s into a pin (the claim), and a no-op drain at 3,141 jobs/s
// instead of 31,000 (the completion). Here every plan is made on a 20-row
// table, then explained after it grew to 100,000 ready jobs without an
// ANALYZE, each in a transaction after its pipeline's settings statement.
func TestHotPathPlansReachRowsByKey(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `
		DO $$
		DECLARE p regclass;
		BEGIN
			-- Every partition: jobs_keyed and the ring's (ring_size() of them).
			FOR p IN SELECT i.inhrelid::regclass FROM pg_inherits AS i WHERE i.inhparent = 'skiplock.jobs'::regclass LOOP
				EXECUTE format('ALTER TABLE %s SET (autovacuum_enabled = false)', p);
			END LOOP;
		END $$;
		INSERT INTO skiplock.jobs (queue, kind, tenant) SELECT 'q', 'k', 't' || (g % 5) FROM generate_series(1, 20) AS g;
		ANALYZE skiplock.jobs;`)
	require.NoError(t, err)

	st := store.New("skiplock")
	// The arguments as literals: EXPLAIN EXECUTE takes no bound parameters.
	const base = `'{q}'::text[], NULL, 50, 'w', 30000000`
	const leases = `'{1,2}'::bigint[], '{1,2}'::bigint[]`
	statements := []struct{ settings, name, args string }{
		{"claim_settings", "claim", base + `, NULL, NULL, NULL`},
		{"claim_settings", "claim", base + `, '{0}'::int[], ARRAY[now()], '{1}'::bigint[]`},
		{"claim_settings", "claim_capped", base + `, 5, '{NULL}'::text[]`},
		{"claim_settings", "claim_capped_after", base + `, 5, '{NULL}'::text[], '{q,q}'::text[], '{t1,""}'::text[], '{0,0}'::int[], ARRAY[now(), now()], '{1,2}'::bigint[]`},
		{"claim_settings", "claim_limited", base + `, '{none}'::text[]`},
		{"claim_settings", "claim_enqueued", `'q', NULL, 1, 'w', 30000000`},
		{"write_settings", "heartbeat", leases + `, 30000000, 'w', ` + leases},
		{"write_settings", "complete_delete", leases + `, 'w'`},
		{"write_settings", "complete_archive", leases + `, 'w', true`},
		{"write_settings", "reschedule", leases + `, '{0,0}'::bigint[], '{0,0}'::int[], '{NULL,NULL}'::text[], 'w', '{0,0}'::int[], '{f,t}'::bool[]`},
		{"write_settings", "dead_letter", leases + `, '{error,error}'::text[], '{x,x}'::text[], 'w', '{0,0}'::int[], '{f,t}'::bool[]`},
		{"write_settings", "step_put_many", `'{1}'::bigint[], '{1}'::bigint[], '{explain}'::text[], '{"{}"}'::text[], 'w'`},
		{"write_settings_save", "complete_one_delete", `1, 1, 'w'`},
		{"write_settings_save", "complete_one_archive", `1, 1, 'w'`},
		{"write_settings", "step_put", `1, 1, 'w', 'explain', '{}'`},
		{"write_settings", "timer_put", `1, 1, 'w', 'sleep:explain', 60000000, NULL`},
		{"write_settings", "task_set_output", `1, 1, 'w', '{}'`},
		{"write_settings", "wait_lock", `1, 1, 'w'`},
		{"write_settings", "wait_sleep", `1, 1, 'w', '1970-01-01'`},
	}
	conn, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan")
	require.NoError(t, err)
	// explain plans statement i as its pipeline runs it: in one transaction
	// after its settings (set_config(..., true) holds to the transaction's end).
	explain := func(i int) string {
		_, err := conn.Exec(ctx, "BEGIN")
		require.NoError(t, err)
		defer func() { _, err := conn.Exec(ctx, "ROLLBACK"); require.NoError(t, err) }()
		_, err = conn.Exec(ctx, st.SQL(statements[i].settings))
		require.NoError(t, err)
		return dbtest.Explain(t, conn, fmt.Sprintf("EXPLAIN EXECUTE s%d(%s)", i, statements[i].args))
	}
	for i, c := range statements {
		_, err = conn.Conn().Prepare(ctx, fmt.Sprintf("s%d", i), st.SQL(c.name))
		require.NoError(t, err)
		explain(i) // plans and caches it, on 20 rows
	}
	_, err = db.Pool.Exec(ctx, `INSERT INTO skiplock.jobs (queue, kind, tenant) SELECT 'q', 'k', 't' || (g % 50) FROM generate_series(1, 100000) AS g`)
	require.NoError(t, err)

	pkScan := regexp.MustCompile(`(Index|Index Only) Scan using jobs_pkey on jobs`)
	for i, c := range statements {
		plan := explain(i)
		require.NotRegexp(t, `Seq Scan on jobs\b`, plan, "%s:\n%s", c.name, plan)
		lines := strings.Split(plan, "\n")
		for k, l := range lines {
			if pkScan.MatchString(l) {
				require.True(t, k+1 < len(lines) && strings.Contains(lines[k+1], "Index Cond:"),
					"%s: the whole primary key scanned:\n%s", c.name, plan)
			}
		}
		if os.Getenv("SKIPLOCK_SHOW_PLANS") != "" {
			t.Logf("%s:\n%s", c.name, plan)
		}
	}
}
