package measure

import (
	"context"
	"time"
)

// Sleep sleeps until deadline, or until ctx is done (it then returns the
// context's cause). Go's runtime timers wake sleepers from epoll_pwait,
// whose timeout has millisecond granularity: time.Sleep(3.5ms) takes about
// 4.06 ms on average here, which would make the harness measure the Go
// timer instead of the queue. So the bulk of the wait uses a timer
// (cancellable, no thread held) and the last millisecond at most a
// nanosleep, which blocks the goroutine's thread as a handler blocked in a
// system call would (mean overshoot about 0.1 ms).
func Sleep(ctx context.Context, deadline time.Time) error {
	if d := time.Until(deadline) - time.Millisecond; d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		}
	}
	if r := time.Until(deadline); r > 0 {
		shortSleep(r)
	}
	return ctx.Err()
}
