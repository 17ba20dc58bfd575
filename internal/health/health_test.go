package health_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/health"
	"github.com/skiplock/skiplock/internal/store"
)

// insertReady inserts n ready jobs in queue whose run_at is offset from now.
func insertReady(t *testing.T, db *dbtest.DB, queue, kind string, n int, offset time.Duration) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), `INSERT INTO skiplock.jobs (queue, kind, run_at, payload)
		SELECT $1, $2, now() + $3::bigint * interval '1 microsecond', '{"secret":"pii"}' FROM generate_series(1, $4)`,
		queue, kind, offset.Microseconds(), n)
	require.NoError(t, err)
}

// insertRunning inserts n running jobs whose lease expires at now + lease.
func insertRunning(t *testing.T, db *dbtest.DB, queue, kind string, n int, startedAgo, lease time.Duration) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), `INSERT INTO skiplock.jobs
		(queue, kind, state, attempts, locked_by, lease_token, lease_expires_at, attempted_at, payload)
		SELECT $1, $2, 'running', 1, 'host:1:abcd', g, now() + $3::bigint * interval '1 microsecond',
		       now() - $4::bigint * interval '1 microsecond', '{"secret":"pii"}'
		FROM generate_series(1, $5) AS g`,
		queue, kind, lease.Microseconds(), startedAgo.Microseconds(), n)
	require.NoError(t, err)
}

// insertDead inserts n dead letters with errors produced by errf(i), dead
// deadAgo ago.
func insertDead(t *testing.T, db *dbtest.DB, queue, kind string, n int, deadAgo time.Duration, errf func(i int) string) []int64 {
	t.Helper()
	ctx := context.Background()
	var ids []int64
	for i := 0; i < n; i++ {
		var id int64
		err := db.Pool.QueryRow(ctx, `INSERT INTO skiplock.jobs_dead
			(id, priority, attempts, max_attempts, run_at, created_at, dead_at, queue, kind, reason, last_error, payload)
			VALUES ((SELECT coalesce(max(id), 1000000) + 1 FROM skiplock.jobs_dead), 0, 3, 3, now() - interval '1 day', now() - interval '1 day',
			        now() - $1::bigint * interval '1 microsecond', $2, $3, 'error', $4, '{"secret":"pii"}')
			RETURNING id`, deadAgo.Microseconds(), queue, kind, errf(i)).Scan(&id)
		require.NoError(t, err)
		ids = append(ids, id)
	}
	return ids
}

// doctorCheck runs the doctor and returns its check of this name.
func doctorCheck(t *testing.T, db *dbtest.DB, name string) health.Check {
	t.Helper()
	checks, err := health.Doctor(context.Background(), db.Pool, db.Schema)
	require.NoError(t, err)
	for _, c := range checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("the doctor ran no %s check", name)
	return health.Check{}
}

func count(t *testing.T, db *dbtest.DB, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.Pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

func TestErrorSignature(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	cases := []struct{ in, want string }{
		{`pq: duplicate key value violates unique constraint "orders_pkey" (id=12345)`,
			`pq: duplicate key value violates unique constraint <str> (id=<n>)`},
		{`fetch https://api.example.com/v1/items/550e8400-e29b-41d4-a716-446655440000: 503`,
			`fetch https://api.example.com/v<n>/items/<uuid>: <n>`},
		{"token deadbeef01 invalid at 0x7ffA\n\tgoroutine 1 [running]:\nmain.main()", `token <hex> invalid at <hex>`},
		{`user 123456 missing; acceptable facade cafe42 'Baker St 221b'`, `user <n> missing; acceptable facade <hex> <str>`},
		{"  spaced \t out   1.5s  ", `spaced out <n>s`},
		{"", ""},
		{strings.Repeat("x", 1000), strings.Repeat("x", 200)},
	}
	for _, c := range cases {
		got, err := health.ErrorSignature(context.Background(), db.Pool, "skiplock", c.in)
		require.NoError(t, err)
		require.Equal(t, c.want, got, c.in)
		var again string
		require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT skiplock.error_signature($1)`, got).Scan(&again))
		require.Equal(t, got, again, "error_signature is idempotent")
	}
	var null string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT skiplock.error_signature(NULL)`).Scan(&null))
	require.Equal(t, "", null)
}

