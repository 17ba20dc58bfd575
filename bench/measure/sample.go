package measure

import (
	"context"
	"fmt"
	"time"
)

// TimeStart times one enqueue → handler start on an idle queue: it drops a
// stale signal left in started (a retried job's), calls enqueue, and waits
// up to timeout for the handler to send its start time on started. It
// returns the time from the call to the handler's start and the call's own
// duration; enqueue's error is returned as it is.
func TimeStart(ctx context.Context, started <-chan time.Time, timeout time.Duration,
	enqueue func(context.Context) error) (toStart, call time.Duration, err error) {
	select {
	case <-started:
	default:
	}
	t0 := time.Now()
	if err := enqueue(ctx); err != nil {
		return 0, 0, err
	}
	call = time.Since(t0)
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case t2 := <-started:
		return t2.Sub(t0), call, nil
	case <-timer.C:
		return 0, call, fmt.Errorf("the handler did not start within %s", timeout)
	case <-ctx.Done():
		return 0, call, context.Cause(ctx)
	}
}
