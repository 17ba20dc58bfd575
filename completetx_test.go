package skiplock_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
)

// effects is the handlers' "business table": deliberately without a unique
// constraint, so a double-applied effect shows up as two rows.
func createEffects(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `CREATE TABLE effects (job_id bigint NOT NULL, worker text NOT NULL, token bigint NOT NULL)`)
	require.NoError(t, err)
}

func effectRows(t *testing.T, pool *pgxpool.Pool, jobID int64) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT worker FROM effects WHERE job_id = $1 ORDER BY worker", jobID)
	require.NoError(t, err)
	workers, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return workers
}

type effectArgs struct {
	N int `json:"n"`
}

// writeEffect is the transactional handler body: a business insert and the
// job's completion in one pgx transaction.
func writeEffect(ctx context.Context, c *skiplock.Client, j *skiplock.Job[effectArgs]) error {
	return writeEffectThen(ctx, c, j, func() {})
}

// writeEffectThen is writeEffect with beforeCommit run after the completion,
// the transaction still open.
func writeEffectThen(ctx context.Context, c *skiplock.Client, j *skiplock.Job[effectArgs], beforeCommit func()) error {
	tx, err := effectTx(ctx, c, j)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit
	beforeCommit()
	return tx.Commit(ctx)
}

// effectTx begins the handler's transaction, writes the effect and
// completes j in it; the caller ends the transaction (rolled back here on
// an error).
func effectTx(ctx context.Context, c *skiplock.Client, j *skiplock.Job[effectArgs]) (pgx.Tx, error) {
	tx, err := c.Pool().Begin(ctx)
	if err != nil {
		return nil, err
	}
	if _, err = tx.Exec(ctx, "INSERT INTO effects VALUES ($1, $2, $3)", j.ID, j.WorkerID, j.LeaseToken); err == nil {
		err = skiplock.CompleteTx(ctx, c, tx, j)
	}
	if err != nil {
		_ = tx.Rollback(ctx)
		return nil, err
	}
	return tx, nil
}

func waitNoJobs(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	require.Eventually(t, func() bool { return countJobs(t, pool, "true") == 0 }, 10*time.Second, 10*time.Millisecond)
}

func TestCompleteTxCommitCompletesOnce(t *testing.T) {
	t.Parallel()
	for _, driver := range []string{"pgx", "database/sql"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t)
			ctx := context.Background()
			createEffects(t, db.Pool)
			sqlDB, err := sql.Open("pgx", db.URL)
			require.NoError(t, err)
			t.Cleanup(func() { _ = sqlDB.Close() })

			c := newClient(t, db.Pool, skiplock.Config{PollInterval: 20 * time.Millisecond, Logger: quietLogger()})
			require.NoError(t, skiplock.Handle(c, "effect", func(ctx context.Context, j *skiplock.Job[effectArgs]) error {
				if driver == "pgx" {
					return writeEffect(ctx, c, j)
				}
				tx, err := sqlDB.BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				defer tx.Rollback() //nolint:errcheck // no-op after commit
				if _, err := tx.ExecContext(ctx, "INSERT INTO effects VALUES ($1, $2, $3)", j.ID, j.WorkerID, j.LeaseToken); err != nil {
					return err
				}
				if err := skiplock.CompleteTx(ctx, c, skiplock.SQLTx(tx), j); err != nil {
					return err
				}
				return tx.Commit()
			}))
			const n = 20
			ids := make([]int64, n)
			for i := range ids {
				r, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "effect", Payload: effectArgs{N: i}})
				require.NoError(t, err)
				ids[i] = r.ID
			}
			require.NoError(t, c.Start(ctx))
			waitNoJobs(t, db.Pool)
			require.NoError(t, c.Stop(ctx))

			for _, id := range ids {
				require.Len(t, effectRows(t, db.Pool, id), 1, "job %d", id)
			}
			st := c.Stats()
			require.EqualValues(t, n, st.Completed)
			require.Zero(t, st.Failed)
			require.Zero(t, st.LeaseLost)
			require.Zero(t, countDead(t, db.Pool))
		})
	}
}