func TestQueueStats(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	insertReady(t, db, "a", "k", 3, -90*time.Second)
	insertReady(t, db, "a", "k", 2, time.Hour)
	insertRunning(t, db, "a", "k", 4, time.Minute, time.Minute)
	insertReady(t, db, "b", "k", 1, -time.Second)
	insertDead(t, db, "b", "k", 2, time.Minute, func(int) string { return "boom" })
	insertDead(t, db, "gone", "k", 1, time.Minute, func(int) string { return "boom" })
	_, err := db.Pool.Exec(ctx, `INSERT INTO skiplock.queues (name, paused) VALUES ('c', true)`)
	require.NoError(t, err)

	stats, err := health.QueueStats(ctx, db.Pool, db.Schema)
	require.NoError(t, err)
	require.Len(t, stats, 4)
	byQ := map[string]health.QueueStat{}
	for _, s := range stats {
		byQ[s.Queue] = s
	}
	a := byQ["a"]
	require.Equal(t, [4]int64{3, 2, 4, 0}, [4]int64{a.Ready, a.Scheduled, a.Running, a.Dead})
	require.InDelta(t, 90, a.OldestReadyAgeSeconds, 5)
	require.False(t, a.Paused)
	b := byQ["b"]
	require.Equal(t, [4]int64{1, 0, 0, 2}, [4]int64{b.Ready, b.Scheduled, b.Running, b.Dead})
	require.Equal(t, health.QueueStat{Queue: "gone", Dead: 1}, byQ["gone"])
	require.Equal(t, health.QueueStat{Queue: "c", Paused: true}, byQ["c"])

	_, err = health.QueueStats(ctx, db.Pool, "Bad Schema")
	require.ErrorContains(t, err, "schema")
}

// TestQueueStatsPlan checks the view stays cheap: the hot table and the
// dead-letter table are read through their indexes, even with a backlog
// large enough for the planner to prefer a sequential scan, and the
// history is never read.
func TestQueueStatsPlan(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	insertReady(t, db, "big", "k", 20000, -time.Minute)
	insertReady(t, db, "small", "k", 10, -time.Minute)
	insertRunning(t, db, "big", "k", 50, time.Second, time.Minute)
	_, err := db.Pool.Exec(ctx, `INSERT INTO skiplock.jobs_dead
		(id, priority, attempts, max_attempts, run_at, created_at, queue, kind, reason, last_error, payload)
		SELECT g, 0, 1, 1, now(), now(), 'big', 'k', 'error', 'e', '{}' FROM generate_series(1, 5000) AS g`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `ANALYZE skiplock.jobs; ANALYZE skiplock.jobs_dead`)
	require.NoError(t, err)

	// The view reads a function that plans with enable_seqscan = off; plan
	// its body the same way.
	var body string
	var setting []string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT prosrc, proconfig FROM pg_proc
		WHERE oid = 'skiplock.queue_stats_rows()'::regprocedure`).Scan(&body, &setting))
	require.Equal(t, []string{"enable_seqscan=off"}, setting)
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SET LOCAL enable_seqscan = off`)
	require.NoError(t, err)
	plan := dbtest.Explain(t, tx, "EXPLAIN "+body)
	require.NotContains(t, plan, "Seq Scan on jobs ", plan)
	require.NotContains(t, plan, "Seq Scan on jobs_dead", plan)
	require.NotContains(t, plan, "jobs_done", plan)
	require.Contains(t, plan, "jobs_ready", plan)
	require.Contains(t, plan, "using jobs_running on jobs", plan)
	require.Contains(t, plan, "using jobs_dead_queue on jobs_dead", plan)
}

