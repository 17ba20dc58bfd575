package metrics

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
)

const secret = "pii-secret-value"

func exec(t *testing.T, db *dbtest.DB, sql string, args ...any) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), sql, args...)
	require.NoError(t, err)
}

// seed inserts jobs whose payloads and errors carry the secret.
func seed(t *testing.T, db *dbtest.DB) {
	t.Helper()
	exec(t, db, `INSERT INTO skiplock.jobs (queue, kind, run_at, payload)
		SELECT 'mail', 'send', now() - interval '90 seconds', jsonb_build_object('secret', $1::text) FROM generate_series(1, 3)`, secret)
	exec(t, db, `INSERT INTO skiplock.jobs (queue, kind, run_at, payload)
		SELECT 'mail', 'send', now() + interval '1 hour', jsonb_build_object('secret', $1::text) FROM generate_series(1, 2)`, secret)
	exec(t, db, `INSERT INTO skiplock.jobs (queue, kind, state, attempts, locked_by, lease_token, lease_expires_at, attempted_at, payload)
		SELECT 'mail', 'send', 'running', 1, 'w1', g, now() + interval '1 minute', now(), jsonb_build_object('secret', $1::text)
		FROM generate_series(1, 4) AS g`, secret)
	exec(t, db, `INSERT INTO skiplock.jobs_dead (id, priority, attempts, max_attempts, run_at, created_at, dead_at, queue, kind, reason, last_error, payload)
		SELECT 9000 + g, 0, 3, 3, now(), now(), now() - interval '1 hour', 'reports', 'build', 'error', 'failed for ' || $1::text,
		       jsonb_build_object('secret', $1::text)
		FROM generate_series(1, 2) AS g`, secret)
	exec(t, db, `INSERT INTO skiplock.queues (name, paused) VALUES ('reports', true)`)
	exec(t, db, `INSERT INTO skiplock.limits (name, queue, concurrency) VALUES ('mail-cap', 'mail', 4)`)
	exec(t, db, `INSERT INTO skiplock.workers (id, hostname, pid, queues, concurrency, running,
		claimed_total, completed_total, failed_total, claim_p99_ms, heartbeat_at, stopped_at) VALUES
		('w1', 'h', 1, '{mail}', 10, 4, 100, 90, 6, 2.5, now(), NULL),
		('w0', 'h', 2, '{mail}', 10, 0, 10, 9, 1, 9.0, now() - interval '1 hour', NULL),
		('w2', 'h', 3, '{mail}', 10, 0, 20, 20, 0, 1.0, now(), now())`)
}

func TestCollector(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	seed(t, db)
	c := NewCollector(db.Pool, db.Schema)

	want := `
# HELP skiplock_queue_jobs Jobs per queue and state: ready (due now), scheduled (due later), running, dead (dead letters).
# TYPE skiplock_queue_jobs gauge
skiplock_queue_jobs{queue="mail",state="dead"} 0
skiplock_queue_jobs{queue="mail",state="ready"} 3
skiplock_queue_jobs{queue="mail",state="running"} 4
skiplock_queue_jobs{queue="mail",state="scheduled"} 2
skiplock_queue_jobs{queue="reports",state="dead"} 2
skiplock_queue_jobs{queue="reports",state="ready"} 0
skiplock_queue_jobs{queue="reports",state="running"} 0
skiplock_queue_jobs{queue="reports",state="scheduled"} 0
# HELP skiplock_queue_paused 1 when the queue is paused.
# TYPE skiplock_queue_paused gauge
skiplock_queue_paused{queue="mail"} 0
skiplock_queue_paused{queue="reports"} 1
# HELP skiplock_dead_letters Dead letters kept (the dead-letter table's size).
# TYPE skiplock_dead_letters gauge
skiplock_dead_letters 2
# HELP skiplock_dead_letters_last_24h Jobs that moved to the dead-letter table in the last 24 hours.
# TYPE skiplock_dead_letters_last_24h gauge
skiplock_dead_letters_last_24h 2
# HELP skiplock_workers Worker processes in the workers table by state: live, stale (not stopped, no beat within 5m), stopped.
# TYPE skiplock_workers gauge
skiplock_workers{state="live"} 1
skiplock_workers{state="stale"} 1
skiplock_workers{state="stopped"} 1
# HELP skiplock_up 1 when the last read of skiplock's health views succeeded, else 0.
# TYPE skiplock_up gauge
skiplock_up 1
# HELP skiplock_limit_concurrency A concurrency limit's most running jobs (per partition value when it has a partition).
# TYPE skiplock_limit_concurrency gauge
skiplock_limit_concurrency{limit="mail-cap"} 4
# HELP skiplock_limit_used What a limit counts over all its partition values: running jobs (concurrency limit) or starts within its window (rate limit).
# TYPE skiplock_limit_used gauge
skiplock_limit_used{limit="mail-cap"} 4
# HELP skiplock_limit_values_at_limit Partition values of a concurrency limit at the limit (0 or 1 without a partition): their ready jobs wait.
# TYPE skiplock_limit_values_at_limit gauge
skiplock_limit_values_at_limit{limit="mail-cap"} 1
`
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(want),
		"skiplock_limit_concurrency", "skiplock_limit_used", "skiplock_limit_values_at_limit",
		"skiplock_queue_jobs", "skiplock_queue_paused", "skiplock_dead_letters", "skiplock_dead_letters_last_24h",
		"skiplock_workers", "skiplock_up"))

	problems, err := testutil.CollectAndLint(c)
	require.NoError(t, err)
	require.Empty(t, problems, "metric names follow the Prometheus conventions")

	fams := gather(t, c)
	lag := fams["skiplock_queue_oldest_ready_age_seconds"]
	require.NotNil(t, lag)
	for _, m := range lag.GetMetric() {
		switch label(m, "queue") {
		case "mail":
			require.InDelta(t, 90, m.GetGauge().GetValue(), 10)
		case "reports":
			require.Zero(t, m.GetGauge().GetValue())
		}
	}
	require.NotNil(t, fams["skiplock_jobs_table_live_tuples"])
	require.NotNil(t, fams["skiplock_jobs_table_dead_tuples"])
	require.NotNil(t, fams["skiplock_jobs_table_autovacuum_threshold_tuples"])
	require.NotNil(t, fams["skiplock_xmin_horizon_age_seconds"])

	// No label (or anything else) carries a payload, an error text or a job id.
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				require.NotContains(t, l.GetValue(), secret, name)
				require.NotContains(t, []string{"job", "id", "job_id", "payload"}, l.GetName(), name)
			}
		}
	}
}

