package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/store"
)

// The ring of generations (migration 016), under a pinned horizon: a
// generation two periods old gives its ready jobs to jobs_keyed, keeps
// its running job (fenced writes to it still land) and, once nothing is
// left in it, is truncated: the versions the pin kept are gone with it.
// Jobs with an entity or a unique key never enter the ring. Takes one to
// three ring periods (5 s each) of wall time.
func TestRingMovesStragglersAndTruncatesUnderPin(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	st := store.New("skiplock")

	enqueue := func(priority int, entity, unique *string) int64 {
		id, inserted, err := st.Enqueue(ctx, db.Pool, store.EnqueueArgs{Queue: "q", Kind: "k", Payload: "{}",
			Priority: priority, Entity: entity, UniqueKey: unique})
		require.NoError(t, err)
		require.True(t, inserted)
		return id
	}
	gen := func(id int64) int {
		var g int
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT gen FROM skiplock.jobs WHERE id = $1", id).Scan(&g))
		return g
	}
	size := func(g int) int64 {
		var n int64
		require.NoError(t, db.Pool.QueryRow(ctx, fmt.Sprintf("SELECT pg_relation_size('skiplock.jobs_g%d')", g)).Scan(&n))
		return n
	}

	// Enqueued within one period, so in one generation: not in a period's
	// last two seconds.
	for {
		var into float64
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT extract(epoch FROM clock_timestamp())::numeric % 5`).Scan(&into))
		if into < 3 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	long := enqueue(10, nil, nil) // claimed and left running: a long runner
	done := enqueue(5, nil, nil)  // claimed and completed
	ready := enqueue(0, nil, nil) // never claimed: a straggler
	entity, unique := "e1", "u1"
	keyedE := enqueue(0, &entity, nil)
	keyedU := enqueue(0, nil, &unique)
	g := gen(long)
	require.GreaterOrEqual(t, g, 0, "a plain job goes to the ring")
	require.Equal(t, g, gen(done))
	require.Equal(t, g, gen(ready))
	require.Equal(t, -1, gen(keyedE), "an entity job goes to jobs_keyed")
	require.Equal(t, -1, gen(keyedU), "a unique job goes to jobs_keyed")

	db.Pin(t)
	jobs, err := claimJobs(ctx, st, db.Pool, store.ClaimRequest{Queues: []string{"q"}, Batch: 2, WorkerID: "w", Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, jobs, 2)
	leases := map[int64]store.Lease{}
	for _, j := range jobs {
		leases[j.ID] = store.Lease{ID: j.ID, Token: j.LeaseToken}
	}
	require.Contains(t, leases, long)
	require.Contains(t, leases, done)
	require.NoError(t, st.CompleteOne(ctx, db.Pool, leases[done], "w", false))

	// Turn the ring until the generation is the one to empty: the straggler
	// moves, the long runner keeps the generation from being truncated.
	deadline := time.Now().Add(40 * time.Second)
	var moved int64
	for moved == 0 {
		require.True(t, time.Now().Before(deadline), "the generation never came up for emptying")
		time.Sleep(100 * time.Millisecond)
		var truncated int
		moved, truncated, err = st.RotateRing(ctx, db.Pool, time.Second)
		require.NoError(t, err)
		require.Equal(t, -1, truncated, "a generation with a running job is not truncated")
	}
	require.Equal(t, int64(1), moved, "only the ready straggler moves")
	require.Equal(t, -1, gen(ready), "the straggler is in jobs_keyed now, moved once")
	require.Equal(t, g, gen(long), "the running job keeps its generation")
	require.Positive(t, size(g))

	// The long runner's fenced writes still reach it; once it is done the
	// generation is emptied, pin or not.
	_, err = st.Heartbeat(ctx, db.Pool, []store.Lease{leases[long]}, nil, time.Minute, "w")
	require.NoError(t, err)
	require.NoError(t, st.CompleteOne(ctx, db.Pool, leases[long], "w", false))
	_, truncated, err := st.RotateRing(ctx, db.Pool, time.Second)
	require.NoError(t, err)
	require.Equal(t, g, truncated)
	require.Zero(t, size(g), "TRUNCATE returned the space the pin held")

	var left []int64
	rows, err := db.Pool.Query(ctx, "SELECT id FROM skiplock.jobs ORDER BY id")
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		left = append(left, id)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []int64{ready, keyedE, keyedU}, left, "nothing lost, nothing left behind")
}