func countDead(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM skiplock.jobs_dead").Scan(&n))
	return n
}

func TestCompleteTxRollbackRetries(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	createEffects(t, db.Pool)
	c := newClient(t, db.Pool, skiplock.Config{PollInterval: 20 * time.Millisecond, Logger: quietLogger(),
		Backoff: func(int) time.Duration { return 50 * time.Millisecond }})
	errBusiness := errors.New("business rule refused the write")
	attempts := make(chan int, 10)
	checked := make(chan struct{})
	require.NoError(t, skiplock.Handle(c, "effect", func(ctx context.Context, j *skiplock.Job[effectArgs]) error {
		attempts <- j.Attempt
		if j.Attempt > 1 {
			<-checked
			return writeEffect(ctx, c, j)
		}
		tx, err := effectTx(ctx, c, j)
		if err != nil {
			return err
		}
		if err := tx.Rollback(ctx); err != nil {
			return err
		}
		return errBusiness
	}))
	r, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "effect"})
	require.NoError(t, err)
	require.NoError(t, c.Start(ctx))
	defer func() { require.NoError(t, c.Stop(ctx)) }()

	require.Equal(t, 1, <-attempts)
	require.Equal(t, 2, <-attempts) // retried after the rollback
	// The rolled-back attempt left nothing behind and was recorded as a failure.
	require.Empty(t, effectRows(t, db.Pool, r.ID))
	var lastErr string
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT last_error FROM skiplock.jobs WHERE id = $1", r.ID).Scan(&lastErr))
	require.Contains(t, lastErr, errBusiness.Error())
	close(checked)

	waitNoJobs(t, db.Pool)
	require.Equal(t, []string{c.Config().WorkerID}, effectRows(t, db.Pool, r.ID))
	require.Eventually(t, func() bool { return c.Stats().Completed == 1 }, 5*time.Second, 10*time.Millisecond)
	require.EqualValues(t, 1, c.Stats().Failed)
}

// A worker frozen past its lease resumes and tries to complete in its
// transaction: the call fails with ErrLeaseLost, its business row vanishes
// with the rollback, and the new owner's row is there exactly once.
func TestCompleteTxFrozenWorkerLosesLease(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	createEffects(t, db.Pool)

	// Process A: a long lease and no reaper, heartbeat or poll during the
	// test, so only the test decides when A's lease ends.
	a := schedClient(t, db.URL, skiplock.Config{WorkerID: "A", LeaseDuration: time.Minute, HeartbeatInterval: 25 * time.Second,
		ReaperInterval: -1, PollOnly: true, PollInterval: time.Hour, Logger: quietLogger(),
		Pools: []skiplock.WorkerPool{{Concurrency: 1, BatchSize: 1}}})
	inside, resume := make(chan int64, 1), make(chan struct{})
	resultA := make(chan error, 1)
	require.NoError(t, skiplock.Handle(a, "effect", func(ctx context.Context, j *skiplock.Job[effectArgs]) error {
		tx, err := a.Pool().Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx) //nolint:errcheck // the point of this test
		if _, err := tx.Exec(ctx, "INSERT INTO effects VALUES ($1, $2, $3)", j.ID, j.WorkerID, j.LeaseToken); err != nil {
			return err
		}
		inside <- j.LeaseToken
		<-resume // frozen: a GC pause, a stopped VM, a partition
		err = skiplock.CompleteTx(ctx, a, tx, j)
		resultA <- err
		if err != nil {
			return err // rolled back by the deferred Rollback
		}
		return tx.Commit(ctx)
	}))
	r, err := a.Enqueue(ctx, skiplock.EnqueueParams{Kind: "effect"})
	require.NoError(t, err)
	require.NoError(t, a.Start(ctx))
	defer func() { require.NoError(t, a.Stop(ctx)) }()
	tokenA := <-inside

	// A's lease runs out; a reaper returns the job and process B takes it.
	// The job also moves to B's queue: A's pool keeps a slot to claim ahead
	// (Concurrency + BatchSize), and a frozen process claims nothing, so
	// A must not take the job back while its handler is stuck.
	_, err = db.Pool.Exec(ctx, "UPDATE skiplock.jobs SET lease_expires_at = now() - interval '1 second', queue = 'b' WHERE id = $1", r.ID)
	require.NoError(t, err)
	back, _, err := a.Reap(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, back)
	b := schedClient(t, db.URL, skiplock.Config{WorkerID: "B", PollInterval: 20 * time.Millisecond, Logger: quietLogger(),
		Pools: []skiplock.WorkerPool{{Queues: []string{"b"}}}})
	var tokenB int64
	require.NoError(t, skiplock.Handle(b, "effect", func(ctx context.Context, j *skiplock.Job[effectArgs]) error {
		tokenB = j.LeaseToken
		return writeEffect(ctx, b, j)
	}))
	require.NoError(t, b.Start(ctx))
	waitNoJobs(t, db.Pool)
	require.NoError(t, b.Stop(ctx))
	require.Greater(t, tokenB, tokenA, "the new owner's fencing token is larger")

	close(resume)
	err = <-resultA
	require.ErrorIs(t, err, skiplock.ErrLeaseLost)
	require.Eventually(t, func() bool { return a.Stats().LeaseLost == 1 }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, []string{"B"}, effectRows(t, db.Pool, r.ID), "B's effect exactly once, none of A's")
	require.Zero(t, a.Stats().Completed)
	require.EqualValues(t, 1, b.Stats().Completed)
	require.Zero(t, countDead(t, db.Pool))
}

