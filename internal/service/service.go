// Package service is the lifecycle every background component shares:
// Start(ctx) launches it, Stop(ctx) stops it and waits; both are idempotent
// and Stop is safe if Start never ran.
package service

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"
)

// Service is anything that runs in the background.
type Service interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

// Background is that lifecycle for one goroutine, for a service to embed or
// hold: Start launches run, Stop cancels run's context and waits for it to
// return. The zero value is ready to use.
type Background struct {
	mu     sync.Mutex // guards cancel and done
	cancel context.CancelFunc
	done   chan struct{}
}

// Start runs run in a goroutine, with a context that only Stop cancels
// (not ctx's cancellation: ctx passes its values). A second Start does
// nothing.
func (b *Background) Start(ctx context.Context, run func(ctx context.Context)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	b.cancel, b.done = cancel, make(chan struct{})
	go func() {
		defer close(b.done)
		run(ctx)
	}()
}

// Stop cancels run's context and waits for run to return (or for ctx).
func (b *Background) Stop(ctx context.Context) error {
	b.mu.Lock()
	cancel, done := b.cancel, b.done
	b.mu.Unlock()
	if done == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// DefaultJitter is Periodic's jitter when Jitter is 0: each wait is
// Interval ± 25 %.
const DefaultJitter = 0.25

// Periodic runs Tick every Interval, jittered so processes do not run in
// lockstep, until stopped: the one shape of every maintenance service and
// of the worker runtime's periodic passes (the reaper, the ring).
type Periodic struct {
	Name     string
	Interval time.Duration
	// Jitter is how far each wait may fall from Interval, as a fraction of
	// it (0.2: anywhere within Interval ± 20 %); 0 means DefaultJitter.
	Jitter float64
	// Tick does one round of bounded work; it should apply its own statement
	// timeouts and log a line with counts when it did something. An error it
	// returns is logged at warn level (unless the loop is stopping).
	Tick   func(ctx context.Context) error
	Logger *slog.Logger
	// RunAtStart runs the first tick immediately.
	RunAtStart bool

	bg Background
}

// Start launches the loop (Run) in a goroutine of its own.
func (p *Periodic) Start(ctx context.Context) error {
	p.bg.Start(ctx, p.Run)
	return nil
}

// Stop ends the loop and waits for the current tick (or ctx).
func (p *Periodic) Stop(ctx context.Context) error { return p.bg.Stop(ctx) }

// Run is the loop itself, in the caller's goroutine until ctx is done: for
// an owner that runs and waits for its goroutines itself (the worker
// runtime). Start and Stop are the loop's lifecycle for everyone else; a
// Periodic is run one way or the other, not both.
func (p *Periodic) Run(ctx context.Context) {
	for first := true; ; first = false {
		d := p.wait()
		if first && p.RunAtStart {
			d = 0
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
		if err := p.Tick(ctx); err != nil && ctx.Err() == nil && p.Logger != nil {
			p.Logger.Warn("skiplock: maintenance failed", slog.String("service", p.Name), slog.String("error", err.Error()))
		}
	}
}

// wait is the time until the next tick: Interval, jittered.
func (p *Periodic) wait() time.Duration {
	jitter := p.Jitter
	if jitter == 0 {
		jitter = DefaultJitter
	}
	j := time.Duration(float64(p.Interval) * jitter)
	return p.Interval - j + time.Duration(rand.Int64N(int64(2*j)+1))
}