func TestVacuumAndXminHolders(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	v, err := health.Vacuum(ctx, db.Pool, db.Schema)
	require.NoError(t, err)
	require.Zero(t, v.OldestXminPID)
	require.Contains(t, v.Reloptions, "fillfactor=80")
	require.Greater(t, v.AutovacuumThreshold, 0.0)

	// An open REPEATABLE READ transaction that took its snapshot pins xmin.
	cfg, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.RuntimeParams["application_name"] = "long-report"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer conn.Close(ctx)
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var pid int
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))

	v, err = health.Vacuum(ctx, db.Pool, db.Schema)
	require.NoError(t, err)
	require.Equal(t, pid, v.OldestXminPID)
	require.Equal(t, "long-report", v.OldestXminApp)
	require.Greater(t, v.OldestXminAgeSeconds, 0.0)

	hs, err := health.XminHolders(ctx, db.Pool, db.Schema, 5)
	require.NoError(t, err)
	require.NotEmpty(t, hs)
	require.Equal(t, "backend", hs[0].Holder)
	require.Equal(t, pid, hs[0].PID)
	require.Equal(t, "idle in transaction", hs[0].State)
	require.NotEmpty(t, hs[0].Xmin)
}

func TestLongRunnersWaitAndWorkers(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	insertRunning(t, db, "q", "slow", 1, 10*time.Minute, time.Minute)
	insertRunning(t, db, "q", "stuck", 1, time.Hour, -30*time.Minute)
	insertReady(t, db, "q", "k", 100, -time.Minute)

	lr, err := health.LongRunners(ctx, db.Pool, db.Schema, 10)
	require.NoError(t, err)
	require.Len(t, lr, 2)
	require.Equal(t, "stuck", lr[0].Kind, "longest first")
	require.True(t, lr[0].LeaseExpired)
	require.InDelta(t, 3600, lr[0].RuntimeSeconds, 10)
	require.Equal(t, "slow", lr[1].Kind)
	require.False(t, lr[1].LeaseExpired)
	require.Equal(t, "host:1:abcd", lr[1].LockedBy)

	ws, err := health.WaitP99(ctx, db.Pool, db.Schema)
	require.NoError(t, err)
	require.Len(t, ws, 1)
	require.Equal(t, int64(100), ws[0].Sampled)
	require.InDelta(t, 60, ws[0].WaitP99Seconds, 5)

	_, err = db.Pool.Exec(ctx, `INSERT INTO skiplock.workers (id, hostname, pid, queues, concurrency, running,
		claimed_total, completed_total, failed_total, claim_p99_ms, heartbeat_at, stopped_at) VALUES
		('w1', 'h', 1, '{q}', 10, 2, 100, 95, 3, 1.5, now(), NULL),
		('w0', 'h', 2, '{q}', 10, 0, 5, 5, 0, NULL, now() - interval '1 hour', NULL),
		('w2', 'h', 3, '{q}', 10, 0, 7, 7, 0, NULL, now(), now())`)
	require.NoError(t, err)
	w, err := health.Workers(ctx, db.Pool, db.Schema)
	require.NoError(t, err)
	require.Len(t, w, 3)
	require.Equal(t, "w1", w[0].ID)
	require.True(t, w[0].Live)
	require.Equal(t, []string{"q"}, w[0].Queues)
	require.Equal(t, int64(100), w[0].Claimed)
	require.NotNil(t, w[0].ClaimP99MS)
	require.InDelta(t, 1.5, *w[0].ClaimP99MS, 1e-9)
	for _, x := range w[1:] {
		require.False(t, x.Live, x.ID)
	}
	tot, err := health.WorkerTotalsOf(ctx, db.Pool, db.Schema)
	require.NoError(t, err)
	require.Equal(t, health.WorkerTotals{Live: 1, Stale: 1, Stopped: 1, Claimed: 112, Completed: 107, Failed: 3}, tot)
}