// When the heartbeat finds the lease gone first, the handler's context is
// cancelled with cause ErrLeaseLost, and a completion attempted anyway fails.
func TestCompleteTxAfterHeartbeatFoundLeaseLost(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	createEffects(t, db.Pool)
	c := newClient(t, db.Pool, skiplock.Config{LeaseDuration: 600 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond,
		ReaperInterval: -1, PollInterval: 20 * time.Millisecond, Logger: quietLogger()})
	inside := make(chan struct{}, 1)
	type result struct{ cause, complete error }
	results := make(chan result, 1)
	require.NoError(t, skiplock.Handle(c, "effect", func(ctx context.Context, j *skiplock.Job[effectArgs]) error {
		inside <- struct{}{}
		<-ctx.Done()
		tctx := context.WithoutCancel(ctx)
		tx, err := c.Pool().Begin(tctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(tctx) //nolint:errcheck // the point of this test
		_, err = tx.Exec(tctx, "INSERT INTO effects VALUES ($1, $2, $3)", j.ID, j.WorkerID, j.LeaseToken)
		if err != nil {
			return err
		}
		err = skiplock.CompleteTx(tctx, c, tx, j)
		results <- result{cause: context.Cause(ctx), complete: err}
		return err
	}))
	r := startOneEffect(t, c)
	<-inside
	// Keep this process from claiming the job again once it is back.
	require.NoError(t, c.QueuePause(ctx, skiplock.DefaultQueue))
	reapExpired(t, c, db.Pool, r.ID)

	res := <-results
	require.ErrorIs(t, res.cause, skiplock.ErrLeaseLost)
	require.ErrorIs(t, res.complete, skiplock.ErrLeaseLost)
	require.Empty(t, effectRows(t, db.Pool, r.ID))
	require.Eventually(t, func() bool { return c.Stats().LeaseLost == 1 }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, 1, countJobs(t, db.Pool, "id = $1 AND state = 'ready'", r.ID), "the job is still there for its next owner")
}

// A heartbeat that runs after the handler's CompleteTx committed finds the
// row gone: that is the completion, not a lost lease. The handler's context
// stays alive (cancelled, it used to interrupt the Commit's read of the
// server's reply, and a job completed in the database was counted and
// logged as a lost lease), and the job counts as completed.
func TestCompleteTxCommitThenHeartbeatIsNoLeaseLoss(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	createEffects(t, db.Pool)
	c := newClient(t, db.Pool, skiplock.Config{HeartbeatInterval: 20 * time.Millisecond, PollInterval: 20 * time.Millisecond,
		Logger: quietLogger()})
	causes := make(chan error, 1)
	require.NoError(t, skiplock.Handle(c, "effect", func(ctx context.Context, j *skiplock.Job[effectArgs]) error {
		if err := writeEffect(ctx, c, j); err != nil {
			return err
		}
		// Committed; the heartbeats that run meanwhile find the row gone.
		select {
		case <-ctx.Done():
		case <-time.After(10 * 20 * time.Millisecond):
		}
		causes <- context.Cause(ctx)
		return context.Cause(ctx)
	}))
	r := startOneEffect(t, c)

	require.NoError(t, <-causes, "the handler's context was cancelled after its own commit")
	require.Eventually(t, func() bool { return c.Stats().Completed == 1 }, 5*time.Second, 10*time.Millisecond)
	require.Zero(t, c.Stats().LeaseLost)
	require.Len(t, effectRows(t, db.Pool, r.ID), 1)
	require.Zero(t, countJobs(t, db.Pool, "id = $1", r.ID))
}

// A CompleteTx whose transaction rolls back leaves the job running: the
// next heartbeat finds the row and drops the mark, so a lease lost after
// that still cancels the handler. Heartbeats of 250 ms: a heartbeat times
// out at its interval, and one that timed out at the client after the
// server extended the lease (20 ms heartbeats did, two tests in three on a
// loaded machine) drops no mark; two of those, and the test took the
// lease's two extensions for two heartbeats that had found the row.
func TestCompleteTxRollbackThenLeaseLostCancels(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{LeaseDuration: 3 * time.Second, HeartbeatInterval: 250 * time.Millisecond,
		ReaperInterval: -1, PollInterval: 20 * time.Millisecond, Logger: quietLogger()})
	rolledBack := make(chan struct{})
	causes := make(chan error, 1)
	require.NoError(t, skiplock.Handle(c, "effect", func(ctx context.Context, j *skiplock.Job[effectArgs]) error {
		tx, err := c.Pool().Begin(ctx)
		if err != nil {
			return err
		}
		if err := skiplock.CompleteTx(ctx, c, tx, j); err != nil {
			return err
		}
		if err := tx.Rollback(ctx); err != nil {
			return err
		}
		close(rolledBack)
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return context.Cause(ctx)
	}))
	r := startOneEffect(t, c)
	<-rolledBack
	// Two heartbeats extend the lease after the rollback: the second began
	// after the first had ended, so after the CompleteTx, and dropped the
	// mark when it found the row.
	for range 2 {
		before := leaseExpiry(t, db.Pool, r.ID)
		require.Eventually(t, func() bool { return leaseExpiry(t, db.Pool, r.ID).After(before) },
			5*time.Second, 5*time.Millisecond, "no heartbeat extended the lease")
	}
	require.NoError(t, c.QueuePause(ctx, skiplock.DefaultQueue))
	reapExpired(t, c, db.Pool, r.ID)
	select {
	case cause := <-causes:
		require.ErrorIs(t, cause, skiplock.ErrLeaseLost)
	case <-time.After(5 * time.Second):
		t.Fatal("the lease was lost after a rolled-back CompleteTx, and the handler was never cancelled")
	}
	require.Eventually(t, func() bool { return c.Stats().LeaseLost == 1 }, 5*time.Second, 10*time.Millisecond)
	require.Zero(t, c.Stats().Completed)
}

