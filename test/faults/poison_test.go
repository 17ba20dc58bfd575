package faults

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// supervise keeps a worker running, restarting it each time it exits (as a
// process supervisor would), until the queue drains. It returns how many
// times the worker died and the last one.
func (e *env) supervise(timeout time.Duration, start func() *proc) (deaths int, last *proc) {
	e.t.Helper()
	p := start()
	deadline := time.Now().Add(timeout)
	for {
		n, err := e.tryCount("SELECT count(*) FROM skiplock.jobs")
		if err == nil && n == 0 {
			return deaths, p
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("queue not drained after %s (%d deaths); %d jobs left", timeout, deaths, n)
		}
		if p.exited() {
			deaths++
			p = start()
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stopGracefully drains a worker with SIGTERM and checks it exits cleanly.
func stopGracefully(t *testing.T, p *proc) {
	t.Helper()
	p.signal(syscall.SIGTERM)
	require.True(t, p.wait(15*time.Second), "%s did not stop", p.app)
	require.NoError(t, p.err, "%s exit", p.app)
}

// requireDead checks that each poison job is in jobs_dead exactly once,
// with reason, after exactly maxAttempts attempts, and ran at most that
// often (a claim cut off before its handler started spends an attempt too).
func requireDead(t *testing.T, e *env, r *report, ids []int64, reason string, maxAttempts int) {
	t.Helper()
	for _, id := range ids {
		var got string
		var attempts int
		require.NoError(t, e.pool.QueryRow(context.Background(),
			"SELECT reason, attempts FROM skiplock.jobs_dead WHERE id = $1", id).Scan(&got, &attempts), "job %d not dead", id)
		require.Equal(t, reason, got, "job %d", id)
		require.Equal(t, maxAttempts, attempts, "job %d", id)
		require.Equal(t, maxAttempts, r.Attempts[id], "job %d: claims", id)
		require.LessOrEqual(t, r.RunsPerJob[id], maxAttempts, "job %d: runs", id)
		require.Positive(t, r.RunsPerJob[id], "job %d never ran", id)
	}
}

// TestPoisonJobs runs jobs that fail on every attempt in the four ways a
// job can: a handler that panics, a Go worker process that exits in the
// middle of the job, an --exec child that kills itself (kill -9 $$), and
// an --exec child that kills its worker (kill -9 $SKIPLOCK_WORKER_PID).
// Each poison job must reach jobs_dead exactly once, after exactly
// max_attempts claims (crashes count: attempts are spent at claim), with
// the right reason; ordinary jobs next to them are not lost.
func TestPoisonJobs(t *testing.T) {
	t.Parallel()
	const maxAttempts = 3

	t.Run("panic", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		poison := e.enqueue(3, job{Sleep: []int{20}, Mode: []string{"panic"}}, maxAttempts)
		ok := e.enqueue(10, job{Sleep: []int{20}}, maxAttempts)
		w := e.worker("a")
		e.waitDrained(30 * time.Second)
		stopGracefully(t, w)
		r := checkInvariants(t, e, checkOpts{committed: append(poison, ok...)})
		requireDead(t, e, r, poison, "panic", maxAttempts)
		require.Equal(t, len(ok), r.Completed)
		for _, id := range poison {
			require.Equal(t, maxAttempts, r.RunsPerJob[id])
		}
	})

	t.Run("worker-exits-mid-job", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		poison := e.enqueue(2, job{Sleep: []int{100}, Mode: []string{"exit"}}, maxAttempts)
		ok := e.enqueue(10, job{Sleep: []int{50}}, maxAttempts+5)
		deaths, last := e.supervise(60*time.Second, func() *proc { return e.worker("a", "-concurrency", "2") })
		stopGracefully(t, last)
		r := checkInvariants(t, e, checkOpts{committed: append(poison, ok...)})
		requireDead(t, e, r, poison, "lease_expired", maxAttempts)
		require.Equal(t, len(ok), r.Completed)
		require.GreaterOrEqual(t, deaths, maxAttempts)
		t.Logf("worker exited %d times; poison contained after %d claims each", deaths, maxAttempts)
	})

	t.Run("exec-child-kill-9-self", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		poison := e.enqueue(2, job{}, maxAttempts)
		w := e.execWorker("x", `"`+program(t, "faultworker")+`" child; kill -9 $$`, "--poll-interval", "200ms")
		e.waitDrained(30 * time.Second)
		stopGracefully(t, w)
		r := checkInvariants(t, e, checkOpts{committed: poison})
		requireDead(t, e, r, poison, "error", maxAttempts)
		for _, id := range poison {
			require.Equal(t, maxAttempts, r.RunsPerJob[id])
		}
	})

	t.Run("exec-child-kills-worker", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		poison := e.enqueue(1, job{}, maxAttempts)
		ok := e.enqueue(4, job{Sleep: []int{300}}, maxAttempts+5)
		cmd := `if [ "$SKIPLOCK_JOB_ID" = "` + itoa(poison[0]) + `" ]; then "` + program(t, "faultworker") +
			`" child; kill -9 "$SKIPLOCK_WORKER_PID"; sleep 5; else "` + program(t, "faultworker") + `" child; fi`
		deaths, last := e.supervise(60*time.Second, func() *proc {
			return e.execWorker("x", cmd, "--lease", "1s", "--poll-interval", "200ms", "--concurrency", "2")
		})
		stopGracefully(t, last)
		r := checkInvariants(t, e, checkOpts{committed: append(poison, ok...)})
		requireDead(t, e, r, poison, "lease_expired", maxAttempts)
		require.Equal(t, len(ok), r.Completed)
		require.GreaterOrEqual(t, deaths, maxAttempts)
	})
}