func TestDeadLetterGroupsAndSize(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	syncIDs := insertDead(t, db, "q", "sync", 5, time.Hour, func(i int) string {
		return fmt.Sprintf("carrier %d: timeout after %dms\nstack trace", 1000+i, 30000+i)
	})
	insertDead(t, db, "q", "sync", 2, 30*time.Hour, func(i int) string { return fmt.Sprintf(`bad reply "%c"`, 'a'+i) })
	insertDead(t, db, "q", "mail", 1, 100*time.Hour, func(int) string { return "smtp 550" })

	gs, err := health.DeadLetterGroups(ctx, db.Pool, db.Schema, "", 10)
	require.NoError(t, err)
	require.Len(t, gs, 3)
	require.Equal(t, "sync", gs[0].Kind)
	require.Equal(t, "carrier <n>: timeout after <n>ms", gs[0].Signature)
	require.Equal(t, int64(5), gs[0].Count)
	require.Equal(t, "carrier 1004: timeout after 30004ms", gs[0].SampleError, "newest sample, first line only")
	require.Equal(t, syncIDs[4], gs[0].SampleID, "sample id is the newest dead letter's")
	require.False(t, gs[0].First.After(gs[0].Last))
	require.Equal(t, "bad reply <str>", gs[1].Signature)

	gs, err = health.DeadLetterGroups(ctx, db.Pool, db.Schema, "mail", 10)
	require.NoError(t, err)
	require.Len(t, gs, 1)
	require.Equal(t, "smtp <n>", gs[0].Signature)

	s, err := health.DeadLetterSizeOf(ctx, db.Pool, db.Schema)
	require.NoError(t, err)
	require.Equal(t, health.DeadLetterSize{Total: 8, Last24h: 5, Prev24h: 2}, s)

	days, err := health.DeadLetterDaily(ctx, db.Pool, db.Schema, 7)
	require.NoError(t, err)
	var sum int64
	for _, d := range days {
		sum += d.Count
	}
	require.Equal(t, int64(8), sum)
}

// The write side of the dead-letter table and the jobs_done partition DDL
// live in internal/store; they are tested here, beside the read-side
// figures that share their fixtures (insertDead, count, DonePartitions).

// st is the data layer's statements for db's schema.
func st(db *dbtest.DB) *store.Store { return store.New(db.Schema) }

func TestReplayDead(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	listener, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer listener.Close(ctx)
	_, err = listener.Exec(ctx, `LISTEN "skiplock.jobs"`)
	require.NoError(t, err)

	insertDead(t, db, "q", "sync", 12, time.Hour, func(i int) string { return fmt.Sprintf("timeout %d", i) })
	insertDead(t, db, "q", "mail", 3, time.Hour, func(i int) string { return "smtp 550" })

	_, err = st(db).ReplayDead(ctx, db.Pool, store.ReplayFilter{}, 0, nil)
	require.ErrorIs(t, err, store.ErrEmptyFilter)

	var calls []int
	start := time.Now()
	n, err := st(db).ReplayDead(ctx, db.Pool, store.ReplayFilter{Kind: "sync", Limit: 10}, 50, func(done int) {
		calls = append(calls, done)
	})
	require.NoError(t, err)
	require.Equal(t, 10, n)
	require.Equal(t, 10, calls[len(calls)-1])
	require.Greater(t, len(calls), 1, "a trickle, in several batches")
	require.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond, "at 50/s the second batch of 5 waits 0.1s")
	require.Equal(t, int64(10), count(t, db, `SELECT count(*) FROM skiplock.jobs WHERE kind = 'sync' AND attempts = 0 AND state = 'ready'`))
	require.Equal(t, int64(2), count(t, db, `SELECT count(*) FROM skiplock.jobs_dead WHERE kind = 'sync'`))

	nctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	note, err := listener.WaitForNotification(nctx)
	require.NoError(t, err)
	require.Equal(t, "q", note.Payload, "the queue is woken")

	// By signature (a raw error works too) and by id.
	n, err = st(db).ReplayDead(ctx, db.Pool, store.ReplayFilter{Signature: "smtp 421"}, 0, nil)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	ids := insertDead(t, db, "q", "x", 3, time.Minute, func(int) string { return "e" })
	n, err = st(db).ReplayDead(ctx, db.Pool, store.ReplayFilter{IDs: ids[:2]}, 0, nil)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, int64(1), count(t, db, `SELECT count(*) FROM skiplock.jobs_dead WHERE kind = 'x'`))
}