// A handler that keeps its transaction open after CompleteTx holds its
// job's row locked until it commits. The heartbeat extends every lease of
// the process in one statement, and used to wait for that row: no lease of
// the process was extended while the transaction stayed open, and another
// process's reaper took back the jobs running beside it. The heartbeat
// does not wait for a row the handler's own transaction holds: here a
// transaction held open for three leases' time, and the job beside it runs
// on, its lease never lost. (Heartbeats ten to a lease: one that times out
// on a loaded machine does not lose it.)
func TestCompleteTxHeldOpenDoesNotStallTheOtherLeases(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	createEffects(t, db.Pool)
	const lease = time.Second
	c := newClient(t, db.Pool, skiplock.Config{LeaseDuration: lease, HeartbeatInterval: lease / 10,
		PollInterval: 20 * time.Millisecond, Logger: quietLogger()})
	// Another process's reaper, which takes back every lease that expires.
	reaper := newClient(t, db.Pool, skiplock.Config{WorkerID: "reaper", Logger: quietLogger()})
	longStarted, longCause := make(chan struct{}), make(chan error, 1)
	require.NoError(t, skiplock.Handle(c, "long", func(ctx context.Context, j *skiplock.Job[effectArgs]) error {
		close(longStarted)
		select {
		case <-ctx.Done():
		case <-time.After(5 * lease):
		}
		longCause <- context.Cause(ctx)
		return context.Cause(ctx)
	}))
	held := make(chan struct{})
	require.NoError(t, skiplock.Handle(c, "effect", func(ctx context.Context, j *skiplock.Job[effectArgs]) error {
		<-longStarted
		return writeEffectThen(ctx, c, j, func() {
			close(held)
			time.Sleep(3 * lease) // the transaction open, the job's row locked
		})
	}))
	long, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "long"})
	require.NoError(t, err)
	effect, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "effect"})
	require.NoError(t, err)
	require.NoError(t, c.Start(ctx))
	t.Cleanup(func() { require.NoError(t, c.Stop(ctx)) })
	<-held
	reaped := 0
	deadline := time.Now().Add(3 * lease)
	for time.Now().Before(deadline) {
		back, _, err := reaper.Reap(ctx)
		require.NoError(t, err)
		reaped += back
		time.Sleep(20 * time.Millisecond)
	}
	require.Zero(t, reaped, "a lease expired while the handler's transaction held its row")
	require.NoError(t, <-longCause, "the job beside lost its lease")
	require.Eventually(t, func() bool { return c.Stats().Completed == 2 }, 5*time.Second, 10*time.Millisecond)
	require.Zero(t, c.Stats().LeaseLost)
	require.Len(t, effectRows(t, db.Pool, effect.ID), 1)
	require.Zero(t, countJobs(t, db.Pool, "id = ANY ($1)", []int64{long.ID, effect.ID}))
}

