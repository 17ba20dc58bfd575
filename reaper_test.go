package skiplock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
)

// A fleet reaps about once per reaper interval, not once per process: a
// reap reads the whole running set, which a pinned horizon fills with dead
// entries, so four processes must not pay for it four times. An expired
// lease still goes back to ready.
func TestFleetTakesOneReaperTurnPerInterval(t *testing.T) {
	skipInShort(t, "runs for seconds of wall time")
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	const interval = 400 * time.Millisecond // a turn is due ReaperInterval/2 after the last
	var fleet []*skiplock.Client
	for i := range 4 {
		c := schedClient(t, db.URL, skiplock.Config{WorkerID: fmt.Sprintf("w%d", i), ReaperInterval: interval,
			Logger: quietLogger(), Pools: []skiplock.WorkerPool{{Queues: []string{"elsewhere"}, Concurrency: 1}}})
		require.NoError(t, skiplock.Handle(c, "noop", func(context.Context, *skiplock.Job[struct{}]) error { return nil }))
		fleet = append(fleet, c)
	}
	var id int64
	require.NoError(t, db.Pool.QueryRow(ctx, `INSERT INTO skiplock.jobs (queue, kind, state, attempts, locked_by, lease_token, lease_expires_at)
		VALUES ('q', 'noop', 'running', 1, 'gone', 7, now() - interval '1 second') RETURNING id`).Scan(&id))

	reaps := func() (n int64) {
		for _, c := range fleet {
			n += c.Stats().Reaps
		}
		return n
	}
	start := time.Now()
	for _, c := range fleet {
		require.NoError(t, c.Start(ctx))
	}
	// Three seconds, and on until the fleet has taken a second turn: a
	// reap that took t puts the next turn off by reapBackoff × t (up to
	// max(Lease/2, ReaperInterval)), and on a loaded machine the first one
	// (CI, 2026-11-30: one reap in 5 s) can take long enough to put the
	// next past any fixed window.
	settle := start.Add(3 * time.Second)
	require.Eventually(t, func() bool { return time.Now().After(settle) && reaps() >= 2 }, 40*time.Second, 20*time.Millisecond,
		"the fleet still reaps: a second turn")
	for _, c := range fleet {
		require.NoError(t, c.Stop(ctx))
	}
	ran := time.Since(start)

	// At most one turn per interval/2 for the fleet (plus the first); each
	// process on its own timer would have reaped about 4 × ran/interval
	// times (30 in three seconds).
	n, most := reaps(), int64(ran/(interval/2))+1
	t.Logf("%d reaps by 4 processes in %s (at most %d; without the turn about %d)", n, ran.Round(time.Millisecond), most, 4*int64(ran/interval))
	require.LessOrEqual(t, n, most)

	var state string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT state FROM skiplock.jobs WHERE id = $1`, id).Scan(&state))
	require.Equal(t, "ready", state, "the expired lease went back to ready")
}
