package store_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/store"
)

// The completer's writes of one batch are one pipeline: either every
// statement commits or none does. A batch whose last statement fails (a
// dead letter with a reason the table refuses) must leave the completion
// queued before it undone too, or a job could be completed while its
// neighbour's failure is lost.
func TestWriteBatchIsOneTransaction(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	st := store.New("skiplock")
	seedReady(t, db.Pool, "q", 3)
	ls := claimAll(t, st, db.Pool, "q", 3, 3)

	bad := []store.Query{
		st.CompleteQuery(ls[:1], benchWorker, false, false),
		st.RescheduleQuery([]store.Reschedule{{Lease: ls[1]}}, benchWorker),
		st.DeadLetterQuery([]store.Dead{{Lease: ls[2], Reason: "no-such-reason"}}, benchWorker),
	}
	_, err := st.WriteBatch(ctx, db.Pool, bad)
	require.Error(t, err)
	var running int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM skiplock.jobs WHERE state = 'running'").Scan(&running))
	require.Equal(t, 3, running, "a failed pipeline must write nothing")

	good := []store.Query{
		st.CompleteQuery(ls[:1], benchWorker, false, false),
		st.RescheduleQuery([]store.Reschedule{{Lease: ls[1]}}, benchWorker),
		st.DeadLetterQuery([]store.Dead{{Lease: ls[2], Reason: "error", Error: "boom"}}, benchWorker),
		// A stale lease matches nothing and is simply not reported held.
		st.CompleteQuery([]store.Lease{{ID: ls[0].ID, Token: ls[0].Token + 1}}, benchWorker, false, false),
	}
	held, err := st.WriteBatch(ctx, db.Pool, good)
	require.NoError(t, err)
	require.Equal(t, map[int64]bool{ls[0].ID: true, ls[1].ID: true, ls[2].ID: true}, held)
	var ready, dead int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM skiplock.jobs WHERE state = 'ready'),
		(SELECT count(*) FROM skiplock.jobs_dead)`).Scan(&ready, &dead))
	require.Equal(t, 1, ready)
	require.Equal(t, 1, dead)
}

// The fallback of a CompleteTx (Ended) does not wait for a row another
// transaction holds, and leaves it as it is (not reported held); a row no
// one holds retries or dead-letters as any other.
func TestEndedFallbackSkipsAHeldRow(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	st := store.New("skiplock")
	seedReady(t, db.Pool, "q", 4)
	ls := claimAll(t, st, db.Pool, "q", 4, 4)

	// The handler's transaction: it completed jobs 0 and 1 and is still open.
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // rolled back below
	_, err = tx.Exec(ctx, "DELETE FROM skiplock.jobs WHERE id = ANY ($1)", []int64{ls[0].ID, ls[1].ID})
	require.NoError(t, err)

	held, err := st.WriteBatch(ctx, db.Pool, []store.Query{
		st.RescheduleQuery([]store.Reschedule{{Lease: ls[0], Ended: true}, {Lease: ls[2], Ended: true}}, benchWorker),
		st.DeadLetterQuery([]store.Dead{{Lease: ls[1], Reason: "error", Error: "x", Ended: true},
			{Lease: ls[3], Reason: "error", Error: "x", Ended: true}}, benchWorker),
	})
	require.NoError(t, err)
	require.Equal(t, map[int64]bool{ls[2].ID: true, ls[3].ID: true}, held,
		"only the free rows are written and their leases reported held; the rows the open transaction locks are left")
	require.NoError(t, tx.Rollback(ctx))
	var running, ready, dead int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM skiplock.jobs WHERE state = 'running'),
		(SELECT count(*) FROM skiplock.jobs WHERE state = 'ready'), (SELECT count(*) FROM skiplock.jobs_dead)`).Scan(&running, &ready, &dead))
	require.Equal(t, [3]int{2, 1, 1}, [3]int{running, ready, dead}, "rolled back: still running, for the lease and the reaper")
}
