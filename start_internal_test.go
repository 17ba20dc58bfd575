package skiplock

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/service"
)

// verifyNoLeak is goleak.VerifyNone after closing the client's pool's idle
// connections: pgx leaves a connection's background reader blocked in a
// read after a pipeline until the connection's next message (seen once in
// CI, on a connection of the shared pool), which is the pool's, not a leak.
// Closed, every pooled connection's goroutines end; whatever is left
// belongs to a connection the client opened and did not close.
func verifyNoLeak(t *testing.T, c *Client, before goleak.Option) {
	t.Helper()
	c.pool.Reset()
	goleak.VerifyNone(t, before)
}

// recorder is a service that says whether it was started and stopped.
type recorder struct{ started, stopped bool }

func (r *recorder) Start(context.Context) error { r.started = true; return nil }
func (r *recorder) Stop(context.Context) error  { r.stopped = true; return nil }

// failing is a service whose Start fails.
type failing struct{}

var errStartFailed = errors.New("this service does not start")

func (failing) Start(context.Context) error { return errStartFailed }
func (failing) Stop(context.Context) error  { return nil }

func newStartClient(t *testing.T) *Client {
	t.Helper()
	db := dbtest.New(t)
	c, err := NewClient(db.Pool, Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	require.NoError(t, Handle(c, "k", func(context.Context, *Job[struct{}]) error { return nil }))
	return c
}

// A Start that fails at its last step stops everything it had started
// (worker pools, listener, heartbeat, maintenance) before it returns: no
// goroutine outlives it, and Start can be called again. Not parallel:
// goleak compares the goroutines before and after.
func TestStartFailureStopsWhatItStarted(t *testing.T) {
	c := newStartClient(t)
	ctx := context.Background()
	before := goleak.IgnoreCurrent()
	first := &recorder{}
	err := c.start(ctx, first, failing{})
	require.ErrorIs(t, err, errStartFailed)
	require.True(t, first.started)
	require.True(t, first.stopped, "a service started before the failure is stopped")
	require.Nil(t, c.runner.Load(), "the client is not left half started")
	verifyNoLeak(t, c, before)

	// It starts cleanly afterwards, and stops.
	require.NoError(t, c.Start(ctx))
	require.NoError(t, c.Stop(ctx))
	verifyNoLeak(t, c, before)
}

// ctx is for start-up: cancelled before Start, it starts nothing; cancelled
// after Start returned, the client keeps running until Stop.
func TestStartContextIsForStartUp(t *testing.T) {
	c := newStartClient(t)
	before := goleak.IgnoreCurrent()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, c.Start(cancelled), context.Canceled)
	require.Nil(t, c.runner.Load())
	verifyNoLeak(t, c, before)

	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, c.Start(ctx))
	cancel()
	_, err := c.Enqueue(context.Background(), EnqueueParams{Kind: "k"})
	require.NoError(t, err)
	// Still running: a job enqueued after ctx was cancelled is worked.
	require.Eventually(t, func() bool { return c.Stats().Completed == 1 }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, c.Stop(context.Background()))
	verifyNoLeak(t, c, before)
}

var _ service.Service = failing{}
