package skiplock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/health"
)

type welcomeArgs struct {
	UserID int64 `json:"user_id"`
}

func (welcomeArgs) Kind() string { return "welcome" }

type nilKindArgs struct{ name string }

func (a *nilKindArgs) Kind() string { return a.name } // dereferences: panics on a nil pointer

// A typed args value names its kind for the producer and the handler; a
// kind given beside it must agree; plain string kinds keep working. A
// started worker records what it handles, so a mistyped kind shows up as
// unhandled while the typed job runs.
func TestTypedKindsAndUnhandledKinds(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{Logger: quietLogger(), PollInterval: 20 * time.Millisecond,
		Pools: []skiplock.WorkerPool{{Queues: []string{"emails"}}}})
	got := make(chan welcomeArgs, 1)
	require.NoError(t, skiplock.HandleArgs(c, func(ctx context.Context, j *skiplock.Job[welcomeArgs]) error {
		got <- j.Args
		return nil
	}))
	plain := make(chan string, 1)
	require.NoError(t, skiplock.Handle(c, "plain", func(ctx context.Context, j *skiplock.Job[map[string]any]) error {
		plain <- j.Kind
		return nil
	}))
	// The kind is registered: a second handler for it is refused.
	require.Error(t, skiplock.Handle(c, "welcome", func(context.Context, *skiplock.Job[welcomeArgs]) error { return nil }))
	err := skiplock.HandleArgs(c, func(context.Context, *skiplock.Job[*nilKindArgs]) error { return nil })
	requireField(t, err, "kind")

	_, err = c.Enqueue(ctx, skiplock.EnqueueParams{Queue: "emails", Kind: "other", Payload: welcomeArgs{UserID: 1}})
	requireField(t, err, "kind")
	require.Zero(t, countJobs(t, db.Pool, "true"), "a refused enqueue writes nothing")

	typed, err := c.Enqueue(ctx, skiplock.EnqueueParams{Queue: "emails", Payload: welcomeArgs{UserID: 4711}})
	require.NoError(t, err)
	_, err = c.Enqueue(ctx, skiplock.EnqueueParams{Queue: "emails", Kind: "welcome", Payload: welcomeArgs{UserID: 4712}})
	require.NoError(t, err)
	_, err = c.Enqueue(ctx, skiplock.EnqueueParams{Queue: "emails", Kind: "plain"})
	require.NoError(t, err)
	typo, err := c.Enqueue(ctx, skiplock.EnqueueParams{Queue: "emails", Kind: "welcom", Payload: map[string]any{"user_id": 4713}})
	require.NoError(t, err)
	rec, err := c.JobGet(ctx, typed.ID)
	require.NoError(t, err)
	require.Equal(t, "welcome", rec.Kind)

	require.NoError(t, c.Start(ctx))
	defer func() { require.NoError(t, c.Stop(ctx)) }()
	seen := map[int64]bool{}
	for range 2 {
		seen[(<-got).UserID] = true
	}
	require.Equal(t, map[int64]bool{4711: true, 4712: true}, seen)
	require.Equal(t, "plain", <-plain)

	require.Eventually(t, func() bool {
		us, err := health.UnhandledKinds(ctx, db.Pool, db.Schema)
		return err == nil && len(us) == 1 && us[0].Queue == "emails" && us[0].Kind == "welcom" && us[0].Ready == 1
	}, 15*time.Second, 20*time.Millisecond)
	// The worker's row may land after the jobs ran (its first beat races
	// them on a loaded machine): wait for it.
	var handles string
	require.Eventually(t, func() bool {
		return db.Pool.QueryRow(ctx, `SELECT handles::text FROM skiplock.workers WHERE stopped_at IS NULL`).Scan(&handles) == nil
	}, 15*time.Second, 20*time.Millisecond)
	require.JSONEq(t, `[{"queues": ["emails"], "kinds": ["plain", "welcome"]}]`, handles)

	// The typo'd job is still there, waiting; cancel it by id.
	st, err := c.JobCancel(ctx, typo.ID)
	require.NoError(t, err)
	require.Equal(t, skiplock.JobStateReady, st)
	us, err := health.UnhandledKinds(ctx, db.Pool, db.Schema)
	require.NoError(t, err)
	require.Empty(t, us)
}
