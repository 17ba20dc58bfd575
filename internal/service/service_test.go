package service

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Background's lifecycle: Stop before Start does nothing, a second Start
// does nothing (one goroutine), Stop cancels run's context and waits for
// run to return, however ctx passed to Start ends; a second Stop is a no-op.
func TestBackgroundLifecycle(t *testing.T) {
	var b Background
	require.NoError(t, b.Stop(context.Background()), "safe before Start")

	var runs atomic.Int32
	returned := make(chan struct{})
	run := func(ctx context.Context) {
		runs.Add(1)
		<-ctx.Done()
		close(returned)
	}
	startCtx, cancelStart := context.WithCancel(context.Background())
	b.Start(startCtx, run)
	b.Start(startCtx, run)
	cancelStart() // Start's ctx passes values, not its end
	select {
	case <-returned:
		t.Fatal("run ended with Start's context")
	case <-time.After(20 * time.Millisecond):
	}
	require.NoError(t, b.Stop(context.Background()))
	select {
	case <-returned:
	default:
		t.Fatal("Stop returned before run did")
	}
	require.EqualValues(t, 1, runs.Load(), "a second Start runs nothing")
	require.NoError(t, b.Stop(context.Background()))
}

// Stop waits for run at most until its own ctx ends, and says so.
func TestBackgroundStopGivesUpWithItsContext(t *testing.T) {
	var b Background
	release := make(chan struct{})
	b.Start(context.Background(), func(context.Context) { <-release })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, b.Stop(ctx), context.DeadlineExceeded)
	close(release)
	require.NoError(t, b.Stop(context.Background()))
}

// Every wait falls within Interval ± Jitter × Interval, and the default
// jitter is ± 25 %.
func TestPeriodicWaitIsJittered(t *testing.T) {
	for _, tc := range []struct {
		jitter   float64
		min, max time.Duration
	}{
		{0, 750 * time.Millisecond, 1250 * time.Millisecond},
		{0.2, 800 * time.Millisecond, 1200 * time.Millisecond},
		{0.5, 500 * time.Millisecond, 1500 * time.Millisecond},
	} {
		p := &Periodic{Interval: time.Second, Jitter: tc.jitter}
		lo, hi := time.Hour, time.Duration(0)
		for range 2000 {
			d := p.wait()
			lo, hi = min(lo, d), max(hi, d)
		}
		require.GreaterOrEqual(t, lo, tc.min, "jitter %v", tc.jitter)
		require.LessOrEqual(t, hi, tc.max, "jitter %v", tc.jitter)
		// 2,000 draws spread over the range reach near both ends.
		spread := tc.max - tc.min
		require.Less(t, lo, tc.min+spread/10, "jitter %v", tc.jitter)
		require.Greater(t, hi, tc.max-spread/10, "jitter %v", tc.jitter)
	}
}

// Run ticks with RunAtStart at once, then every Interval, logs a tick's
// error with the service's name, and returns when its context ends; Start
// and Stop run the same loop on a goroutine of their own.
func TestPeriodicTicksUntilStopped(t *testing.T) {
	var logs bytes.Buffer
	ticks := make(chan struct{}, 16)
	p := &Periodic{Name: "probe", Interval: time.Millisecond, RunAtStart: true,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Tick: func(context.Context) error {
			select {
			case ticks <- struct{}{}:
			default:
			}
			return errors.New("boom")
		}}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { p.Run(ctx); close(ran) }()
	for range 3 {
		select {
		case <-ticks:
		case <-time.After(5 * time.Second):
			t.Fatal("no tick")
		}
	}
	cancel()
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return")
	}
	require.Contains(t, logs.String(), "service=probe")
	require.Contains(t, logs.String(), "error=boom")

	slow := &Periodic{Name: "slow", Interval: time.Hour, RunAtStart: true, Tick: func(context.Context) error {
		ticks <- struct{}{}
		return nil
	}}
	require.NoError(t, slow.Start(context.Background()))
	select {
	case <-ticks:
	case <-time.After(5 * time.Second):
		t.Fatal("RunAtStart did not tick at once")
	}
	require.NoError(t, slow.Stop(context.Background()), "stops while waiting an hour for the next tick")
}
