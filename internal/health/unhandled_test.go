package health_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/health"
)

// insertWorker writes a worker row as the runner's beat does; handles is
// the JSON of its pools (empty: NULL, a worker from before migration 005).
func insertWorker(t *testing.T, db *dbtest.DB, id string, queues []string, handles string, beatAgo time.Duration, stopped bool) {
	t.Helper()
	var h any
	if handles != "" {
		h = handles
	}
	_, err := db.Pool.Exec(context.Background(), `INSERT INTO skiplock.workers (id, hostname, pid, queues, heartbeat_at, stopped_at, handles)
		VALUES ($1, 'host', 1, $2, now() - $3::bigint * interval '1 microsecond', CASE WHEN $4 THEN now() END, $5::jsonb)`,
		id, queues, beatAgo.Microseconds(), stopped, h)
	require.NoError(t, err)
}

func unhandled(t *testing.T, db *dbtest.DB) map[string]int64 {
	t.Helper()
	us, err := health.UnhandledKinds(context.Background(), db.Pool, db.Schema)
	require.NoError(t, err)
	out := map[string]int64{}
	for _, u := range us {
		out[u.Queue+"/"+u.Kind] = u.Ready
	}
	return out
}

func TestUnhandledKinds(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	insertReady(t, db, "emails", "welcome", 3, -time.Minute)
	insertReady(t, db, "emails", "welcom", 2, -time.Minute) // the typo
	insertReady(t, db, "emails", "later", 4, time.Hour)     // scheduled: not due, not counted
	insertReady(t, db, "reports", "daily", 1, 0)
	insertRunning(t, db, "emails", "gone", 1, time.Second, time.Minute) // running: not counted

	// No live worker: every due kind is unhandled.
	require.Equal(t, map[string]int64{"emails/welcome": 3, "emails/welcom": 2, "reports/daily": 1}, unhandled(t, db))

	// A live worker handling welcome on emails; a stopped one and a stale
	// one that handled everything do not count.
	insertWorker(t, db, "live", []string{"emails"}, `[{"queues": ["emails"], "kinds": ["welcome"]}]`, 0, false)
	insertWorker(t, db, "stopped", []string{"emails", "reports"}, `[{"queues": ["emails", "reports"], "kinds": null}]`, 0, true)
	insertWorker(t, db, "stale", []string{"emails", "reports"}, `[{"queues": ["emails", "reports"], "kinds": null}]`, time.Hour, false)
	require.Equal(t, map[string]int64{"emails/welcom": 2, "reports/daily": 1}, unhandled(t, db))

	// Kinds count per pool: a pool of reports handling welcome does not
	// handle welcome on emails, nor daily on reports.
	insertWorker(t, db, "other", []string{"reports"}, `[{"queues": ["reports"], "kinds": ["welcom"]}]`, 0, false)
	require.Equal(t, map[string]int64{"emails/welcom": 2, "reports/daily": 1}, unhandled(t, db))

	// A fallback pool (kinds null) handles every kind of its queues; a
	// worker row without handles (before migration 005) counts as one
	// over the queues it lists.
	insertWorker(t, db, "fallback", []string{"reports"}, `[{"queues": ["reports"], "kinds": null}]`, 0, false)
	require.Equal(t, map[string]int64{"emails/welcom": 2}, unhandled(t, db))
	insertWorker(t, db, "legacy", []string{"emails"}, "", 0, false)
	require.Empty(t, unhandled(t, db))
}

// The doctor names the kind and its ready count instead of blaming vacuum
// or the worker count; it fails once the jobs waited past the lag SLO.
func TestDoctorNamesUnhandledKind(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	insertWorker(t, db, "live", []string{"default"}, `[{"queues": ["default"], "kinds": ["welcome"]}]`, 0, false)
	insertReady(t, db, "default", "welcome", 1, 0)
	check := func() health.Check {
		checks, err := health.Doctor(context.Background(), db.Pool, db.Schema)
		require.NoError(t, err)
		for _, c := range checks {
			if c.Name == "unhandled_kinds" {
				return c
			}
		}
		t.Fatal("no unhandled_kinds check")
		return health.Check{}
	}
	c := check()
	require.Equal(t, health.StatusOK, c.Status, c.Figure)

	insertReady(t, db, "default", "welcom", 7, -10*time.Second)
	c = check()
	require.Equal(t, health.StatusWarn, c.Status)
	require.Contains(t, c.Figure, `kind "welcom" in queue default: 7 ready`)
	require.Contains(t, c.Fix, "skiplock job list")

	insertReady(t, db, "default", "welcom", 1, -time.Hour)
	c = check()
	require.Equal(t, health.StatusFail, c.Status)
	require.Contains(t, c.Figure, `kind "welcom" in queue default: 8 ready`)
}

// jobs_ready keeps the jobs without a tenant and those with one in two
// ranges (migration 027): unhandled_kinds() and wait_p99 sample a queue
// from both, in claim order.
func TestUnhandledAndWaitCountBothRanges(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	_, err := db.Pool.Exec(context.Background(), `INSERT INTO skiplock.jobs (queue, kind, tenant, run_at)
		SELECT 'q', 'k', CASE WHEN g % 2 = 0 THEN 't' || g END, now() - g * interval '1 second'
		FROM generate_series(1, 7) AS g`)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"q/k": 7}, unhandled(t, db), "3 without a tenant, 4 with one")
	waits, err := health.WaitP99(context.Background(), db.Pool, db.Schema)
	require.NoError(t, err)
	require.Len(t, waits, 1)
	require.Equal(t, "q", waits[0].Queue)
	require.EqualValues(t, 7, waits[0].Sampled)
	require.InDelta(t, 7, waits[0].WaitP99Seconds, 1, "the oldest waited 7 s")
}

// A queue's count stops at the sample's size, and the doctor says so
// rather than give the sample as the backlog.
func TestUnhandledCountAtTheSampleIsALowerBound(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	insertReady(t, db, "big", "typo", health.UnhandledSample+500, -time.Minute)
	insertReady(t, db, "small", "typo", 3, -time.Minute)
	us, err := health.UnhandledKinds(context.Background(), db.Pool, db.Schema)
	require.NoError(t, err)
	require.Len(t, us, 2)
	require.Equal(t, "big", us[0].Queue)
	require.EqualValues(t, health.UnhandledSample, us[0].Ready, "sampled, not counted")
	require.Equal(t, "10000 or more", us[0].ReadyText())
	require.Equal(t, "3", us[1].ReadyText())

	checks, err := health.Doctor(context.Background(), db.Pool, db.Schema)
	require.NoError(t, err)
	for _, c := range checks {
		if c.Name == "unhandled_kinds" {
			require.Contains(t, c.Figure, `kind "typo" in queue big: 10000 or more ready`)
			require.Contains(t, c.Figure, `kind "typo" in queue small: 3 ready`)
			return
		}
	}
	t.Fatal("no unhandled_kinds check")
}
