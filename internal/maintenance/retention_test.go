package maintenance

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/health"
)

func retExec(t *testing.T, db *dbtest.DB, sql string, args ...any) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), sql, args...)
	require.NoError(t, err)
}

func retCount(t *testing.T, db *dbtest.DB, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.Pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// dayPartition creates the jobs_done partition of the UTC day daysAgo days
// ago, the way ensure_done_partitions names it, with rows archived in it.
func dayPartition(t *testing.T, db *dbtest.DB, daysAgo, rows int) string {
	t.Helper()
	day := time.Now().UTC().AddDate(0, 0, -daysAgo)
	lo := time.Date(day.Year(), day.Month(), day.Day(), 0, 0, 0, 0, time.UTC)
	name := "jobs_done_" + lo.Format("20060102")
	retExec(t, db, fmt.Sprintf(`CREATE TABLE skiplock.%s PARTITION OF skiplock.jobs_done FOR VALUES FROM ('%s') TO ('%s')`,
		name, lo.Format(time.RFC3339), lo.AddDate(0, 0, 1).Format(time.RFC3339)))
	retExec(t, db, `INSERT INTO skiplock.jobs_done (id, priority, attempts, run_at, created_at, finished_at, queue, kind, payload)
		SELECT g, 0, 1, $1, $1, $1::timestamptz + interval '1 hour', 'q', 'k', '{}' FROM generate_series(1, $2) AS g`, lo, rows)
	return name
}

func partitionNames(t *testing.T, db *dbtest.DB) map[string]bool {
	t.Helper()
	ps, err := health.DonePartitions(context.Background(), db.Pool, db.Schema)
	require.NoError(t, err)
	out := map[string]bool{}
	for _, p := range ps {
		out[p.Name] = true
	}
	return out
}

func TestRetentionPartitions(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	old := dayPartition(t, db, 30, 50)
	edge := dayPartition(t, db, 8, 5) // ended 7 days and some hours ago
	kept := dayPartition(t, db, 3, 20)

	r := NewRetention(RetentionConfig{DB: db.Pool, Schema: db.Schema, Archive: true, PartitionsAhead: 2,
		CompletedRetention: 7 * 24 * time.Hour})
	st, err := r.MaintainPartitions(ctx)
	require.NoError(t, err)
	require.Equal(t, PartitionStats{Created: 3, Dropped: 2}, st, "today and 2 days ahead created; 30 and 8 days ago dropped")

	names := partitionNames(t, db)
	require.False(t, names[old])
	require.False(t, names[edge])
	require.True(t, names[kept])
	require.True(t, names["jobs_done_default"], "migration 002 creates the default partition")
	for d := 0; d <= 2; d++ {
		require.True(t, names["jobs_done_"+time.Now().UTC().AddDate(0, 0, d).Format("20060102")], d)
	}
	require.Equal(t, int64(20), retCount(t, db, `SELECT count(*) FROM skiplock.jobs_done`), "the kept day is whole")
	// Retired by DROP, not DELETE: the dropped days' tables are gone, and no
	// partition that is left holds a dead tuple for vacuum to chase.
	require.Zero(t, retCount(t, db, `SELECT count(*) FROM pg_class WHERE relname = ANY($1)`, []string{old, edge}))
	if _, err := db.Pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pgstattuple`); err != nil {
		t.Logf("pgstattuple unavailable, dead-tuple check skipped: %v", err)
	} else {
		require.Zero(t, retCount(t, db, `SELECT coalesce(sum((pgstattuple(c.oid)).dead_tuple_count), 0)::bigint
			FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
			WHERE i.inhparent = 'skiplock.jobs_done'::regclass`), "retention left no dead tuples behind")
	}

	st, err = r.MaintainPartitions(ctx)
	require.NoError(t, err)
	require.Equal(t, PartitionStats{}, st, "a second pass has nothing to do")

	// Delete mode with no retention: nothing to do but the held keys.
	none := NewRetention(RetentionConfig{DB: db.Pool, Schema: db.Schema})
	require.Len(t, none.Services(), 1, "only the held-keys pass runs")
	st, err = none.MaintainPartitions(ctx)
	require.NoError(t, err)
	require.Equal(t, PartitionStats{}, st)
}

func insertDeadAt(t *testing.T, db *dbtest.DB, n int, firstID int64, deadAgo time.Duration) {
	t.Helper()
	retExec(t, db, `INSERT INTO skiplock.jobs_dead (id, priority, attempts, max_attempts, run_at, created_at, dead_at, queue, kind, reason, last_error, payload)
		SELECT $1 + g, 0, 1, 1, now(), now(), now() - $2::bigint * interval '1 microsecond', 'q', 'k', 'error', 'boom', '{}'
		FROM generate_series(0, $3 - 1) AS g`, firstID, deadAgo.Microseconds(), n)
}

func TestRetentionDeadLetters(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	insertDeadAt(t, db, 2500, 1, 40*24*time.Hour)
	insertDeadAt(t, db, 7, 100000, 29*24*time.Hour)

	r := NewRetention(RetentionConfig{DB: db.Pool, Schema: db.Schema, DeadLetterRetention: 30 * 24 * time.Hour,
		DeadLetterBatch: 1000})
	st, err := r.PurgeDeadLetters(ctx)
	require.NoError(t, err)
	require.Equal(t, DeadLetterStats{Purged: 2500, Batches: 3}, st, "three bounded batches")
	require.Equal(t, int64(7), retCount(t, db, `SELECT count(*) FROM skiplock.jobs_dead`), "recent dead letters kept")

	// A pass is bounded: the rest waits for the next pass.
	insertDeadAt(t, db, 25, 200000, 40*24*time.Hour)
	small := NewRetention(RetentionConfig{DB: db.Pool, Schema: db.Schema, DeadLetterRetention: 30 * 24 * time.Hour,
		DeadLetterBatch: 10, DeadLetterBatches: 2})
	st, err = small.PurgeDeadLetters(ctx)
	require.NoError(t, err)
	require.Equal(t, DeadLetterStats{Purged: 20, Batches: 2}, st)

	// Retention off: nothing purged.
	off := NewRetention(RetentionConfig{DB: db.Pool, Schema: db.Schema, DeadLetterRetention: -1})
	st, err = off.PurgeDeadLetters(ctx)
	require.NoError(t, err)
	require.Equal(t, DeadLetterStats{}, st)
	require.Equal(t, int64(12), retCount(t, db, `SELECT count(*) FROM skiplock.jobs_dead`))
}

// workflowAt creates a two-task workflow (a → b, a signal sent to it) and,
// unless running, finishes it ago in the past: both tasks completed.
func workflowAt(t *testing.T, db *dbtest.DB, name string, ago time.Duration, running bool) int64 {
	t.Helper()
	var id int64
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT skiplock.create_workflow($1, 'cancel',
		'[{"name":"a","queue":"q","kind":"k"},{"name":"b","queue":"q","kind":"k","depends_on":["a"]}]', NULL, false)`, name).Scan(&id))
	retExec(t, db, `SELECT skiplock.signal('go', workflow_id => $1)`, id)
	retExec(t, db, `DELETE FROM skiplock.jobs WHERE task_id IN (SELECT id FROM skiplock.workflow_tasks WHERE workflow_id = $1)`, id)
	at := `now() - $2::bigint * interval '1 microsecond'`
	if running {
		retExec(t, db, `UPDATE skiplock.workflows SET state = 'running', finished_at = NULL, tasks_open = 1, created_at = `+at+` WHERE id = $1`, id, ago.Microseconds())
		return id
	}
	retExec(t, db, `UPDATE skiplock.workflow_tasks SET state = 'completed', finished_at = `+at+` WHERE workflow_id = $1`, id, ago.Microseconds())
	retExec(t, db, `UPDATE skiplock.workflows SET state = 'completed', tasks_open = 0, tasks_completed = 2,
		created_at = `+at+` - interval '1 minute', finished_at = `+at+` WHERE id = $1`, id, ago.Microseconds())
	return id
}

