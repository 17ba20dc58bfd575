package flow

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/store"
	"github.com/skiplock/skiplock/internal/worker"
)

// heldToken is the lease token of the jobs these tests make running, and
// otherToken one they do not hold. Both name jobs_keyed, where a row
// inserted without a generation goes, as a claim's token names its row's
// partition (claim_set: the sequence's value × 16 + the generation + 1).
const heldToken, otherToken = 7 * 16, 8 * 16

// runningJobs makes a database with n jobs running under worker "w" with
// lease token heldToken, and the engine of a client of that worker.
func runningJobs(t *testing.T, n int) (*dbtest.DB, *Engine, []int64) {
	t.Helper()
	db := dbtest.New(t)
	e := New(store.New("skiplock"), db.Pool, "w")
	rows, err := db.Pool.Query(context.Background(), `INSERT INTO skiplock.jobs (queue, kind, state, attempts, locked_by, lease_token, lease_expires_at)
		SELECT 'q', 'k', 'running', 1, 'w', $2::bigint, now() + interval '1 hour' FROM generate_series(1, $1) RETURNING id`, n, heldToken)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	return db, e, ids
}

// checkpoints lists db's checkpoints as "job:step", in order.
func checkpoints(t *testing.T, db *dbtest.DB) []string {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT job_id || ':' || name FROM skiplock.job_steps ORDER BY job_id, name`)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return got
}

// Checkpoints asked for at once are written together, each with its own
// answer: recorded, lease lost, or recorded already; the same step of the
// same job twice goes in two writes, the second finding the first.
func TestStepWriterGroupsCheckpoints(t *testing.T) {
	t.Parallel()
	const n = 60
	db, e, ids := runningJobs(t, n)
	ctx := context.Background()
	// Job 0's step "s" is recorded already.
	_, err := db.Pool.Exec(ctx, `INSERT INTO skiplock.job_steps (job_id, name, output) VALUES ($1, 's', '1')`, ids[0])
	require.NoError(t, err)

	type answer struct{ held, recorded bool }
	got := make([]answer, n+1)
	var wg sync.WaitGroup
	for i := range n + 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cp := store.StepCheckpoint{Name: "s", Output: []byte(`{"i": 1}`)}
			switch {
			case i == n: // job 1's step again, in the same burst
				cp.Lease = store.Lease{ID: ids[1], Token: heldToken}
			case i == 2: // a lease that is not held
				cp.Lease = store.Lease{ID: ids[i], Token: otherToken}
			default:
				cp.Lease = store.Lease{ID: ids[i], Token: heldToken}
			}
			r := e.steps.submit(ctx, e, cp, &runSteps{})
			<-r.done
			require.NoError(t, r.err)
			got[i] = answer{r.held, r.dup}
		}()
	}
	wg.Wait()
	require.Equal(t, answer{true, true}, got[0], "recorded before")
	require.Equal(t, answer{false, false}, got[2], "lease not held")
	require.ElementsMatch(t, []answer{{true, false}, {true, true}}, []answer{got[1], got[n]}, "job 1's step: one records, one finds it")
	for i := 3; i < n; i++ {
		require.Equal(t, answer{true, false}, got[i], i)
	}
	var steps, marked int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE j.task_id = 0)
		FROM skiplock.job_steps AS s JOIN skiplock.jobs AS j ON j.id = s.job_id`).Scan(&steps, &marked))
	require.Equal(t, n-1, steps, "one checkpoint per held job")
	require.Equal(t, steps, marked, "every job with a checkpoint is marked to shed it when it ends")
	// The writer goroutine ends its busy spell just after the last answer.
	require.Eventually(t, func() bool {
		e.steps.mu.Lock()
		defer e.steps.mu.Unlock()
		return !e.steps.busy
	}, 5*time.Second, time.Millisecond)
	e.steps.mu.Lock()
	defer e.steps.mu.Unlock()
	require.Less(t, e.steps.writes, n, "checkpoints asked for together were written together")
	t.Logf("%d checkpoints in %d writes", n+1, e.steps.writes)
}

// A run's checkpoints are written in the order its steps returned, and none
// after one that was refused: a checkpoint the database refuses (here
// output that is not JSON) fails its run's later checkpoints unwritten,
// while another run's in the same write is recorded; check and flush report
// the first refusal.
func TestStepWriterWritesNoneAfterARefusedCheckpoint(t *testing.T) {
	t.Parallel()
	db, e, ids := runningJobs(t, 2)
	ctx := context.Background()

	run := &Run{engine: e, id: ids[0], token: heldToken, worker: "w"}
	other := &Run{engine: e, id: ids[1], token: heldToken, worker: "w"}
	// Hold the writer busy so that all four go in one batch.
	e.steps.mu.Lock()
	e.steps.busy = true
	e.steps.mu.Unlock()
	cp := func(r *Run, name, out string) store.StepCheckpoint {
		return store.StepCheckpoint{Lease: r.lease(), Name: name, Output: []byte(out)}
	}
	e.steps.submit(ctx, e, cp(run, "a", `{"ok": 1}`), &run.pending)
	e.steps.submit(ctx, e, cp(run, "b", `not json`), &run.pending)
	e.steps.submit(ctx, e, cp(run, "c", `{"ok": 3}`), &run.pending)
	e.steps.submit(ctx, e, cp(other, "a", `{"ok": 1}`), &other.pending)
	require.NoError(t, run.pending.check(run), "nothing written yet: nothing to report")
	e.steps.drain(ctx, e)

	err := run.pending.flush(run)
	require.Error(t, err)
	require.Contains(t, err.Error(), `step "b"`)
	require.Equal(t, err, run.pending.check(run), "a refusal stays reported")
	require.NoError(t, other.pending.flush(other))

	require.Equal(t, []string{fmt.Sprintf("%d:a", ids[0]), fmt.Sprintf("%d:a", ids[1])}, checkpoints(t, db), "c came after the refused b: not written")
	e.steps.mu.Lock()
	defer e.steps.mu.Unlock()
	require.False(t, e.steps.busy, "the busy spell ended with the queue")
}

