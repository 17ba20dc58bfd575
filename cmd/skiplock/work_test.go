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
		"--metrics-addr", addr, "--poll-interval", "100ms")
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
	require.Contains(t, body, "skiplock_claim_duration_seconds_bucket")
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
