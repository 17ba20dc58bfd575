package faults

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

// TestRolledBackEnqueueNeverRuns enqueues jobs in transactions that do not
// commit, next to jobs that do, while a worker is listening: rolled back
// explicitly (Go API and the SQL function), and cut off by
// pg_terminate_backend of the producer's connection in the middle of its
// transaction. Only the committed jobs may ever run.
func TestRolledBackEnqueueNeverRuns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	w := e.worker("a")
	waitFor(t, 15*time.Second, "the listener", func() bool {
		return e.count("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'skiplock-listener'") == 1
	})
	var committed, rolledBack []int64
	payload := job{Sleep: []int{10}}

	// Explicit rollback, Go API.
	for range 5 {
		tx, err := e.pool.Begin(ctx)
		require.NoError(t, err)
		for range 4 {
			r, err := e.client.EnqueueTx(ctx, tx, skiplock.EnqueueParams{Kind: "job", Payload: payload})
			require.NoError(t, err)
			rolledBack = append(rolledBack, r.ID)
		}
		require.NoError(t, tx.Rollback(ctx))
		committed = append(committed, e.enqueue(1, payload, 5)...)
	}

	// Explicit rollback, SQL function from a plain connection.
	tx, err := e.pool.Begin(ctx)
	require.NoError(t, err)
	for range 5 {
		var id int64
		require.NoError(t, tx.QueryRow(ctx, `SELECT skiplock.enqueue(queue => 'default', kind => 'job', payload => '{"sleep":[10]}')`).Scan(&id))
		rolledBack = append(rolledBack, id)
	}
	require.NoError(t, tx.Rollback(ctx))

	// The producer's backend is terminated mid-transaction: the commit
	// never happens (and the client's COMMIT fails).
	for i := range 3 {
		conn, err := pgx.Connect(ctx, e.appURL("producer"))
		require.NoError(t, err)
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		for range 4 {
			r, err := e.client.EnqueueTx(ctx, tx, skiplock.EnqueueParams{Kind: "job", Payload: payload})
			require.NoError(t, err)
			rolledBack = append(rolledBack, r.ID)
		}
		if i == 1 {
			// Also with a user row written in the same transaction.
			_, err = tx.Exec(ctx, "CREATE TEMP TABLE scratch (x int); INSERT INTO scratch VALUES (1)")
			require.NoError(t, err)
		}
		require.Equal(t, 1, e.terminate("producer"))
		require.Error(t, tx.Commit(ctx), "a commit on a terminated backend must fail")
		_ = conn.Close(ctx)
		committed = append(committed, e.enqueue(1, payload, 5)...)
	}

	e.waitDrained(30 * time.Second)
	time.Sleep(2 * poll) // give anything that should not exist a chance to run
	stopGracefully(t, w)
	r := checkInvariants(t, e, checkOpts{committed: committed, rolledBack: rolledBack})
	require.Equal(t, len(committed), r.Completed)
	require.Zero(t, e.count("SELECT count(*) FROM public.runs WHERE job_id = ANY($1)", rolledBack))
	require.Zero(t, e.count("SELECT count(*) FROM public.audit WHERE job_id = ANY($1)", rolledBack))
	t.Logf("rolled back %d enqueues (%d cut off by a terminated backend): 0 ran; committed %d: all completed",
		len(rolledBack), 12, len(committed))
}
