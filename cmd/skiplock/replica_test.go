package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/dashboard"
	"github.com/skiplock/skiplock/devdb"
	"github.com/skiplock/skiplock/internal/health"
	"github.com/skiplock/skiplock/metrics"
)

// replicaSettings keep the two clusters of the replica test small.
var replicaSettings = map[string]string{"shared_buffers": "16MB", "fsync": "off", "full_page_writes": "off", "max_connections": "40"}

// TestReplicaURL runs stats, top, doctor and the dashboard with
// --replica-url (Options.Replica) against a real streaming standby whose
// replay is paused, so the replica's figures visibly differ from the
// primary's: every read comes from the replica, with its lag shown; the
// vacuum state and every action stay on the primary.
func TestReplicaURL(t *testing.T) {
	t.Parallel()
	if _, err := devdb.BinDir(); errors.Is(err, devdb.ErrNoServer) {
		t.Skip(err)
	}
	ctx := context.Background()
	primary, err := devdb.Start(ctx, devdb.Options{Settings: replicaSettings})
	require.NoError(t, err)
	t.Cleanup(func() { _ = primary.Remove() })
	p, err := pgxpool.New(ctx, primary.URL("postgres"))
	require.NoError(t, err)
	t.Cleanup(p.Close)
	_, err = skiplock.Migrate(ctx, p, "skiplock")
	require.NoError(t, err)
	standby, err := primary.StartStandby(ctx, devdb.StandbyOptions{Name: "reader"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = standby.Remove() })
	s, err := pgxpool.New(ctx, standby.URL("postgres"))
	require.NoError(t, err)
	t.Cleanup(s.Close)

	exec := func(pool *pgxpool.Pool, q string) {
		t.Helper()
		_, err := pool.Exec(ctx, q)
		require.NoError(t, err)
	}
	count := func(pool *pgxpool.Pool, q string) int {
		t.Helper()
		var n int
		require.NoError(t, pool.QueryRow(ctx, q).Scan(&n))
		return n
	}
	exec(p, `INSERT INTO skiplock.jobs (queue, kind) SELECT 'mail', 'send' FROM generate_series(1, 3)`)
	require.Eventually(t, func() bool {
		return count(s, "SELECT count(*) FROM skiplock.jobs") == 3
	}, 10*time.Second, 20*time.Millisecond, "the standby replays the first jobs")

	// Caught up: stats on the replica alone (the primary URL leads nowhere).
	nowhere := "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=1"
	code, out, stderr := runCLI(t, "stats", "--database-url", nowhere, "--replica-url", standby.URL("postgres"), "--json")
	require.Equal(t, 0, code, stderr)
	var st statsOut
	decodeJSON(t, out, &st)
	require.NotNil(t, st.Replica)
	require.True(t, st.Replica.InRecovery)
	require.True(t, st.Replica.Streaming)
	require.Len(t, st.Queues, 1)
	require.EqualValues(t, 3, st.Queues[0].Ready)

	// Pause replay and add jobs on the primary: the replica now lags.
	exec(s, "SELECT pg_wal_replay_pause()")
	t.Cleanup(func() { _, _ = s.Exec(context.Background(), "SELECT pg_wal_replay_resume()") })
	exec(p, `INSERT INTO skiplock.jobs (queue, kind) SELECT 'mail', 'send' FROM generate_series(1, 2)`)
	require.Eventually(t, func() bool {
		var receive, replay string
		err := s.QueryRow(ctx, "SELECT pg_last_wal_receive_lsn()::text, pg_last_wal_replay_lsn()::text").Scan(&receive, &replay)
		return err == nil && receive != replay
	}, 10*time.Second, 20*time.Millisecond, "the standby receives WAL it does not replay")
	time.Sleep(1100 * time.Millisecond) // so the lag is at least a second

	code, out, stderr = runCLI(t, "stats", "--database-url", nowhere, "--replica-url", standby.URL("postgres"), "--json")
	require.Equal(t, 0, code, stderr)
	st = statsOut{}
	decodeJSON(t, out, &st)
	require.EqualValues(t, 3, st.Queues[0].Ready, "stats read the replica, not the primary (5 jobs)")
	require.GreaterOrEqual(t, st.Replica.LagSeconds, 1.0)
	code, out, stderr = runCLI(t, "stats", "--database-url", nowhere, "--replica-url", standby.URL("postgres"))
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "read on a replica, ")
	require.Contains(t, out, "behind the primary")
	code, out, _ = runCLI(t, "stats", "--database-url", primary.URL("postgres"), "--json")
	require.Equal(t, 0, code)
	st = statsOut{}
	decodeJSON(t, out, &st)
	require.EqualValues(t, 5, st.Queues[0].Ready, "without --replica-url stats read the primary")
	require.Nil(t, st.Replica)

	// top: the queues from the replica, the vacuum state from the primary.
	code, out, stderr = runCLI(t, "top", "--once", "--json", "--database-url", primary.URL("postgres"), "--replica-url", standby.URL("postgres"))
	require.Equal(t, 0, code, stderr)
	var f topFrame
	decodeJSON(t, out, &f)
	require.EqualValues(t, 3, f.Queues[0].Ready)
	require.NotNil(t, f.Replica)
	require.GreaterOrEqual(t, f.Replica.LagSeconds, 1.0)
	code, out, stderr = runCLI(t, "top", "--once", "--database-url", primary.URL("postgres"), "--replica-url", standby.URL("postgres"))
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "figures read on a replica")

	// doctor: content checks on the replica, with its lag; replica_lag judged.
	code, out, stderr = runCLI(t, "doctor", "--json", "--database-url", primary.URL("postgres"), "--replica-url", standby.URL("postgres"),
		"--replica-lag-warn", "500ms")
	require.Contains(t, []int{0, 3}, code, stderr)
	var d doctorOut
	decodeJSON(t, out, &d)
	by := map[string]health.Check{}
	for _, c := range d.Checks {
		by[c.Name] = c
	}
	require.Contains(t, by, "replica_lag")
	require.Equal(t, health.StatusWarn, by["replica_lag"].Status, by["replica_lag"].Figure)
	require.Contains(t, by["queue_lag"].Figure, "read on a replica")
	require.Contains(t, by["queue_lag"].Figure, "3 due", "queue_lag counted the replica's jobs")
	require.NotContains(t, by["dead_tuples"].Figure, "replica", "the vacuum statistics are the primary's")
	code, out, stderr = runCLI(t, "doctor", "--database-url", primary.URL("postgres"), "--replica-url", "postgres://x:secret@h:notaport/db")
	require.Equal(t, 2, code, out)
	require.Contains(t, stderr, "--replica-url")
	require.NotContains(t, stderr, "secret")

	// /metrics: the replica's state beside the primary's figures.
	mh := metrics.Handler(p, "skiplock", metrics.NewReplicaCollector(s, "skiplock"))
	mrec := httptest.NewRecorder()
	mh.ServeHTTP(mrec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body := mrec.Body.String()
	require.Contains(t, body, "skiplock_replica_up 1")
	require.Contains(t, body, "skiplock_replica_in_recovery 1")
	require.Contains(t, body, "skiplock_replica_streaming 1")
	require.Contains(t, body, `skiplock_queue_jobs{queue="mail",state="ready"} 5`, "the main figures are the primary's")
	lagLine := regexp.MustCompile(`(?m)^skiplock_replica_lag_seconds (\S+)$`).FindStringSubmatch(body)
	require.Len(t, lagLine, 2, body)
	lag, err := strconv.ParseFloat(lagLine[1], 64)
	require.NoError(t, err)
	require.GreaterOrEqual(t, lag, 1.0)

	// The dashboard: pages read the replica and say how stale; an action
	// reaches the primary.
	h, err := dashboard.New(p, dashboard.Options{Replica: s, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.(*dashboard.Dashboard).Close() })
	get := func(path string) string {
		t.Helper()
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Host = "127.0.0.1"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		return rec.Body.String()
	}
	for _, path := range []string{"/", "/queues", "/jobs", "/dead", "/workers", "/health"} {
		require.Contains(t, get(path), `id="replica-note"`, "%s shows the replica note", path)
	}
	require.Contains(t, get("/overview/panels"), "behind the primary", "the refreshed panels carry the note")
	jobs := get("/jobs?queue=mail")
	require.Equal(t, 3, strings.Count(jobs, `href="/jobs/`), "the job list is the replica's")
	form := url.Values{"queue": {"mail"}}
	req := httptest.NewRequest(http.MethodPost, "/queues/pause", strings.NewReader(form.Encode()))
	req.Host = "127.0.0.1"
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	require.Less(t, rec.Code, 400, rec.Body.String())
	require.Equal(t, 1, count(p, "SELECT count(*) FROM skiplock.queues WHERE name = 'mail' AND paused"), "the pause reached the primary")
}