// Finished workflows older than WorkflowRetention go, each with its tasks,
// edges and signals, in bounded batches; recent and running ones stay,
// however old the running one is.
func TestRetentionWorkflows(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	var old []int64
	for i := range 5 {
		old = append(old, workflowAt(t, db, fmt.Sprintf("old-%d", i), 8*24*time.Hour, false))
	}
	recent := workflowAt(t, db, "recent", 6*24*time.Hour, false)
	running := workflowAt(t, db, "running", 30*24*time.Hour, true)

	r := NewRetention(RetentionConfig{DB: db.Pool, Schema: db.Schema, WorkflowRetention: 7 * 24 * time.Hour,
		WorkflowBatch: 2})
	require.Len(t, r.Services(), 2, "the workflow pass runs, beside the held-keys pass")
	got, err := r.PurgeWorkflows(ctx)
	require.NoError(t, err)
	require.Equal(t, PurgeStats{Purged: 5, Batches: 3}, got, "three bounded batches")
	require.Equal(t, int64(0), retCount(t, db, `SELECT count(*) FROM skiplock.workflows WHERE id = ANY ($1)`, old))
	require.Equal(t, int64(0), retCount(t, db, `SELECT count(*) FROM skiplock.workflow_tasks WHERE workflow_id = ANY ($1)`, old))
	require.Equal(t, int64(0), retCount(t, db, `SELECT count(*) FROM skiplock.signals WHERE workflow_id = ANY ($1)`, old))
	require.Equal(t, int64(2), retCount(t, db, `SELECT count(*) FROM skiplock.workflow_deps`), "the kept workflows' edges stay")
	require.Equal(t, int64(2), retCount(t, db, `SELECT count(*) FROM skiplock.workflows WHERE id IN ($1, $2)`, recent, running))

	off := NewRetention(RetentionConfig{DB: db.Pool, Schema: db.Schema, WorkflowRetention: -1})
	require.Len(t, off.Services(), 1, "only the held-keys pass runs")
	got, err = off.PurgeWorkflows(ctx)
	require.NoError(t, err)
	require.Equal(t, PurgeStats{}, got)
}

