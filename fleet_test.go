package skiplock_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
)

// TestFleet: two databases, one client each, routed by tenant; every job
// lands in its tenant's database and is run there once, and the fleet
// starts and stops both together.
func TestFleet(t *testing.T) {
	ctx := context.Background()
	dbs := []*dbtest.DB{dbtest.New(t), dbtest.New(t)}
	var ran [2]atomic.Int64
	clients := make([]*skiplock.Client, len(dbs))
	for i, db := range dbs {
		c, err := skiplock.NewClient(db.Pool, skiplock.Config{Schema: db.Schema, PollInterval: 100 * time.Millisecond})
		require.NoError(t, err)
		require.NoError(t, skiplock.Handle(c, "k", func(context.Context, *skiplock.Job[struct{}]) error {
			ran[i].Add(1)
			return nil
		}))
		clients[i] = c
	}
	shardOf := func(p skiplock.EnqueueParams) int {
		n, _ := strconv.Atoi(p.Tenant[1:])
		return n % 2
	}
	f, err := skiplock.NewFleet(clients, shardOf)
	require.NoError(t, err)
	var per [2]int
	for i := range 30 {
		r, err := f.Enqueue(ctx, skiplock.EnqueueParams{Kind: "k", Tenant: "t" + strconv.Itoa(i%5)})
		require.NoError(t, err)
		require.Equal(t, (i%5)%2, r.Database)
		require.True(t, r.Inserted)
		per[r.Database]++
	}
	require.NoError(t, f.Start(ctx))
	require.Eventually(t, func() bool {
		return ran[0].Load() == int64(per[0]) && ran[1].Load() == int64(per[1])
	}, 20*time.Second, 20*time.Millisecond)
	require.NoError(t, f.Stop(ctx))
	for i, db := range dbs {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+db.Schema+".jobs_done").Scan(&n))
		require.Equal(t, per[i], n, "database %d", i)
	}

	// Bad routes and bad fleets name what is wrong.
	_, err = skiplock.NewFleet(nil, nil)
	var fe *skiplock.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "clients", fe.Field)
	require.ErrorIs(t, err, skiplock.ErrInvalidConfig)
	_, err = skiplock.NewFleet([]*skiplock.Client{clients[0], nil}, nil)
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "clients[1]", fe.Field)
	unrouted, err := skiplock.NewFleet(clients, nil)
	require.NoError(t, err)
	_, err = unrouted.Enqueue(ctx, skiplock.EnqueueParams{Kind: "k"})
	require.ErrorIs(t, err, skiplock.ErrNoRoute)
	wild, err := skiplock.NewFleet(clients, func(skiplock.EnqueueParams) int { return 7 })
	require.NoError(t, err)
	_, err = wild.Enqueue(ctx, skiplock.EnqueueParams{Kind: "k"})
	require.ErrorIs(t, err, skiplock.ErrNoRoute)
	require.False(t, errors.Is(err, skiplock.ErrInvalidJob))
}
