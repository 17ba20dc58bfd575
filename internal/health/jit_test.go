package health_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/health"
)

// The health readers that read the jobs table (stats, the dashboard's
// panels, the metrics collector, the doctor) are never JIT-compiled: under
// a pinned horizon the table's statistics count millions of dead versions,
// their estimates pass jit_above_cost, and each read would compile itself
// for a fraction of a second of a core at every refresh and scrape.
func TestHealthReadersAreNotJITCompiled(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	insertReady(t, db, "q", "k", 20, -time.Minute)
	insertRunning(t, db, "q", "k", 3, time.Minute, -time.Second)
	conn, compiled := db.JITConn(t)

	_, err := conn.Exec(ctx, "SELECT count(*) /* control */ FROM skiplock.jobs")
	require.NoError(t, err)
	require.True(t, compiled("control"), "the connection compiles what it runs")

	stats, err := health.QueueStats(ctx, conn, "skiplock")
	require.NoError(t, err)
	require.Len(t, stats, 1)
	require.EqualValues(t, 20, stats[0].Ready)
	require.False(t, compiled("queue_stats AS s"))

	seen, err := health.QueueSeen(ctx, conn, "skiplock", "q")
	require.NoError(t, err)
	require.True(t, seen)
	require.False(t, compiled("Whether anything ever named the queue"))

	runners, err := health.LongRunners(ctx, conn, "skiplock", 10)
	require.NoError(t, err)
	require.Len(t, runners, 3)
	require.False(t, compiled("long_runners AS r"))

	waits, err := health.WaitP99(ctx, conn, "skiplock")
	require.NoError(t, err)
	require.Len(t, waits, 1)
	require.False(t, compiled("wait_p99 AS w"))

	_, err = health.UnhandledKinds(ctx, conn, "skiplock")
	require.NoError(t, err)
	require.False(t, compiled("unhandled_kinds($1"))

	checks, err := health.Doctor(ctx, conn, "skiplock")
	require.NoError(t, err)
	require.NotEmpty(t, checks)
	require.False(t, compiled("nobody is reaping"), "the doctor's stuck-jobs check")
}
