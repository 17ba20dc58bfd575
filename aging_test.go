package skiplock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
)

// With aging on, a low-priority job that has waited past the queue's age is
// promoted and runs while a steady stream of higher-priority jobs would
// otherwise keep it waiting forever; without aging it stays starved.
func TestPriorityAgingEndsStarvation(t *testing.T) {
	skipInShort(t, "runs for seconds of wall time")
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := schedClient(t, db.URL, skiplock.Config{Logger: quietLogger(), PollInterval: 50 * time.Millisecond,
		Pools: []skiplock.WorkerPool{{Queues: []string{"q"}, Concurrency: 1, BatchSize: 1}}})
	require.Error(t, c.QueueAgingSet(ctx, "q", 10*time.Millisecond, 5), "after under a second is refused")
	require.Error(t, c.QueueAgingSet(ctx, "q", time.Second, 5000), "an invalid priority is refused")
	require.Error(t, c.QueueAgingSet(ctx, "bad queue", time.Second, 5))

	var mu sync.Mutex
	var ran []string
	lowRan := make(chan struct{})
	require.NoError(t, skiplock.Handle(c, "high", func(ctx context.Context, j *skiplock.Job[struct{}]) error {
		time.Sleep(5 * time.Millisecond)
		return nil
	}))
	require.NoError(t, skiplock.Handle(c, "low", func(ctx context.Context, j *skiplock.Job[struct{}]) error {
		mu.Lock()
		ran = append(ran, "low")
		mu.Unlock()
		close(lowRan)
		return nil
	}))
	// The starved job: due for a minute already, priority -10.
	_, err := c.Enqueue(ctx, skiplock.EnqueueParams{Queue: "q", Kind: "low", Priority: -10, RunAt: time.Now().Add(-time.Minute)})
	require.NoError(t, err)
	// A steady stream of priority-10 jobs, always more than the worker runs
	// (at most 200 a second): a backlog first, then 100 every 50 ms, so a
	// loaded machine that slows the stream tenfold still starves the job.
	high := func(n int) []skiplock.EnqueueParams {
		ps := make([]skiplock.EnqueueParams, n)
		for i := range ps {
			ps[i] = skiplock.EnqueueParams{Queue: "q", Kind: "high", Priority: 10}
		}
		return ps
	}
	_, err = c.EnqueueMany(ctx, high(500))
	require.NoError(t, err)
	stream, stopStream := context.WithCancel(ctx)
	streamed := make(chan struct{})
	go func() {
		defer close(streamed)
		for stream.Err() == nil {
			if _, err := c.EnqueueMany(stream, high(100)); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	defer func() { stopStream(); <-streamed }()
	require.NoError(t, c.Start(ctx))
	defer func() { require.NoError(t, c.StopAndCancel(ctx)) }()

	select {
	case <-lowRan:
		t.Fatal("the low-priority job ran without aging: the stream does not starve it, so the test tests nothing")
	case <-time.After(1500 * time.Millisecond):
	}
	// Aging on: due for more than 30 s → priority 20, above the stream. The
	// client runs the pass every 10 s.
	require.NoError(t, c.QueueAgingSet(ctx, "q", 30*time.Second, 20))
	select {
	case <-lowRan:
	case <-time.After(25 * time.Second):
		t.Fatal("the low-priority job was not promoted and run within two aging passes")
	}
	// The handler has run; its completion is written by the next batch of
	// the completer, a moment later.
	var prio int
	require.Eventually(t, func() bool {
		return db.Pool.QueryRow(ctx, `SELECT priority FROM skiplock.jobs_done WHERE kind = 'low'`).Scan(&prio) == nil
	}, 10*time.Second, 10*time.Millisecond, "the low-priority job's completion was never written")
	require.Equal(t, 20, prio, "promoted to the queue's age_to")
	require.NoError(t, c.QueueAgingSet(ctx, "q", 0, 0))
	var off bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT age_after IS NULL AND age_to IS NULL FROM skiplock.queues WHERE name = 'q'`).Scan(&off))
	require.True(t, off, "after 0 turns aging off")
}