// While another process holds a pass's lock, a pass does nothing and says so.
func TestRetentionLockTaken(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	insertDeadAt(t, db, 10, 1, 40*24*time.Hour)
	r := NewRetention(RetentionConfig{DB: db.Pool, Schema: db.Schema, Archive: true, CompletedRetention: time.Hour,
		DeadLetterRetention: 24 * time.Hour})

	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0)), pg_advisory_xact_lock(hashtextextended($2, 0))`,
		RetentionLockKey(db.Schema, "dead_letters"), RetentionLockKey(db.Schema, "partitions"))
	require.NoError(t, err)

	ds, err := r.PurgeDeadLetters(ctx)
	require.NoError(t, err)
	require.Equal(t, DeadLetterStats{Skipped: true}, ds)
	ps, err := r.MaintainPartitions(ctx)
	require.NoError(t, err)
	require.Equal(t, PartitionStats{Skipped: true}, ps)
	require.Equal(t, int64(10), retCount(t, db, `SELECT count(*) FROM skiplock.jobs_dead`))

	// Another schema's lock is another key.
	other := NewRetention(RetentionConfig{DB: db.Pool, Schema: "other", DeadLetterRetention: 24 * time.Hour})
	_, err = other.PurgeDeadLetters(ctx)
	require.ErrorIs(t, err, health.ErrNotMigrated, "not skipped: it ran (and found no such schema)")

	require.NoError(t, tx.Rollback(ctx))
	ds, err = r.PurgeDeadLetters(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(10), ds.Purged)
}

// Two processes running retention at once neither fail nor double-count.
func TestRetentionConcurrent(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	insertDeadAt(t, db, 3000, 1, 40*24*time.Hour)
	dayPartition(t, db, 20, 10)
	cfg := RetentionConfig{DB: db.Pool, Schema: db.Schema, Archive: true, PartitionsAhead: 3,
		CompletedRetention: 7 * 24 * time.Hour, DeadLetterRetention: 30 * 24 * time.Hour, DeadLetterBatch: 100}
	rs := []*Retention{NewRetention(cfg), NewRetention(cfg)}

	var wg sync.WaitGroup
	var mu sync.Mutex
	var purged int64
	var created, dropped int
	for _, r := range rs {
		for round := 0; round < 3; round++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ds, err := r.PurgeDeadLetters(ctx)
				require.NoError(t, err)
				ps, err := r.MaintainPartitions(ctx)
				require.NoError(t, err)
				mu.Lock()
				purged += ds.Purged
				created += ps.Created
				dropped += ps.Dropped
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	// A pass that lost the lock midway leaves the rest to the next pass.
	for _, r := range rs {
		ds, err := r.PurgeDeadLetters(ctx)
		require.NoError(t, err)
		purged += ds.Purged
	}
	require.Equal(t, int64(3000), purged, "every dead letter purged exactly once")
	require.Zero(t, retCount(t, db, `SELECT count(*) FROM skiplock.jobs_dead`))
	require.Equal(t, 4, created, "today and 3 days ahead, created once")
	require.Equal(t, 1, dropped)
}

// The services run a pass at start and stop cleanly.
func TestRetentionService(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	insertDeadAt(t, db, 5, 1, 40*24*time.Hour)
	r := NewRetention(RetentionConfig{DB: db.Pool, Schema: db.Schema, Archive: true,
		CompletedRetention: 7 * 24 * time.Hour, DeadLetterRetention: 30 * 24 * time.Hour})
	require.Len(t, r.Services(), 4, "partitions, dead letters, held keys and the history's summaries")
	require.NoError(t, r.Stop(ctx), "Stop before Start is a no-op")
	require.NoError(t, r.Start(ctx))
	require.NoError(t, r.Start(ctx), "Start is idempotent")
	today := "jobs_done_" + time.Now().UTC().Format("20060102")
	require.Eventually(t, func() bool {
		return retCount(t, db, `SELECT count(*) FROM skiplock.jobs_dead`) == 0 && partitionNames(t, db)[today]
	}, 10*time.Second, 20*time.Millisecond)
	require.NoError(t, r.Stop(ctx))
	require.NoError(t, r.Stop(ctx))
}

// The records of job actions (migration 018) are kept a week: older ones
// go in bounded batches, recent ones stay, whatever the dead-letter
// retention.
func TestRetentionJobActions(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `INSERT INTO skiplock.job_actions (id, action, was, new_id, acted_at)
		SELECT g, 'retry', 'dead', g + 100000, now() - interval '8 days' FROM generate_series(1, 25) AS g`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `INSERT INTO skiplock.job_actions (id, action, was, acted_at)
		VALUES (500, 'cancel', 'scheduled', now() - interval '6 days')`)
	require.NoError(t, err)
	r := NewRetention(RetentionConfig{DB: db.Pool, Schema: db.Schema, DeadLetterRetention: -1, DeadLetterBatch: 10})
	st, err := r.PurgeJobActions(ctx)
	require.NoError(t, err)
	require.Equal(t, PurgeStats{Purged: 25, Batches: 3}, st)
	require.Equal(t, int64(1), retCount(t, db, `SELECT count(*) FROM skiplock.job_actions`), "the recent record stays")
}

// Unique-key holds (migration 019) go once their period or window has
// ended, in bounded batches; a hold still running stays.
func TestPurgeUniqueKeysTakesOnlyEndedHolds(t *testing.T) {
	db := dbtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `INSERT INTO skiplock.unique_keys (queue, unique_key, held_until, job_id)
		SELECT 'q', 'old-' || i, now() - interval '1 minute', i FROM generate_series(1, 5) AS i;
		INSERT INTO skiplock.unique_keys (queue, unique_key, held_until, job_id)
		VALUES ('q', 'held', now() + interval '1 hour', 6)`)
	require.NoError(t, err)

	r := NewRetention(RetentionConfig{DB: db.Pool, Schema: db.Schema, DeadLetterBatch: 2})
	got, err := r.PurgeUniqueKeys(ctx)
	require.NoError(t, err)
	require.Equal(t, PurgeStats{Purged: 5, Batches: 3}, got, "three bounded batches")
	var left []string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT array_agg(unique_key) FROM skiplock.unique_keys`).Scan(&left))
	require.Equal(t, []string{"held"}, left, "a hold that has not ended stays")
}

