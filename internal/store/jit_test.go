package store_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/store"
)

// The statements that read the hot table on their own (the reaper, the
// aging pass) are never JIT-compiled. Under a pinned horizon the table's
// statistics count millions of dead versions and their estimates pass
// jit_above_cost: compiling an aging pass took 0.2–0.9 s of a core ten
// minutes into a pin, for a pass with no queue to age.
func TestMaintenanceStatementsAreNotJITCompiled(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	seed(t, db, `INSERT INTO skiplock.jobs (queue, kind, run_at) SELECT 'q', 'k', now() - interval '1 hour' FROM generate_series(1, 50)`)
	seed(t, db, `INSERT INTO skiplock.queues (name, age_after, age_to) VALUES ('q', interval '1 minute', 5)`)
	conn, compiled := db.JITConn(t)

	// The control: a plain statement on this connection is compiled.
	_, err := conn.Exec(ctx, "SELECT count(*) /* control */ FROM skiplock.jobs")
	require.NoError(t, err)
	require.True(t, compiled("control"), "the connection compiles what it runs")

	st := store.New("skiplock")
	n, err := st.AgeReady(ctx, conn, 10)
	require.NoError(t, err)
	require.EqualValues(t, 10, n, "the pass promoted the jobs waiting longer than a minute")
	require.False(t, compiled("One aging pass"))

	_, _, err = st.Reap(ctx, conn, 100)
	require.NoError(t, err)
	require.False(t, compiled("Returns jobs whose lease expired"))
}
