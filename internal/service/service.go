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

// Periodic runs Tick every Interval (with ±25% jitter so processes do not
// run in lockstep) until stopped: the one shape of every maintenance service.
type Periodic struct {
	Name     string
	Interval time.Duration
	// Tick does one round of bounded work; it should apply its own statement
	// timeouts and log a line with counts when it did something.
	Tick   func(ctx context.Context) error
	Logger *slog.Logger
	// RunAtStart runs the first tick immediately.
	RunAtStart bool

	mu     sync.Mutex // guards cancel and done
	cancel context.CancelFunc
	done   chan struct{}
}

// Start launches the loop.
func (p *Periodic) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done != nil {
		return nil
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p.cancel, p.done = cancel, make(chan struct{})
	go func() {
		defer close(p.done)
		first := true
		for {
			d := p.Interval*3/4 + time.Duration(rand.Int64N(int64(p.Interval)/2+1))
			if first && p.RunAtStart {
				d = 0
			}
			first = false
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
			if err := p.Tick(ctx); err != nil && ctx.Err() == nil && p.Logger != nil {
				p.Logger.Warn("skiplock: maintenance failed", slog.String("service", p.Name), slog.String("error", err.Error()))
			}
		}
	}()
	return nil
}

// Stop ends the loop and waits for the current tick (or ctx).
func (p *Periodic) Stop(ctx context.Context) error {
	p.mu.Lock()
	cancel, done := p.cancel, p.done
	p.mu.Unlock()
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
