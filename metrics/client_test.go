package metrics

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
)

// The process collector follows the client's own counters: after three jobs
// (one failing into the dead-letter table) it reports them, a claim
// histogram with observations, and nothing that identifies a job.
func TestClientCollector(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c, err := skiplock.NewClient(db.Pool, skiplock.Config{Schema: db.Schema, PollInterval: 50 * time.Millisecond,
		Pools: []skiplock.WorkerPool{{Queues: []string{"default"}, Concurrency: 2}}})
	require.NoError(t, err)
	require.NoError(t, skiplock.Handle(c, "ok", func(ctx context.Context, j *skiplock.Job[struct{}]) error { return nil }))
	require.NoError(t, skiplock.Handle(c, "bad", func(ctx context.Context, j *skiplock.Job[struct{}]) error {
		return skiplock.Discard(context.Canceled)
	}))
	for _, k := range []string{"ok", "ok", "bad"} {
		_, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: k, Payload: map[string]string{"secret": "PII-123"}})
		require.NoError(t, err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewClientCollector(c))
	require.NoError(t, c.Start(ctx))
	require.Eventually(t, func() bool { s := c.Stats(); return s.Completed == 2 && s.DeadLettered == 1 },
		10*time.Second, 20*time.Millisecond)
	require.NoError(t, c.Stop(ctx))

	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP skiplock_process_jobs_completed_total Jobs completed by this process.
# TYPE skiplock_process_jobs_completed_total counter
skiplock_process_jobs_completed_total 2
# HELP skiplock_process_jobs_dead_lettered_total Jobs this process moved to the dead-letter table (a handler's final failure, or its reaper).
# TYPE skiplock_process_jobs_dead_lettered_total counter
skiplock_process_jobs_dead_lettered_total 1
# HELP skiplock_process_jobs_claimed_total Jobs claimed by this process.
# TYPE skiplock_process_jobs_claimed_total counter
skiplock_process_jobs_claimed_total 3
`), "skiplock_process_jobs_completed_total", "skiplock_process_jobs_dead_lettered_total", "skiplock_process_jobs_claimed_total"))

	mfs, err := reg.Gather()
	require.NoError(t, err)
	var found bool
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				require.Contains(t, []string{"queue", "kind", "outcome"}, l.GetName(), "%s: only queue, kind and outcome", mf.GetName())
			}
		}
		if mf.GetName() == "skiplock_process_job_runs_total" {
			outcomes := map[string]float64{}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "outcome" {
						outcomes[l.GetValue()] += m.GetCounter().GetValue()
					}
				}
			}
			require.Equal(t, map[string]float64{"completed": 2, "dead_lettered": 1}, outcomes)
		}
		if mf.GetName() == "skiplock_process_claim_duration_seconds" {
			found = true
			h := mf.GetMetric()[0].GetHistogram()
			require.NotZero(t, h.GetSampleCount(), "no claim observed")
			require.Len(t, h.GetBucket(), len(skiplock.ClaimBuckets))
			last := h.GetBucket()[len(h.GetBucket())-1].GetCumulativeCount()
			require.LessOrEqual(t, last, h.GetSampleCount())
		}
		require.NotContains(t, mf.String(), "PII-123")
	}
	require.True(t, found, "skiplock_process_claim_duration_seconds missing")
}