// The history's BRIN index is summarized by the retention's own pass
// (migration 025 took the job from autovacuum): the whole ranges filled
// since the last pass, once; a pass over nothing new summarizes nothing. A
// role that may not run summarize_done is told once, and the pass stops
// trying without failing.
func TestSummarizeHistory(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	r := NewRetention(RetentionConfig{DB: db.Pool, Schema: db.Schema, Archive: true})
	_, err := r.MaintainPartitions(ctx)
	require.NoError(t, err)
	// About 3,000 rows of 250 B today: a few ranges of 16 pages.
	retExec(t, db, `INSERT INTO skiplock.jobs_done (id, priority, attempts, run_at, created_at, finished_at, queue, kind, payload)
		SELECT g, 0, 1, now(), now(), now(), 'q', 'k', jsonb_build_object('pad', repeat('x', 200)) FROM generate_series(1, 3000) AS g`)
	n, err := r.SummarizeHistory(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, 3, "the whole ranges filled")
	unsummarized := retCount(t, db, fmt.Sprintf(`SELECT count(*) FROM generate_series(0, %d) AS r
		WHERE brin_summarize_range(format('skiplock.jobs_done_%%s_id_idx', to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD'))::regclass, r * 16) > 0`, n-1))
	require.Zero(t, unsummarized, "every range the pass counted is summarized")
	n, err = r.SummarizeHistory(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "nothing new")

	role := fmt.Sprintf("skiplock_summarize_%d", time.Now().UnixNano()) // roles are the cluster's
	retExec(t, db, `CREATE ROLE `+role)
	t.Cleanup(func() { _, _ = db.Pool.Exec(context.Background(), `DROP ROLE IF EXISTS `+role) })
	retExec(t, db, `GRANT USAGE ON SCHEMA skiplock TO `+role)
	conn, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `SET ROLE `+role)
	require.NoError(t, err)
	defer func() { _, _ = conn.Exec(context.Background(), `RESET ROLE`) }()
	var logs strings.Builder
	reader := NewRetention(RetentionConfig{DB: conn, Schema: db.Schema, Archive: true,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	for range 2 {
		n, err = reader.SummarizeHistory(ctx)
		require.NoError(t, err)
		require.Zero(t, n)
	}
	require.Equal(t, 1, strings.Count(logs.String(), "may not summarize"), logs.String())
}