// A handler that returns before its CompleteTx transaction ends (it
// commits or rolls back elsewhere, later) leaves the runner a fenced
// fallback to write, for the case the transaction did not commit. That
// write waited on the row the transaction held, and every outcome of the
// process waited behind it: a job that finished meanwhile had its outcome
// written only once the transaction ended (2.97 s behind one held 3 s). The
// fallback does not wait for a held row: here the job beside completes
// while the transaction is still open, and the transaction then decides.
// Committed, the job completed once; rolled back, its lease runs out, the
// reaper returns it and it runs again: nothing is lost either way.
func TestCompleteTxReturnedBeforeCommitDoesNotStallOutcomes(t *testing.T) {
	t.Parallel()
	for _, commit := range []bool{true, false} {
		t.Run(map[bool]string{true: "commit", false: "rollback"}[commit], func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t)
			ctx := context.Background()
			createEffects(t, db.Pool)
			c := newClient(t, db.Pool, skiplock.Config{LeaseDuration: time.Second, HeartbeatInterval: 100 * time.Millisecond,
				ReaperInterval: 100 * time.Millisecond, PollInterval: 20 * time.Millisecond, Logger: quietLogger()})
			beside := make(chan struct{})
			require.NoError(t, skiplock.Handle(c, "beside", func(ctx context.Context, j *skiplock.Job[effectArgs]) error {
				return nil
			}))
			ended, runs := make(chan struct{}), make(chan int, 2)
			require.NoError(t, skiplock.Handle(c, "effect", func(ctx context.Context, j *skiplock.Job[effectArgs]) error {
				runs <- j.Attempt
				if j.Attempt > 1 {
					return writeEffect(ctx, c, j) // the run after a rollback
				}
				tx, err := effectTx(ctx, c, j)
				if err != nil {
					return err
				}
				go func() { // ended after the handler returned, once the job beside completed
					defer close(ended)
					select {
					case <-beside:
					case <-time.After(10 * time.Second):
					}
					if commit {
						_ = tx.Commit(context.Background())
					} else {
						_ = tx.Rollback(context.Background())
					}
				}()
				return nil
			}))
			effect := startOneEffect(t, c)
			require.Equal(t, 1, <-runs)
			require.Eventually(t, func() bool { return countJobs(t, db.Pool, "id = $1 AND state = 'running'", effect.ID) == 1 },
				5*time.Second, 5*time.Millisecond)
			time.Sleep(100 * time.Millisecond) // the handler has returned; its fallback is with the completer
			other, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "beside"})
			require.NoError(t, err)
			require.Eventually(t, func() bool { return countJobs(t, db.Pool, "id = $1", other.ID) == 0 },
				5*time.Second, 5*time.Millisecond, "the job beside waited for the other handler's transaction")
			select {
			case <-ended:
				t.Fatal("the transaction ended before the job beside completed")
			default:
			}
			close(beside)
			<-ended
			if commit {
				require.Eventually(t, func() bool { return countJobs(t, db.Pool, "id = $1", effect.ID) == 0 },
					5*time.Second, 5*time.Millisecond)
				require.Len(t, effectRows(t, db.Pool, effect.ID), 1)
				require.Empty(t, runs, "run once")
				return
			}
			select {
			case attempt := <-runs:
				require.Equal(t, 2, attempt, "the job ran again after the rollback")
			case <-time.After(10 * time.Second):
				t.Fatal("the job whose transaction rolled back was never run again")
			}
			require.Eventually(t, func() bool { return countJobs(t, db.Pool, "id = $1", effect.ID) == 0 },
				5*time.Second, 5*time.Millisecond)
			require.Len(t, effectRows(t, db.Pool, effect.ID), 1, "the rolled-back run's write vanished with it")
		})
	}
}

