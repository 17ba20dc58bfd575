package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
)

// skiplock work --metrics-addr serves this process's counters and claim
// histogram next to the queue's health, and SIGTERM drains and exits 0.
func TestWorkMetricsAddr(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c, err := skiplock.NewClient(db.Pool, skiplock.Config{Schema: db.Schema})
	require.NoError(t, err)
	for range 3 {
		_, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "k", Payload: map[string]string{"secret": "PII-42"}})
		require.NoError(t, err)
	}
	// One job scheduled for later keeps the queue in the health views after
	// the three are done (and deleted), so its gauges are there to scrape.
	_, err = c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "k", Delay: time.Hour})
	require.NoError(t, err)
	addr := freeAddr(t)
	bg := startCLI(ctx, t, "work", "--database-url", db.URL, "--exec", "cat >/dev/null",
		"--metrics-addr", addr, "--fleet-metrics", "--poll-interval", "100ms")
	scrape := func() string {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	var body string
	require.Eventually(t, func() bool {
		body = scrape()
		return strings.Contains(body, "skiplock_process_jobs_completed_total 3")
	}, 20*time.Second, 50*time.Millisecond, "metrics never showed 3 completed jobs:\n%s", body)
	require.Contains(t, body, "skiplock_process_claim_duration_seconds_bucket")
	require.Contains(t, body, `skiplock_process_job_runs_total{kind="k",outcome="completed",queue="default"} 3`)
	require.Contains(t, body, `skiplock_process_job_duration_seconds_count{kind="k",queue="default"} 3`)
	require.Contains(t, body, `skiplock_queue_jobs{queue="default",state="scheduled"} 1`)
	require.NotContains(t, body, "PII-42")

	// The signal handler is registered before the metrics server starts.
	bg.terminate(t)
	select {
	case code := <-bg.done:
		errb, _ := os.ReadFile(bg.stderr)
		require.Equal(t, 0, code, "stderr: %s", errb)
	case <-time.After(30 * time.Second):
		t.Fatal("work did not drain and exit after SIGTERM")
	}
}

// work --metrics-addr beyond loopback follows serve's rules (review F7:
// it served anyone, any Host, with no warning): refused without
// credentials or with a short password, served with --insecure-no-auth (and
// a warning); with credentials, a scrape needs them and a foreign Host gets
// 421, while /healthz stays open for probes.
func TestWorkMetricsBeyondLoopback(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	noCreds := map[string]string{"SKIPLOCK_DASHBOARD_USER": "", "SKIPLOCK_DASHBOARD_PASSWORD": "", "SKIPLOCK_DASHBOARD_TOKEN": ""}
	code, _, stderr := runCLIEnv(t, noCreds, "work", "--database-url", db.URL, "--exec", "true", "--metrics-addr", "0.0.0.0:0")
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, "--metrics-addr 0.0.0.0:0: refusing to serve metrics beyond loopback without authentication")
	require.Contains(t, stderr, "--insecure-no-auth")
	code, _, stderr = runCLIEnv(t, map[string]string{"SKIPLOCK_DASHBOARD_USER": "a", "SKIPLOCK_DASHBOARD_PASSWORD": "a", "SKIPLOCK_DASHBOARD_TOKEN": ""},
		"work", "--database-url", db.URL, "--exec", "true", "--metrics-addr", "0.0.0.0:0")
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, "shorter than 12 bytes")

	get := func(addr, host, path, token string) int {
		req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
		require.NoError(t, err)
		req.Host = host
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	stop := func(bg *background) {
		bg.terminate(t)
		select {
		case code := <-bg.done:
			require.Equal(t, 0, code)
		case <-time.After(30 * time.Second):
			t.Fatal("work did not exit after SIGTERM")
		}
	}

	const token = "scrape-token-0123456789"
	addr := freeAddr(t)
	_, port, _ := strings.Cut(addr, ":")
	bg := startCLIEnv(ctx, t, map[string]string{"SKIPLOCK_DASHBOARD_USER": "", "SKIPLOCK_DASHBOARD_PASSWORD": "", "SKIPLOCK_DASHBOARD_TOKEN": token},
		"work", "--database-url", db.URL, "--exec", "true", "--metrics-addr", "0.0.0.0:"+port, "--poll-interval", "100ms")
	local := "127.0.0.1:" + port
	require.Eventually(t, func() bool { return get(local, local, "/healthz", "") == http.StatusOK }, 20*time.Second, 50*time.Millisecond)
	require.Equal(t, http.StatusOK, get(local, local, "/metrics", token))
	require.Equal(t, http.StatusUnauthorized, get(local, local, "/metrics", ""))
	require.Equal(t, http.StatusMisdirectedRequest, get(local, "evil.example", "/metrics", token))
	stop(bg)

	addr = freeAddr(t)
	_, port, _ = strings.Cut(addr, ":")
	bg = startCLIEnv(ctx, t, noCreds, "work", "--database-url", db.URL, "--exec", "true", "--metrics-addr", "0.0.0.0:"+port,
		"--insecure-no-auth", "--poll-interval", "100ms")
	local = "127.0.0.1:" + port
	require.Eventually(t, func() bool { return get(local, local, "/metrics", "") == http.StatusOK }, 20*time.Second, 50*time.Millisecond)
	require.Equal(t, http.StatusMisdirectedRequest, get(local, "evil.example", "/metrics", ""), "the Host check holds without auth too")
	stop(bg)
	logs, err := os.ReadFile(bg.stderr)
	require.NoError(t, err)
	require.Contains(t, string(logs), "metrics are served beyond loopback without authentication")
}
