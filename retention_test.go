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

func TestRetentionConfig(t *testing.T) {
	t.Parallel()
	c := offlineClient(t)
	require.Equal(t, skiplock.DefaultCompletedRetention, c.Config().CompletedRetention)
	require.Equal(t, 24*time.Hour, c.Config().CompletedRetention)
	require.Equal(t, 30*24*time.Hour, c.Config().DeadLetterRetention)
	require.Equal(t, 7*24*time.Hour, c.Config().WorkflowRetention)

	pool := c.Pool()
	for _, tc := range []struct {
		cfg   skiplock.Config
		field string
	}{
		{skiplock.Config{CompletedRetention: time.Minute}, "Config.CompletedRetention"},
		{skiplock.Config{DeadLetterRetention: time.Second}, "Config.DeadLetterRetention"},
		{skiplock.Config{WorkflowRetention: time.Minute}, "Config.WorkflowRetention"},
	} {
		_, err := skiplock.NewClient(pool, tc.cfg)
		require.ErrorIs(t, err, skiplock.ErrInvalidConfig)
		var fe *skiplock.FieldError
		require.True(t, errors.As(err, &fe))
		require.Equal(t, tc.field, fe.Field)
	}
	for _, cfg := range []skiplock.Config{
		{CompletedRetention: -1, DeadLetterRetention: -1, WorkflowRetention: -1}, // keep forever
		{CompletedRetention: time.Hour, DeadLetterRetention: time.Hour},
	} {
		_, err := skiplock.NewClient(pool, cfg)
		require.NoError(t, err)
	}
}

// In archive mode a completed job lands in jobs_done, in its day's
// partition, which a started client created ahead; migration 002's default
// partition catches completions of days with no partition yet.
func TestArchiveCompletedLandsInJobsDone(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	var defaultPart string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT c.relname FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'skiplock.jobs_done'::regclass AND pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT'`).Scan(&defaultPart))
	require.Equal(t, "jobs_done_default", defaultPart)

	// A dead letter past retention, and one within it.
	_, err := db.Pool.Exec(ctx, `INSERT INTO skiplock.jobs_dead (id, priority, attempts, max_attempts, run_at, created_at, dead_at, queue, kind, reason, last_error, payload)
		VALUES (1, 0, 1, 1, now(), now(), now() - interval '31 days', 'q', 'k', 'error', 'old', '{}'),
		       (2, 0, 1, 1, now(), now(), now() - interval '29 days', 'q', 'k', 'error', 'recent', '{}')`)
	require.NoError(t, err)

	c := newClient(t, db.Pool, skiplock.Config{ArchiveCompleted: true, PollInterval: 20 * time.Millisecond, Logger: quietLogger()})
	done := make(chan int64, 1)
	require.NoError(t, skiplock.Handle(c, "archive_me", func(ctx context.Context, j *skiplock.Job[map[string]any]) error {
		done <- j.ID
		return nil
	}))
	r, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "archive_me", Payload: map[string]any{"n": 1}})
	require.NoError(t, err)
	require.NoError(t, c.Start(ctx))
	defer func() { require.NoError(t, c.Stop(ctx)) }()
	require.Equal(t, r.ID, <-done)
	waitNoJobs(t, db.Pool)

	today := "jobs_done_" + time.Now().UTC().Format("20060102")
	require.Eventually(t, func() bool {
		var part string
		err := db.Pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM skiplock.jobs_done WHERE id = $1`, r.ID).Scan(&part)
		return err == nil && (part == "skiplock."+today || part == today)
	}, 10*time.Second, 10*time.Millisecond, "the completed job is archived in today's partition")
	var kind string
	var finished time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT kind, finished_at FROM skiplock.jobs_done WHERE id = $1`, r.ID).Scan(&kind, &finished))
	require.Equal(t, "archive_me", kind)
	require.WithinDuration(t, time.Now(), finished, time.Minute)

	// The started client's retention purged the expired dead letter only.
	require.Eventually(t, func() bool { return retentionDeadCount(t, db) == 1 }, 10*time.Second, 10*time.Millisecond)
	var left string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT last_error FROM skiplock.jobs_dead`).Scan(&left))
	require.Equal(t, "recent", left)
}

func retentionDeadCount(t *testing.T, db *dbtest.DB) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM skiplock.jobs_dead`).Scan(&n))
	return n
}