// leaseExpiry reads the lease expiry of running job id.
func leaseExpiry(t *testing.T, pool *pgxpool.Pool, id int64) time.Time {
	t.Helper()
	var at time.Time
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT lease_expires_at FROM skiplock.jobs WHERE id = $1", id).Scan(&at))
	return at
}

// startOneEffect enqueues one "effect" job and starts c, stopped when the
// test ends.
func startOneEffect(t *testing.T, c *skiplock.Client) skiplock.EnqueueResult {
	t.Helper()
	ctx := context.Background()
	r, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "effect"})
	require.NoError(t, err)
	require.NoError(t, c.Start(ctx))
	t.Cleanup(func() { require.NoError(t, c.Stop(ctx)) })
	return r
}

// reapExpired expires the lease of running job id and has a reaper (as
// another process's would) take the job back. The client's heartbeat may
// extend the lease between the expiry and the reap: then it tries again.
func reapExpired(t *testing.T, c *skiplock.Client, pool *pgxpool.Pool, id int64) {
	t.Helper()
	ctx := context.Background()
	require.Eventually(t, func() bool {
		_, err := pool.Exec(ctx, "UPDATE skiplock.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1", id)
		require.NoError(t, err)
		back, _, err := c.Reap(ctx)
		require.NoError(t, err)
		return back == 1
	}, 10*time.Second, 10*time.Millisecond, "the reaper never took the expired job back")
}

