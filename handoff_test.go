package skiplock_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/store"
)

// ran is what a hand-off test's handler saw of one run.
type ran struct {
	id      int64
	attempt int
}

// handOffClient starts a client with one pool of queue "q" (concurrency
// 2) whose handlers report each run on the returned channel: kind "run"
// (and "other", which the pool's kinds filter leaves out when kinds says
// so).
func handOffClient(t *testing.T, db *dbtest.DB, cfg skiplock.Config, kinds []string) (*skiplock.Client, chan ran) {
	t.Helper()
	cfg.Logger = quietLogger()
	cfg.Pools = []skiplock.WorkerPool{{Queues: []string{"q"}, Concurrency: 2, Kinds: kinds}}
	c := newClient(t, db.Pool, cfg)
	runs := make(chan ran, 64)
	for _, kind := range []string{"run", "other"} {
		require.NoError(t, skiplock.Handle(c, kind, func(ctx context.Context, j *skiplock.Job[json.RawMessage]) error {
			runs <- ran{j.ID, j.Attempt}
			return nil
		}))
	}
	require.NoError(t, c.Start(context.Background()))
	return c, runs
}

// enqueueHandedOff enqueues plain "run" jobs into q, one at a time, each
// after the last ran and the pool had a moment to wait idle again, until one
// is handed off (a pool still claiming, or finishing the last job, takes
// none); it returns that job's id.
func enqueueHandedOff(t *testing.T, c *skiplock.Client, runs chan ran) int64 {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < 50; i++ {
		before := c.Stats().HandedOff
		r, err := c.Enqueue(ctx, skiplock.EnqueueParams{Queue: "q", Kind: "run"})
		require.NoError(t, err)
		got := recvRun(t, runs)
		require.Equal(t, r.ID, got.id)
		require.Equal(t, 1, got.attempt)
		if c.Stats().HandedOff > before {
			return r.ID
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no job was handed off in 50 enqueues to an idle pool")
	return 0
}

// waitIdle waits until c's pool of queue's kind jobs waits idle, so a job
// enqueued next finds it parked: one not handed off then was refused by
// the hand-off's rules, not missed by a pool still busy.
func waitIdle(t *testing.T, c *skiplock.Client, queue, kind string) {
	t.Helper()
	require.Eventually(t, func() bool { return skiplock.IdleFor(c, queue, kind) }, 20*time.Second, 5*time.Millisecond,
		"the pool of %s/%s never waited idle", queue, kind)
}

func recvRun(t *testing.T, runs chan ran) ran {
	t.Helper()
	select {
	case r := <-runs:
		return r
	case <-time.After(15 * time.Second):
		t.Fatal("no job ran")
		return ran{}
	}
}

// A job enqueued by the client whose pool waits idle is claimed in the
// enqueue's transaction and run once, without a claim of the pool's own,
// and finishes like any other: in the history, completed at attempt 1.
// Jobs that must not skip the claim are enqueued for any claimer: with an
// entity, a unique key, a later run time, in the caller's transaction, of
// a kind the pool does not claim, into a paused queue (the claim in the
// enqueue's transaction finds it paused; the job waits, and runs once the
// queue is resumed).
func TestEnqueueHandsOffToAnIdlePool(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c, runs := handOffClient(t, db, skiplock.Config{}, []string{"run"})

	id := enqueueHandedOff(t, c, runs)
	rec := getEventually(t, c, id, skiplock.JobStateCompleted)
	require.Equal(t, 1, rec.Attempt)
	claimed := c.Stats().Claimed

	notHanded := func(p skiplock.EnqueueParams) int64 {
		t.Helper()
		waitIdle(t, c, "q", "run")
		before := c.Stats().HandedOff
		r, err := c.Enqueue(ctx, p)
		require.NoError(t, err)
		require.Equal(t, before, c.Stats().HandedOff, "%+v was handed off", p)
		return r.ID
	}
	for _, p := range []skiplock.EnqueueParams{
		{Queue: "q", Kind: "run", Entity: "account-1"},
		{Queue: "q", Kind: "run", UniqueKey: "once"},
		{Queue: "q", Kind: "run", Delay: 50 * time.Millisecond},
	} {
		id := notHanded(p)
		require.Equal(t, id, recvRun(t, runs).id, "claimed by the pool")
	}
	require.Greater(t, c.Stats().Claimed, claimed)

	// In the caller's transaction: the commit is the caller's.
	waitIdle(t, c, "q", "run")
	before := c.Stats().HandedOff
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	r, err := c.EnqueueTx(ctx, tx, skiplock.EnqueueParams{Queue: "q", Kind: "run"})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, r.ID, recvRun(t, runs).id)
	require.Equal(t, before, c.Stats().HandedOff)

	// A kind the pool's filter leaves out is not offered; nothing claims it.
	other := notHanded(skiplock.EnqueueParams{Queue: "q", Kind: "other"})
	getEventually(t, c, other, skiplock.JobStateReady)

	// A paused queue: offered, not claimable, left ready; the offer is
	// released (later jobs are handed off again).
	require.NoError(t, c.QueuePause(ctx, "q"))
	paused := notHanded(skiplock.EnqueueParams{Queue: "q", Kind: "run"})
	rec = getEventually(t, c, paused, skiplock.JobStateReady)
	require.Zero(t, rec.Attempt, "not claimed")
	require.NoError(t, c.QueueResume(ctx, "q"))
	require.Equal(t, paused, recvRun(t, runs).id)
	enqueueHandedOff(t, c, runs)

	select {
	case r := <-runs:
		t.Fatalf("job %d ran twice or unasked", r.id)
	case <-time.After(100 * time.Millisecond):
	}
}

// The hand-off's window: a job claimed in its enqueue's transaction for a
// process that dies before running it (kill -9 after the commit) is
// running, leased to that worker; its lease expires, the reaper hands it
// back, and another process runs it. Nothing is lost.
func TestJobHandedOffToADeadProcessIsReapedAndRun(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	st := store.New("skiplock")
	id, inserted, j, err := st.EnqueueClaimed(ctx, db.Pool, store.EnqueueArgs{Queue: "q", Kind: "run", Payload: "{}"},
		[]string{"run"}, "dead-worker", 300*time.Millisecond)
	require.NoError(t, err)
	require.True(t, inserted)
	require.NotNil(t, j)
	require.Equal(t, id, j.ID)
	require.Equal(t, 1, j.Attempt)
	require.Equal(t, 1, countJobs(t, db.Pool, "id = $1 AND state = 'running' AND locked_by = 'dead-worker'", id))

	_, runs := handOffClient(t, db, skiplock.Config{ReaperInterval: 100 * time.Millisecond}, nil)
	got := recvRun(t, runs)
	require.Equal(t, id, got.id)
	require.Equal(t, 2, got.attempt, "the dead process's attempt is counted")
}

// The hand-off sends no wake-up for the job it claims (every listening pool
// would claim and find nothing), and sends it when its claim finds nothing
// (here: the queue paused), so that the job waits for no poll. A listener
// sees notifications in commit order: a marker sent after each enqueue
// commits is the first it sees when the enqueue sent none.
func TestHandOffWakesNoPoolForTheJobItClaims(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	st := store.New("skiplock")
	conn, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `LISTEN "skiplock.jobs"`)
	require.NoError(t, err)
	next := func() string {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		n, err := conn.WaitForNotification(wctx)
		require.NoError(t, err)
		return n.Payload
	}
	marker := func() {
		t.Helper()
		_, err := db.Pool.Exec(ctx, `SELECT pg_notify('skiplock.jobs', 'marker')`)
		require.NoError(t, err)
	}
	args := store.EnqueueArgs{Queue: "q", Kind: "run", Payload: "{}"}

	_, _, j, err := st.EnqueueClaimed(ctx, db.Pool, args, []string{"run"}, "w", time.Minute)
	require.NoError(t, err)
	require.NotNil(t, j)
	marker()
	require.Equal(t, "marker", next(), "a handed-off job wakes no pool")

	require.NoError(t, st.SetQueuePaused(ctx, db.Pool, "q", true))
	id, inserted, j, err := st.EnqueueClaimed(ctx, db.Pool, args, []string{"run"}, "w", time.Minute)
	require.NoError(t, err)
	require.True(t, inserted)
	require.Nil(t, j, "a paused queue's job is not claimed")
	require.Equal(t, 1, countJobs(t, db.Pool, "id = $1 AND state = 'ready'", id))
	marker()
	require.Equal(t, "q", next(), "a job the hand-off did not claim wakes its queue")
	require.Equal(t, "marker", next())

	// The setting is the pipeline's: a plain enqueue on the same pool wakes its queue.
	_, err = db.Pool.Exec(ctx, st.SQL("enqueue"), args.Args()...)
	require.NoError(t, err)
	require.Equal(t, "q", next())
}

// Config.NoHandOff: the same idle pool, and every job waits for its claim.
func TestNoHandOff(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	c, runs := handOffClient(t, db, skiplock.Config{NoHandOff: true}, []string{"run"})
	for i := 0; i < 3; i++ {
		waitIdle(t, c, "q", "run")
		r, err := c.Enqueue(context.Background(), skiplock.EnqueueParams{Queue: "q", Kind: "run"})
		require.NoError(t, err)
		require.Equal(t, r.ID, recvRun(t, runs).id)
	}
	require.Zero(t, c.Stats().HandedOff)
	require.GreaterOrEqual(t, c.Stats().Claimed, int64(3))
}
