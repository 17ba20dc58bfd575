package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/store"
)

// The statements that read the hot table on their own (the reaper, the
// aging pass) are never JIT-compiled. Under a pinned horizon the table's
// statistics count millions of dead versions and their estimates pass
// jit_above_cost: compiling an aging pass took 0.2–0.9 s of a core ten
// minutes into a pin, for a pass with no queue to age. Here the costs that
// make the server compile are set to zero on the test's connection, and
// auto_explain sends each statement's plan to the client, which shows
// whether it was compiled ("JIT:").
func TestMaintenanceStatementsAreNotJITCompiled(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	var available bool
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT pg_jit_available()").Scan(&available))
	if !available {
		t.Skip("this server has no JIT provider (postgresql-15-jit or llvm): nothing to compile")
	}
	seed(t, db, `INSERT INTO skiplock.jobs (queue, kind, run_at) SELECT 'q', 'k', now() - interval '1 hour' FROM generate_series(1, 50)`)
	seed(t, db, `INSERT INTO skiplock.queues (name, age_after, age_to) VALUES ('q', interval '1 minute', 5)`)

	conn, notices := noticeConn(t, db)
	for _, set := range []string{"LOAD 'auto_explain'", "SET auto_explain.log_min_duration = 0",
		"SET auto_explain.log_level = 'notice'", "SET client_min_messages = notice", "SET jit = on",
		"SET jit_above_cost = 0", "SET jit_inline_above_cost = 0", "SET jit_optimize_above_cost = 0"} {
		_, err := conn.Exec(ctx, set)
		require.NoError(t, err, set)
	}
	planOf := func(marker string) string {
		plans := notices()
		for _, p := range plans {
			if strings.Contains(p, marker) {
				return p
			}
		}
		t.Fatalf("no plan of the statement marked %q among %d", marker, len(plans))
		return ""
	}

	// The control: a plain statement on this connection is compiled.
	_, err := conn.Exec(ctx, "SELECT count(*) /* control */ FROM skiplock.jobs")
	require.NoError(t, err)
	require.Contains(t, planOf("control"), "JIT:", "the connection compiles what it runs")

	st := store.New("skiplock")
	n, err := st.AgeReady(ctx, conn, 10)
	require.NoError(t, err)
	require.EqualValues(t, 10, n, "the pass promoted the jobs waiting longer than a minute")
	require.NotContains(t, planOf("One aging pass"), "JIT:")

	_, _, err = st.Reap(ctx, conn, 100)
	require.NoError(t, err)
	require.NotContains(t, planOf("Returns jobs whose lease expired"), "JIT:")
}
