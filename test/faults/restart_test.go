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
// reaped and rerun, and the queue drains with every invariant intact. It
// runs with plain payloads and with payloads sealed (eachPayloadMode).
func TestPostgresCrashRestart(t *testing.T) {
	t.Parallel()
	if _, err := devdb.BinDir(); errors.Is(err, devdb.ErrNoServer) {
		t.Skip("no PostgreSQL server binaries for a private cluster:", err)
	}
	eachPayloadMode(t, 120, 60, postgresCrashRestart)
}

func postgresCrashRestart(t *testing.T, m payloadMode) {
	ctx := context.Background()
	e, c := privateEnv(t, 0)
	m.apply(e)

	ids := e.enqueue(m.jobs, job{Sleep: []int{150}}, 20)
	ws := []*proc{e.worker("a"), e.worker("b")}
	listeners := func() (int, error) {
		return e.tryCount("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'skiplock-listener'")
	}
	waitFor(t, 15*time.Second, "both listeners", func() bool { n, err := listeners(); return err == nil && n == 2 })

	// Before each crash two long jobs (5 s) must be running, so the crash
	// strikes executions in flight whatever the short jobs are doing. The
	// second outage outlasts the leases: its long jobs' leases expire
	// during it, and are reaped or heartbeated after it, whichever reaches
	// the database first.
	var longs [][]int64
	for crash, down := range []time.Duration{time.Second, lease + time.Second} {
		after := m.jobs/6 + m.jobs*5/12*crash // 20 and 70 of 120
		waitFor(t, 30*time.Second, "progress before the crash", func() bool {
			n, err := e.tryCount("SELECT count(*) FROM public.runs WHERE outcome = 'ok'")
			return err == nil && n >= after
		})
		long := e.enqueue(2, job{Sleep: []int{5000, 100}}, 20)
		longs = append(longs, long)
		waitFor(t, 30*time.Second, "the long jobs to start", func() bool {
			return e.count("SELECT count(*) FROM public.runs WHERE job_id = ANY($1) AND outcome IS NULL", long) == 2
		})
		inflight := e.count("SELECT count(*) FROM public.runs WHERE outcome IS NULL")
		require.NoError(t, c.Crash(ctx))
		time.Sleep(down)
		require.NoError(t, c.Restart(ctx))
		t.Logf("crash %d: %d executions in flight, down %s", crash+1, inflight, down)
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
	committed := append(append(append(ids, late...), longs[0]...), longs[1]...)
	r := checkInvariants(t, e, checkOpts{committed: committed})
	require.Equal(t, len(committed), r.Completed)
	m.requireChecked(t, r)
	// The second outage cost the long jobs' leases: the first write to
	// each after the restart (the reaper's, a heartbeat or the completion,
	// whichever came first) found its lease already expired. Which one comes
	// first is a race, so Reaped alone may be zero.
	expired := e.count(`SELECT count(DISTINCT job_id) FROM public.audit
		WHERE job_id = ANY($1) AND old_state = 'running' AND old_expires < tx_now`, longs[1])
	require.Equal(t, 2, expired, "the leases held across the second outage were not found expired after it")
	t.Logf("postgres crash: lost 0 of %d across 2 crashes; %d jobs ran more than once; %d leases reaped",
		len(committed), r.Reruns, r.Reaped)
}
