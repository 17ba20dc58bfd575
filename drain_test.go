package skiplock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
)

func TestDrainRunsDueJobsSynchronously(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{Logger: quietLogger(), Backoff: func(int) time.Duration { return time.Hour }})
	_, err := c.Drain(ctx, skiplock.DrainOptions{})
	require.ErrorContains(t, err, "no handlers registered")

	var ran []string
	require.NoError(t, skiplock.Handle(c, "ok", func(ctx context.Context, j *skiplock.Job[struct{}]) error {
		ran = append(ran, j.Queue+"/ok")
		return nil
	}))
	require.NoError(t, skiplock.Handle(c, "flaky", func(ctx context.Context, j *skiplock.Job[struct{}]) error {
		ran = append(ran, "flaky")
		if j.Attempt < 3 {
			return errors.New("not yet")
		}
		return nil
	}))
	require.NoError(t, skiplock.Handle(c, "sleepy", func(ctx context.Context, j *skiplock.Job[struct{}]) error {
		ran = append(ran, "sleepy")
		return skiplock.Snooze(0) // due again at once: Drain must not loop on it
	}))
	enqueue := func(p skiplock.EnqueueParams) int64 {
		r, err := c.Enqueue(ctx, p)
		require.NoError(t, err)
		return r.ID
	}
	enqueue(skiplock.EnqueueParams{Kind: "ok"})
	enqueue(skiplock.EnqueueParams{Kind: "ok", Queue: "other"})
	later := enqueue(skiplock.EnqueueParams{Kind: "ok", Queue: "other", Delay: time.Hour})
	enqueue(skiplock.EnqueueParams{Kind: "unregistered"})

	// Kinds and Limit select; without Queues every queue is drained.
	res, err := c.Drain(ctx, skiplock.DrainOptions{Kinds: []string{"ok"}, Limit: 1})
	require.NoError(t, err)
	require.Len(t, res.Jobs, 1)
	res, err = c.Drain(ctx, skiplock.DrainOptions{Kinds: []string{"ok"}})
	require.NoError(t, err)
	require.Equal(t, 1, res.Completed)
	require.ElementsMatch(t, []string{"default/ok", "other/ok"}, ran)
	require.Equal(t, 1, countJobs(t, db.Pool, "id = $1", later), "scheduled job left alone")

	// IncludeScheduled makes scheduled jobs and retries due.
	ran = nil
	enqueue(skiplock.EnqueueParams{Kind: "flaky"})
	res, err = c.Drain(ctx, skiplock.DrainOptions{Queues: []string{"default", "other"}, Kinds: []string{"ok", "flaky"}})
	require.NoError(t, err)
	require.Equal(t, 1, res.Retried)
	require.Equal(t, []string{"flaky"}, ran, "the retry waits out its backoff")
	res, err = c.Drain(ctx, skiplock.DrainOptions{IncludeScheduled: true, Kinds: []string{"ok", "flaky"}})
	require.NoError(t, err)
	require.Equal(t, 2, res.Completed)
	require.Equal(t, 1, res.Retried)
	require.Zero(t, countJobs(t, db.Pool, "kind IN ('ok', 'flaky')"))

	// A snoozing job runs once per Drain; an unknown kind is dead-lettered
	// when selected explicitly.
	ran = nil
	sleepy := enqueue(skiplock.EnqueueParams{Kind: "sleepy"})
	res, err = c.Drain(ctx, skiplock.DrainOptions{IncludeScheduled: true})
	require.NoError(t, err)
	require.Equal(t, []string{"sleepy"}, ran)
	require.Equal(t, 1, res.Snoozed)
	require.Equal(t, 1, countJobs(t, db.Pool, "id = $1 AND state = 'ready' AND attempts = 0", sleepy))
	res, err = c.Drain(ctx, skiplock.DrainOptions{Kinds: []string{"unregistered"}})
	require.NoError(t, err)
	require.Equal(t, 1, res.DeadLettered)
	require.Equal(t, "unknown_kind", res.Jobs[0].Reason)

	_, err = c.Drain(ctx, skiplock.DrainOptions{Queues: []string{"bad queue"}})
	require.ErrorIs(t, err, skiplock.ErrInvalidJob)
	_, err = c.Drain(ctx, skiplock.DrainOptions{Limit: -1})
	require.ErrorIs(t, err, skiplock.ErrInvalidConfig)
}
