package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/store"
)

// The reaper's turn goes to one process per gap, each process judging the
// gap by its own interval; a slow reap puts every process off; and a turn
// row someone deleted is recreated rather than stopping the reaper.
func TestReapTurn(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	s := store.New("skiplock")
	take := func(gap time.Duration, worker string) bool {
		t.Helper()
		ok, err := s.ReapTurn(ctx, db.Pool, gap, worker)
		require.NoError(t, err)
		return ok
	}
	holder := func() string {
		var h string
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT holder FROM skiplock.reaper_turn`).Scan(&h))
		return h
	}

	require.True(t, take(time.Hour, "a"), "never reaped: due")
	require.Equal(t, "a", holder())
	require.False(t, take(time.Hour, "b"), "a reaped less than an hour ago")
	require.Equal(t, "a", holder(), "a refused turn changes nothing")
	require.True(t, take(time.Microsecond, "b"), "a process with a short interval still reaps as often as it needs")
	require.Equal(t, "b", holder())

	require.NoError(t, s.ReapDefer(ctx, db.Pool, time.Hour))
	require.False(t, take(time.Microsecond, "c"), "a slow reap put every process off")
	require.NoError(t, s.ReapDefer(ctx, db.Pool, time.Microsecond))
	require.False(t, take(time.Microsecond, "c"), "a shorter deferral does not shorten a longer one")

	_, err := db.Pool.Exec(ctx, `DELETE FROM skiplock.reaper_turn`)
	require.NoError(t, err)
	require.True(t, take(time.Hour, "d"), "a missing row is recreated and the turn taken")
	require.False(t, take(time.Hour, "e"))
	require.Equal(t, "d", holder())
}