// TestReplayRace: two replays racing over the same dead letters create
// exactly one job per dead letter.
func TestReplayRace(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `INSERT INTO skiplock.jobs_dead
		(id, priority, attempts, max_attempts, run_at, created_at, queue, kind, reason, last_error, payload)
		SELECT g, 0, 3, 3, now(), now(), 'q', 'k', 'error', 'boom', '{}' FROM generate_series(1, 2000) AS g`)
	require.NoError(t, err)
	var wg sync.WaitGroup
	got := make([]int, 4)
	errs := make([]error, 4)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = st(db).ReplayDead(ctx, db.Pool, store.ReplayFilter{Kind: "k"}, 0, nil)
		}()
	}
	wg.Wait()
	total := 0
	for i := range got {
		require.NoError(t, errs[i])
		total += got[i]
	}
	require.Equal(t, 2000, total)
	require.Equal(t, int64(2000), count(t, db, `SELECT count(*) FROM skiplock.jobs`))
	require.Zero(t, count(t, db, `SELECT count(*) FROM skiplock.jobs_dead`))
}

func TestReplayUniqueKeyInFlight(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `INSERT INTO skiplock.jobs_dead
		(id, priority, attempts, max_attempts, run_at, created_at, dead_at, queue, kind, reason, unique_key, last_error, payload) VALUES
		(1, 0, 3, 3, now(), now(), now() - interval '2 min', 'q', 'k', 'error', 'busy', 'e', '{}'),
		(2, 0, 3, 3, now(), now(), now() - interval '1 min', 'q', 'k', 'error', 'twice', 'e', '{"v":1}'),
		(3, 0, 3, 3, now(), now(), now(), 'q', 'k', 'error', 'twice', 'e', '{"v":2}')`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `SELECT skiplock.enqueue(queue => 'q', kind => 'k', unique_key => 'busy')`)
	require.NoError(t, err)

	n, err := st(db).ReplayDead(ctx, db.Pool, store.ReplayFilter{Kind: "k"}, 0, nil)
	require.NoError(t, err)
	require.Equal(t, 1, n, "only one of the two dead jobs sharing a key; none whose key is in flight")
	var payload string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT payload::text FROM skiplock.jobs WHERE unique_key = 'twice'`).Scan(&payload))
	require.JSONEq(t, `{"v":2}`, payload, "the newest dead job of a key is replayed")
	require.Equal(t, int64(2), count(t, db, `SELECT count(*) FROM skiplock.jobs_dead`))
}

func TestPurgeDead(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	insertDead(t, db, "q", "old", 3, 40*24*time.Hour, func(int) string { return "e" })
	insertDead(t, db, "q", "new", 4, time.Hour, func(i int) string { return fmt.Sprintf("id %d gone", i) })
	insertDead(t, db, "q", "other", 2, time.Hour, func(int) string { return "x" })

	_, err := st(db).PurgeDead(ctx, db.Pool, store.ReplayFilter{})
	require.ErrorIs(t, err, store.ErrEmptyFilter)

	n, err := st(db).PurgeDeadOlderThan(ctx, db.Pool, 30*24*time.Hour)
	require.NoError(t, err)
	require.Equal(t, int64(3), n)

	n, err = st(db).PurgeDead(ctx, db.Pool, store.ReplayFilter{Kind: "new", Signature: "id <n> gone", Limit: 3})
	require.NoError(t, err)
	require.Equal(t, int64(3), n)
	c, err := st(db).CountDead(ctx, db.Pool, store.ReplayFilter{})
	require.NoError(t, err)
	require.Equal(t, int64(3), c)

	n, err = st(db).PurgeDeadBatch(ctx, db.Pool, time.Minute, 1)
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
}

func TestDonePartitions(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	n, err := st(db).EnsureDonePartitions(ctx, db.Pool, 3)
	require.NoError(t, err)
	require.Equal(t, 4, n, "today and three days ahead")
	n, err = st(db).EnsureDonePartitions(ctx, db.Pool, 3)
	require.NoError(t, err)
	require.Zero(t, n, "idempotent")

	// A row archived into a day without a partition lands in the default
	// partition and is moved out by the next ensure.
	_, err = db.Pool.Exec(ctx, `INSERT INTO skiplock.jobs_done
		(id, priority, attempts, run_at, created_at, finished_at, queue, kind, payload)
		VALUES (1, 0, 1, now(), now(), now() - interval '10 days', 'q', 'k', '{}')`)
	require.NoError(t, err)
	require.Equal(t, int64(1), count(t, db, `SELECT count(*) FROM skiplock.jobs_done_default`))
	n, err = st(db).EnsureDonePartitions(ctx, db.Pool, 3)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Zero(t, count(t, db, `SELECT count(*) FROM skiplock.jobs_done_default`))
	require.Equal(t, int64(1), count(t, db, `SELECT count(*) FROM skiplock.jobs_done`))

	parts, err := health.DonePartitions(ctx, db.Pool, db.Schema)
	require.NoError(t, err)
	require.Len(t, parts, 6, "five days and the default")
	old := "jobs_done_" + time.Now().UTC().AddDate(0, 0, -10).Format("20060102")
	require.Equal(t, old, parts[0].Name)

	n, err = st(db).DropDonePartitions(ctx, db.Pool, 7*24*time.Hour)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Zero(t, count(t, db, `SELECT count(*) FROM skiplock.jobs_done`))
	require.Zero(t, count(t, db, `SELECT count(*) FROM pg_class WHERE relname = $1`, old))

	_, err = st(db).EnsureDonePartitions(ctx, db.Pool, -1)
	require.ErrorContains(t, err, "days_ahead")
	_, err = st(db).DropDonePartitions(ctx, db.Pool, -time.Hour)
	require.ErrorContains(t, err, "keep")
}

func TestNotMigrated(t *testing.T) {
	t.Parallel()
	db := dbtest.NewEmpty(t)
	_, err := health.QueueStats(context.Background(), db.Pool, "skiplock")
	require.ErrorIs(t, err, health.ErrNotMigrated)
	checks, err := health.Doctor(context.Background(), db.Pool, "skiplock")
	require.NoError(t, err)
	require.Len(t, checks, 1)
	require.Equal(t, "schema", checks[0].Name)
	require.Equal(t, health.StatusFail, checks[0].Status)
	require.True(t, health.Failed(checks))
}

// The fenced_writes check fires when a fenced write leaves the primary key:
// on a table of more than a few pages, with index scans switched off for
// the doctor's session, the writes fall back to bitmap or sequential scans
// and the check fails and says which; with them on, it passes.
func TestDoctorFencedWrites(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `INSERT INTO skiplock.jobs (queue, kind, payload)
		SELECT 'q', 'k', jsonb_build_object('pad', repeat('x', 200)) FROM generate_series(1, 20000);
		ANALYZE skiplock.jobs`)
	require.NoError(t, err)
	conn, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	fenced := func() health.Check {
		checks, err := health.Doctor(ctx, conn, db.Schema)
		require.NoError(t, err)
		for _, c := range checks {
			if c.Name == "fenced_writes" {
				return c
			}
		}
		t.Fatal("no fenced_writes check")
		return health.Check{}
	}
	c := fenced()
	require.Equal(t, health.StatusOK, c.Status, c.Figure)
	require.Contains(t, c.Figure, "all 15 fenced writes reach their rows through jobs_pkey")

	_, err = conn.Exec(ctx, "SET enable_indexscan = off")
	require.NoError(t, err)
	c = fenced()
	require.Equal(t, health.StatusFail, c.Status, c.Figure)
	require.Contains(t, c.Figure, "complete_delete reads ")
	require.Contains(t, c.Fix, "ANALYZE")
}

func TestDoctorHealthy(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	insertReady(t, db, "q", "k", 5, 0)
	checks, err := health.Doctor(context.Background(), db.Pool, db.Schema)
	require.NoError(t, err)
	// Some CI servers run with autovacuum = off for the whole cluster; the
	// doctor must call that out, and it is the only failure allowed here.
	var autovacuum string
	require.NoError(t, db.Pool.QueryRow(context.Background(), "SHOW autovacuum").Scan(&autovacuum))
	names := []string{}
	foreignPin := false
	for _, c := range checks {
		names = append(names, c.Name)
		require.NotEmpty(t, c.Figure, c.Name)
		if c.Name == "table_settings" && autovacuum == "off" {
			require.Equal(t, health.StatusFail, c.Status)
			require.Contains(t, c.Figure, "autovacuum = off")
			require.Equal(t, "Set autovacuum = on in postgresql.conf and reload.", c.Fix,
				"the table's settings are intact: the fix is the server's alone")
			continue
		}
		if c.Name == "xmin_horizon" && c.Pin != nil && c.Pin.Holder != nil && c.Pin.Holder.OtherDatabase {
			// Another session on this shared server holds an xid: that pins
			// this database too, and the doctor rightly says so.
			foreignPin = c.Status == health.StatusFail
			continue
		}
		require.NotEqual(t, health.StatusFail, c.Status, "%s: %s", c.Name, c.Figure)
	}
	require.Equal(t, []string{"schema", "queue_lag", "dead_tuples", "table_settings", "claim_index", "fenced_writes",
		"xmin_horizon", "notify_queue", "stuck_jobs", "workers", "unhandled_kinds", "orphan_schedules", "dead_letters", "limits"}, names)
	require.Equal(t, autovacuum == "off" || foreignPin, health.Failed(checks))
	for _, c := range checks {
		if c.Name == "claim_index" {
			require.Contains(t, c.Figure, "using jobs_ready on jobs")
		}
	}
}

// A full concurrency limit whose due jobs have waited over five minutes is
// named by doctor's limits check, with the way out.
func TestDoctorNamesALimitHoldingJobsBack(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `
		INSERT INTO skiplock.limits (name, kind, concurrency) VALUES ('email', 'send', 1);
		INSERT INTO skiplock.jobs (queue, kind, state, locked_by, lease_token, lease_expires_at)
		VALUES ('default', 'send', 'running', 'w', 1, now() + interval '1 hour');
		INSERT INTO skiplock.jobs (queue, kind, run_at) VALUES ('default', 'send', now() - interval '10 minutes');`)
	require.NoError(t, err)
	c := doctorCheck(t, db, "limits")
	require.Equal(t, health.StatusWarn, c.Status, "%+v", c)
	require.Contains(t, c.Figure, "email (1 running, 1 value(s) at its limit of 1, oldest due job waiting 10m")
	require.Contains(t, c.Fix, "skiplock limit set")
}

// Ready jobs heavier than a rate limit's rate can never start under it:
// doctor's limits check names the limit, how many and which, with the way
// out.
func TestDoctorNamesJobsTooHeavyForARateLimit(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `
		INSERT INTO skiplock.limits (name, kind, rate, per) VALUES ('partner', 'call', 10, interval '1 minute');
		INSERT INTO skiplock.jobs (queue, kind, limit_weight) VALUES ('default', 'call', 11), ('default', 'call', 10);`)
	require.NoError(t, err)
	c := doctorCheck(t, db, "limits")
	require.Equal(t, health.StatusWarn, c.Status, "%+v", c)
	var heavy int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT id FROM skiplock.jobs WHERE limit_weight = 11`).Scan(&heavy))
	require.Contains(t, c.Figure, fmt.Sprintf("jobs that can never start: partner (1 ready job(s) weigh more than its rate of 10: ids %d)", heavy))
	require.Contains(t, c.Fix, "--limit-weight")
}