// Step returns before its checkpoint is written; a refused checkpoint (the
// lease is not held) fails the run's next Step before its fn runs, and
// every later call that waits for the run's checkpoints.
func TestStepReportsARefusedCheckpointAtTheNextCall(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	e := New(store.New("skiplock"), db.Pool, "w")
	var id int64
	require.NoError(t, db.Pool.QueryRow(ctx, `INSERT INTO skiplock.jobs (queue, kind, state, attempts, locked_by, lease_token, lease_expires_at)
		VALUES ('q', 'k', 'running', 1, 'w', $1::bigint, now() + interval '1 hour') RETURNING id`, heldToken).Scan(&id))

	run := &Run{engine: e, id: id, token: otherToken, worker: "w"} // a lease this worker no longer holds
	run.steps.none()
	ran := false
	_, recorded, err := run.Step(ctx, "a", func(context.Context) ([]byte, error) { ran = true; return []byte("1"), nil })
	require.NoError(t, err, "Step does not wait for its checkpoint")
	require.True(t, ran)
	require.False(t, recorded)
	require.ErrorIs(t, run.pending.flush(run), worker.ErrLeaseLost)

	ran = false
	_, _, err = run.Step(ctx, "b", func(context.Context) ([]byte, error) { ran = true; return []byte("2"), nil })
	require.ErrorIs(t, err, worker.ErrLeaseLost)
	require.False(t, ran, "a step after a refused checkpoint does not run")
	_, _, err = run.StepTx(ctx, "c", func(context.Context, pgx.Tx) ([]byte, error) { ran = true; return []byte("3"), nil })
	require.ErrorIs(t, err, worker.ErrLeaseLost)
	require.False(t, ran)
	_, err = run.Timer(ctx, "sleep:nap", time.Second, nil)
	require.ErrorIs(t, err, worker.ErrLeaseLost)
	var steps int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM skiplock.job_steps").Scan(&steps))
	require.Zero(t, steps)
}

// A run about to complete withdraws its checkpoints that no write carries
// yet (the completion supersedes them) and still waits for the one a write
// carries: here that write waits on a row lock another transaction holds,
// so "a" is in flight while "b" is queued. Another run's checkpoint in the
// queue is written as before.
func TestStepWriterWithdrawsACompletingRunsQueuedCheckpoints(t *testing.T) {
	t.Parallel()
	db, e, ids := runningJobs(t, 2)
	ctx := context.Background()
	run := &Run{engine: e, id: ids[0], token: heldToken, worker: "w"}
	other := &Run{engine: e, id: ids[1], token: heldToken, worker: "w"}
	cp := func(r *Run, name string) store.StepCheckpoint {
		return store.StepCheckpoint{Lease: r.lease(), Name: name, Output: []byte(`{"ok": 1}`)}
	}

	lock, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = lock.Rollback(ctx) }()
	_, err = lock.Exec(ctx, "SELECT 1 FROM skiplock.jobs WHERE id = $1 FOR UPDATE", ids[0])
	require.NoError(t, err)

	inFlight := e.steps.submit(ctx, e, cp(run, "a"), &run.pending)
	// "a" is in flight once the writer took it off the queue.
	require.Eventually(t, func() bool {
		e.steps.mu.Lock()
		defer e.steps.mu.Unlock()
		return len(e.steps.queue) == 0
	}, 5*time.Second, time.Millisecond)
	queued := e.steps.submit(ctx, e, cp(run, "b"), &run.pending)
	e.steps.submit(ctx, e, cp(other, "a"), &other.pending)

	run.pending.withdraw(&e.steps)
	<-queued.done
	require.True(t, queued.withdrawn)
	flushed := make(chan error, 1)
	go func() { flushed <- run.pending.flush(run) }()
	select {
	case err := <-flushed:
		t.Fatalf("flush returned (%v) while the run's checkpoint was in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	require.NoError(t, lock.Rollback(ctx))
	require.NoError(t, <-flushed)
	require.True(t, inFlight.held)
	require.NoError(t, other.pending.flush(other))

	require.Equal(t, []string{fmt.Sprintf("%d:a", ids[0]), fmt.Sprintf("%d:a", ids[1])}, checkpoints(t, db), "b was withdrawn")
}