func TestCompleteTxNotTheCallersJob(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	createEffects(t, db.Pool)
	c := newClient(t, db.Pool, skiplock.Config{WorkerID: "mine", Logger: quietLogger()})
	other := newClient(t, db.Pool, skiplock.Config{WorkerID: "other", Logger: quietLogger()})

	// A Job the caller made up holds no lease.
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	forged := &skiplock.Job[effectArgs]{JobRow: skiplock.JobRow{ID: 1, LeaseToken: 42}, WorkerID: "mine"}
	require.ErrorIs(t, skiplock.CompleteTx(ctx, c, tx, forged), skiplock.ErrLeaseLost)
	require.ErrorIs(t, skiplock.CompleteTx[effectArgs](ctx, c, tx, nil), skiplock.ErrLeaseLost)
	require.NoError(t, tx.Rollback(ctx))

	var escaped *skiplock.Job[effectArgs]
	var viaOther error
	require.NoError(t, skiplock.Handle(c, "effect", func(ctx context.Context, j *skiplock.Job[effectArgs]) error {
		escaped = j
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx) //nolint:errcheck // nothing to commit
		// Another client (another process's worker id) holds no lease on it.
		viaOther = skiplock.CompleteTx(ctx, other, tx, j)
		return nil
	}))
	r, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "effect"})
	require.NoError(t, err)
	res, err := c.Drain(ctx, skiplock.DrainOptions{})
	require.NoError(t, err)
	require.Equal(t, 1, res.Completed)
	require.ErrorIs(t, viaOther, skiplock.ErrLeaseLost)
	require.Zero(t, countJobs(t, db.Pool, "id = $1", r.ID))

	// The job escaped its handler: once the handler returned, its lease is
	// the worker's business, not the job value's.
	tx, err = db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // nothing to commit
	require.ErrorIs(t, skiplock.CompleteTx(ctx, c, tx, escaped), skiplock.ErrLeaseLost)
}

func TestCompleteTxHandlerForgotToCommit(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	createEffects(t, db.Pool)
	c := newClient(t, db.Pool, skiplock.Config{Logger: quietLogger(), Backoff: func(int) time.Duration { return time.Hour }})
	require.NoError(t, skiplock.Handle(c, "effect", func(ctx context.Context, j *skiplock.Job[effectArgs]) error {
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx) //nolint:errcheck // the bug under test: no Commit
		if _, err := tx.Exec(ctx, "INSERT INTO effects VALUES ($1, $2, $3)", j.ID, j.WorkerID, j.LeaseToken); err != nil {
			return err
		}
		return skiplock.CompleteTx(ctx, c, tx, j)
	}))
	r, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "effect"})
	require.NoError(t, err)
	res, err := c.Drain(ctx, skiplock.DrainOptions{})
	require.NoError(t, err)
	require.Len(t, res.Jobs, 1)
	require.Equal(t, skiplock.OutcomeRetried, res.Jobs[0].Outcome)
	require.Contains(t, res.Jobs[0].Error, "did not commit")
	// Not stuck running until its lease expires: back to ready at once.
	require.Equal(t, 1, countJobs(t, db.Pool, "id = $1 AND state = 'ready' AND attempts = 1", r.ID))
	require.Empty(t, effectRows(t, db.Pool, r.ID))
}

func TestCompleteTxArchive(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	createEffects(t, db.Pool)
	c := newClient(t, db.Pool, skiplock.Config{ArchiveCompleted: true, Logger: quietLogger()})
	require.NoError(t, skiplock.Handle(c, "effect", func(ctx context.Context, j *skiplock.Job[effectArgs]) error {
		return writeEffect(ctx, c, j)
	}))
	r, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "effect", Payload: effectArgs{N: 7}})
	require.NoError(t, err)
	res, err := c.Drain(ctx, skiplock.DrainOptions{})
	require.NoError(t, err)
	require.Equal(t, 1, res.Completed)
	require.Zero(t, countJobs(t, db.Pool, "true"))
	var kind string
	var attempts int
	var payload map[string]any
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT kind, attempts, payload FROM skiplock.jobs_done WHERE id = $1", r.ID).
		Scan(&kind, &attempts, &payload))
	require.Equal(t, "effect", kind)
	require.Equal(t, 1, attempts)
	require.EqualValues(t, 7, payload["n"])
	require.Len(t, effectRows(t, db.Pool, r.ID), 1)
}

