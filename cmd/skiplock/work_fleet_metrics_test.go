package main

import (
	"context"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
)

// scrapeFamilies reads a /metrics page with Prometheus's own text parser.
func scrapeFamilies(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err, "the exposition parses")
	return fams
}

// sumOf adds a family's values over every scrape, for the series whose
// labels include match; histograms count their observations.
func sumOf(scrapes []map[string]*dto.MetricFamily, name string, match map[string]string) float64 {
	var sum float64
	for _, fams := range scrapes {
		mf := fams[name]
		if mf == nil {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for k, v := range match {
				found := false
				for _, l := range m.GetLabel() {
					found = found || (l.GetName() == k && l.GetValue() == v)
				}
				if !found {
					continue series
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.GetCounter().GetValue()
			case m.Gauge != nil:
				sum += m.GetGauge().GetValue()
			case m.Histogram != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}

// Three worker processes, each scraped and read by Prometheus's text
// parser: every counter's sum over the three is what really ran (counted in
// the database), the fleet metrics come from the one process that serves
// them, and every metric the documented alert rules use is in the scrape.
func TestThreeWorkersMetricsAddUp(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c, err := skiplock.NewClient(db.Pool, skiplock.Config{Schema: db.Schema})
	require.NoError(t, err)
	const ok, bad = 60, 6
	for i := range ok + bad {
		kind := "ok"
		if i >= ok {
			kind = "bad"
		}
		_, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: kind})
		require.NoError(t, err)
	}
	// One scheduled job keeps the queue in the fleet's health views.
	_, err = c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "ok", Delay: time.Hour})
	require.NoError(t, err)

	// Today's history partition exists before the first completion (a
	// worker's first retention pass creates it, racing its first claims).
	_, err = db.Pool.Exec(ctx, "SELECT "+db.Schema+".ensure_done_partitions(2)")
	require.NoError(t, err)

	script := `cat >/dev/null; [ "$SKIPLOCK_JOB_KIND" = ok ]`
	var addrs []string
	var bgs []*background
	for i := range 3 {
		addr := freeAddr(t)
		args := []string{"work", "--database-url", db.URL, "--exec", script, "--metrics-addr", addr,
			"--poll-interval", "50ms", "--max-attempts", "1", "--concurrency", "4"}
		if i == 0 {
			args = append(args, "--fleet-metrics")
		}
		addrs, bgs = append(addrs, addr), append(bgs, startCLI(ctx, t, args...))
	}
	require.Eventually(t, func() bool {
		var n int
		err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+db.Schema+".jobs WHERE run_at <= now()").Scan(&n)
		return err == nil && n == 0
	}, 60*time.Second, 50*time.Millisecond, "the jobs never finished")

	var completed, dead, attempts float64
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+db.Schema+".jobs_done").Scan(&completed))
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+db.Schema+".jobs_dead").Scan(&dead))
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT (SELECT coalesce(sum(attempts), 0) FROM `+db.Schema+`.jobs_done)
		+ (SELECT coalesce(sum(attempts), 0) FROM `+db.Schema+`.jobs_dead)`).Scan(&attempts))
	require.Equal(t, float64(ok), completed)
	require.Equal(t, float64(bad), dead)

	var scrapes []map[string]*dto.MetricFamily
	require.Eventually(t, func() bool {
		scrapes = scrapes[:0]
		for _, a := range addrs {
			scrapes = append(scrapes, scrapeFamilies(t, a))
		}
		return sumOf(scrapes, "skiplock_process_jobs_completed_total", nil) == completed &&
			sumOf(scrapes, "skiplock_process_jobs_dead_lettered_total", nil) == dead
	}, 10*time.Second, 50*time.Millisecond)
	require.Equal(t, attempts, sumOf(scrapes, "skiplock_process_jobs_claimed_total", nil), "claims")
	require.Equal(t, dead, sumOf(scrapes, "skiplock_process_jobs_failed_total", nil), "failed attempts")
	require.Equal(t, completed, sumOf(scrapes, "skiplock_process_job_runs_total", map[string]string{"kind": "ok", "outcome": "completed"}))
	require.Equal(t, dead, sumOf(scrapes, "skiplock_process_job_runs_total", map[string]string{"kind": "bad", "outcome": "dead_lettered"}))
	outcomes := map[string]float64{}
	for _, o := range []string{"completed", "retried", "snoozed", "released", "dead_lettered", "lease_lost", "unwritten"} {
		if n := sumOf(scrapes, "skiplock_process_job_runs_total", map[string]string{"outcome": o}); n > 0 {
			outcomes[o] = n
		}
	}
	require.Equal(t, map[string]float64{"completed": completed, "dead_lettered": dead}, outcomes, "no other outcome")
	require.Equal(t, completed+dead, sumOf(scrapes, "skiplock_process_job_duration_seconds", nil), "one observation per run")
	require.Equal(t, float64(ok), sumOf(scrapes, "skiplock_process_job_duration_seconds", map[string]string{"queue": "default", "kind": "ok"}))

	// The fleet metrics come from one process only, so their sum is theirs.
	var fleetServers int
	for _, fams := range scrapes {
		if fams["skiplock_queue_jobs"] != nil {
			fleetServers++
		}
		for name, mf := range fams {
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					require.NotEqual(t, "worker", l.GetName(), "%s is labelled by worker", name)
				}
			}
			if strings.HasPrefix(name, "skiplock_") {
				require.NotEqual(t, dto.MetricType_SUMMARY, mf.GetType(), "%s: no precomputed quantiles", name)
			}
		}
	}
	require.Equal(t, 1, fleetServers)
	require.Equal(t, 1.0, sumOf(scrapes, "skiplock_queue_jobs", map[string]string{"state": "scheduled"}))
	require.Equal(t, dead, sumOf(scrapes, "skiplock_queue_jobs", map[string]string{"state": "dead"}))

	// Every metric the documented alert rules use is in the fleet's scrape.
	for _, name := range alertMetrics(t) {
		found := false
		for _, fams := range scrapes {
			found = found || fams[name] != nil
		}
		require.True(t, found, "docs/operations.md alerts on %s, which no worker or fleet exporter serves", name)
	}

	for _, bg := range bgs {
		bg.terminate(t)
	}
	for _, bg := range bgs {
		select {
		case code := <-bg.done:
			errb, _ := os.ReadFile(bg.stderr)
			require.Equal(t, 0, code, "stderr: %s", errb)
		case <-time.After(30 * time.Second):
			t.Fatal("work did not drain and exit after SIGTERM")
		}
	}
}

// alertMetrics are the metric families the alert rules of
// docs/operations.md read (a histogram's _bucket series named by its
// family).
func alertMetrics(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../docs/operations.md")
	require.NoError(t, err)
	var names []string
	seen := map[string]bool{}
	exprs := 0
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "expr:") {
			continue
		}
		exprs++
		for _, n := range regexp.MustCompile(`skiplock_[a-z0-9_]+`).FindAllString(line, -1) {
			n = strings.TrimSuffix(n, "_bucket")
			if !seen[n] {
				seen[n] = true
				names = append(names, n)
			}
		}
	}
	require.Greater(t, exprs, 5, "the alert rules of docs/operations.md §6: "+strconv.Itoa(exprs))
	return names
}