func TestCollectorCachesReads(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	exec(t, db, `INSERT INTO skiplock.jobs (queue, kind) VALUES ('q', 'k')`)
	ready := func(c prometheus.Collector) float64 {
		for _, m := range gather(t, c)["skiplock_queue_jobs"].GetMetric() {
			if label(m, "queue") == "q" && label(m, "state") == "ready" {
				return m.GetGauge().GetValue()
			}
		}
		return -1
	}
	cached := newCollector(db.Pool, db.Schema, DefaultTimeout, time.Hour)
	fresh := newCollector(db.Pool, db.Schema, DefaultTimeout, 0)
	require.Equal(t, 1.0, ready(cached))
	require.Equal(t, 1.0, ready(fresh))
	exec(t, db, `INSERT INTO skiplock.jobs (queue, kind) VALUES ('q', 'k')`)
	require.Equal(t, 1.0, ready(cached), "a read answers scrapes within the cache period")
	require.Equal(t, 2.0, ready(fresh))

	// Concurrent scrapes share one read.
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ch := make(chan prometheus.Metric, 1000)
			cached.Collect(ch)
		}()
	}
	wg.Wait()
}

func TestCollectorNotMigrated(t *testing.T) {
	t.Parallel()
	db := dbtest.NewEmpty(t)
	c := NewCollector(db.Pool, "skiplock")
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	fams, err := reg.Gather()
	require.Error(t, err, "a failed read is reported")
	require.Contains(t, err.Error(), "migrate up")
	var up *dto.MetricFamily
	for _, f := range fams {
		if f.GetName() == "skiplock_up" {
			up = f
		}
	}
	require.NotNil(t, up)
	require.Equal(t, 0.0, up.GetMetric()[0].GetGauge().GetValue())
}

func TestHandler(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	seed(t, db)
	srv := httptest.NewServer(Handler(db.Pool, db.Schema))
	defer srv.Close()
	body := get(t, srv.URL)
	for _, s := range []string{`skiplock_up 1`, `skiplock_queue_jobs{queue="mail",state="ready"} 3`,
		"go_goroutines", "process_"} {
		require.Contains(t, body, s)
	}
	require.NotContains(t, body, secret)
	for _, gone := range []string{"skiplock_jobs_claimed_total", "skiplock_worker_claim_p99_seconds"} {
		require.NotContains(t, body, gone, "a fleet sum of process counters, or a quantile per process: not a fleet metric")
	}

	// A database that cannot answer: skiplock_up 0, and the rest is served.
	empty := dbtest.NewEmpty(t)
	srv2 := httptest.NewServer(Handler(empty.Pool, ""))
	defer srv2.Close()
	body = get(t, srv2.URL)
	require.Contains(t, body, "skiplock_up 0")
	require.Contains(t, body, "go_goroutines")
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

func gather(t *testing.T, c prometheus.Collector) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	fams, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// Due jobs whose kind no live worker of their queue handles are exported
// per queue and kind; handled kinds are absent.
func TestCollectorUnhandledKinds(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	exec(t, db, `INSERT INTO skiplock.workers (id, hostname, pid, queues, heartbeat_at, handles)
		VALUES ('w1', 'h', 1, '{mail}', now(), '[{"queues": ["mail"], "kinds": ["send"]}]')`)
	exec(t, db, `INSERT INTO skiplock.jobs (queue, kind, payload)
		SELECT 'mail', k, jsonb_build_object('secret', $1::text) FROM unnest(array['send', 'sned', 'sned']) AS k`, secret)
	c := NewCollector(db.Pool, db.Schema)
	want := `
# HELP skiplock_unhandled_ready_jobs Due ready jobs whose kind no live worker of the queue handles: they wait forever (a mistyped kind, or a handler not deployed). Sampled up to 10,000 per queue.
# TYPE skiplock_unhandled_ready_jobs gauge
skiplock_unhandled_ready_jobs{kind="sned",queue="mail"} 2
`
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(want), "skiplock_unhandled_ready_jobs"))
}
