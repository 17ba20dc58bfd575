package faults

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/devdb"
)

// TestPostgresCrashRestart crashes the database (immediate shutdown: no
// checkpoint, crash recovery on start) twice while two workers drain a
// queue, on a private cluster so no other test is disturbed. The workers
// must ride it out without a restart of their own: pools reconnect, the
// listener comes back, jobs whose leases expired during the outage are
// reaped and rerun, and the queue drains with every invariant intact.
func TestPostgresCrashRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if _, err := devdb.BinDir(); errors.Is(err, devdb.ErrNoServer) {
		t.Skip("no PostgreSQL server binaries for a private cluster:", err)
	}
	e, c := privateEnv(t, 0)

	ids := e.enqueue(120, job{Sleep: []int{150}}, 20)
	ws := []*proc{e.worker("a"), e.worker("b")}
	listeners := func() (int, error) {
		return e.tryCount("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'skiplock-listener'")
	}
	waitFor(t, 15*time.Second, "both listeners", func() bool { n, err := listeners(); return err == nil && n == 2 })

	// The second outage outlasts the leases: the jobs in flight then are
	// reaped (or heartbeated, whichever reaches the database first).
	var restarted time.Time
	for crash, down := range []time.Duration{time.Second, lease + time.Second} {
		after := 20 + 50*crash
		waitFor(t, 30*time.Second, "progress before the crash", func() bool {
			n, err := e.tryCount("SELECT count(*) FROM public.runs WHERE outcome = 'ok'")
			return err == nil && n >= after
		})
		inflight := e.count("SELECT count(*) FROM public.runs WHERE outcome IS NULL")
		require.NoError(t, c.Crash(ctx))
		time.Sleep(down)
		require.NoError(t, c.Restart(ctx))
		require.NoError(t, e.pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&restarted))
		t.Logf("crash %d: %d executions in flight, down %s", crash+1, inflight, down)
		require.Positive(t, inflight, "crash %d struck no execution in flight", crash+1)
		waitFor(t, 20*time.Second, "the listeners to reconnect", func() bool { n, err := listeners(); return err == nil && n == 2 })
	}
	e.waitDrained(60 * time.Second)

	// After recovery a new job is picked up promptly.
	late := e.enqueue(1, job{}, 20)
	waitFor(t, 2*poll+time.Second, "a job enqueued after the restarts to run", func() bool {
		return e.count("SELECT count(*) FROM public.runs WHERE job_id = $1 AND outcome = 'ok'", late[0]) == 1
	})
	e.waitDrained(10 * time.Second)
	for _, p := range ws {
		require.False(t, p.exited(), "%s died with the database: %s", p.app, tail(p.logText(), 2000))
		p.signal(syscall.SIGTERM)
	}
	for _, p := range ws {
		require.True(t, p.wait(15*time.Second))
		require.NoError(t, p.err)
	}
	r := checkInvariants(t, e, checkOpts{committed: append(ids, late...)})
	require.Equal(t, len(ids)+1, r.Completed)
	// The second outage cost the leases held across it: each such row's
	// first write after the restart (the reaper's, a heartbeat or the
	// completion, whichever came first) found its lease already expired.
	// Which one comes first is a race, so Reaped alone may be zero.
	expired := e.count(`SELECT count(DISTINCT job_id) FROM public.audit
		WHERE at >= $1 AND old_state = 'running' AND old_expires < tx_now`, restarted)
	require.Positive(t, expired, "no lease held across the second outage was found expired after it")
	t.Logf("postgres crash: lost 0 of %d across 2 crashes; %d jobs ran more than once; %d leases found expired after the second outage, %d reaped",
		len(ids)+1, r.Reruns, expired, r.Reaped)
}