// The fencing token strictly increases across successive leases of a job,
// whatever ended the previous lease: a retry, a snooze, a lost lease.
func TestFencingTokenStrictlyIncreases(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	createEffects(t, db.Pool)
	c := newClient(t, db.Pool, skiplock.Config{Logger: quietLogger(), Backoff: func(int) time.Duration { return 0 }})
	var tokens []int64
	require.NoError(t, skiplock.Handle(c, "effect", func(ctx context.Context, j *skiplock.Job[effectArgs]) error {
		tokens = append(tokens, j.LeaseToken)
		switch len(tokens) {
		case 1:
			return errors.New("first attempt fails")
		case 2:
			return skiplock.Snooze(0)
		case 3:
			// The lease expires mid-run and a reaper takes the job back.
			if _, err := db.Pool.Exec(ctx, "UPDATE skiplock.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1", j.ID); err != nil {
				return err
			}
			if _, _, err := c.Reap(ctx); err != nil {
				return err
			}
			return writeEffect(ctx, c, j) // fails: ErrLeaseLost
		default:
			return writeEffect(ctx, c, j)
		}
	}))
	r, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "effect"})
	require.NoError(t, err)
	var outcomes []skiplock.JobOutcome
	for range 4 {
		res, err := c.Drain(ctx, skiplock.DrainOptions{Limit: 1})
		require.NoError(t, err)
		require.Len(t, res.Jobs, 1)
		require.Equal(t, tokens[len(tokens)-1], res.Jobs[0].LeaseToken)
		outcomes = append(outcomes, res.Jobs[0].Outcome)
	}
	require.Equal(t, []skiplock.JobOutcome{skiplock.OutcomeRetried, skiplock.OutcomeSnoozed,
		skiplock.OutcomeLeaseLost, skiplock.OutcomeCompleted}, outcomes)
	require.Len(t, tokens, 4)
	for i := 1; i < len(tokens); i++ {
		require.Greater(t, tokens[i], tokens[i-1], "lease %d's token after lease %d's: %v", i+1, i, tokens)
	}
	require.Len(t, effectRows(t, db.Pool, r.ID), 1)
	require.Zero(t, countJobs(t, db.Pool, "true"))
}

// CompleteTx turns sequential scans off for its own write (a plan cached on
// a near-empty jobs table must not scan it once it has grown) and puts the
// caller's setting back, through pgx (one pipeline) and database/sql (three
// statements): what the handler runs after it in its transaction plans as
// before.
func TestCompleteTxKeepsTheCallersPlannerSetting(t *testing.T) {
	t.Parallel()
	for _, driver := range []string{"pgx", "database/sql"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t)
			ctx := context.Background()
			sqlDB, err := sql.Open("pgx", db.URL)
			require.NoError(t, err)
			t.Cleanup(func() { _ = sqlDB.Close() })
			c := schedClient(t, db.URL, skiplock.Config{PollInterval: 20 * time.Millisecond, Logger: quietLogger()})
			after := make(chan string, 1)
			require.NoError(t, skiplock.Handle(c, "effect", func(ctx context.Context, j *skiplock.Job[effectArgs]) error {
				var v string
				if driver == "pgx" {
					tx, err := c.Pool().Begin(ctx)
					if err != nil {
						return err
					}
					defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit
					if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = on"); err != nil {
						return err
					}
					if err := skiplock.CompleteTx(ctx, c, tx, j); err != nil {
						return err
					}
					if err := tx.QueryRow(ctx, "SELECT current_setting('enable_seqscan')").Scan(&v); err != nil {
						return err
					}
					after <- v
					return tx.Commit(ctx)
				}
				tx, err := sqlDB.BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				defer tx.Rollback() //nolint:errcheck // no-op after commit
				if _, err := tx.ExecContext(ctx, "SET LOCAL enable_seqscan = on"); err != nil {
					return err
				}
				if err := skiplock.CompleteTx(ctx, c, skiplock.SQLTx(tx), j); err != nil {
					return err
				}
				if err := tx.QueryRowContext(ctx, "SELECT current_setting('enable_seqscan')").Scan(&v); err != nil {
					return err
				}
				after <- v
				return tx.Commit()
			}))
			_, err = c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "effect"})
			require.NoError(t, err)
			require.NoError(t, c.Start(ctx))
			defer func() { require.NoError(t, c.Stop(ctx)) }()
			select {
			case v := <-after:
				require.Equal(t, "on", v)
			case <-time.After(10 * time.Second):
				t.Fatal("the handler did not run")
			}
			waitNoJobs(t, db.Pool)
		})
	}
}
