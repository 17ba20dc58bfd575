package faults

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// terminate kills the backends of this database whose application_name
// matches pattern (LIKE) and returns how many it killed.
func (e *env) terminate(pattern string) int {
	e.t.Helper()
	return e.count(`SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name LIKE $1 AND pid <> pg_backend_pid()) AS k`, pattern)
}

// TestTerminateBackendsDuringDrain terminates, with pg_terminate_backend,
// the LISTEN connection of every worker (application_name
// skiplock-listener) and every connection of their pools, repeatedly
// while they drain a queue. The pools reconnect, outcomes being written
// are retried, the listener comes back, and every invariant holds. Then,
// with the listeners just killed, a new job must still be picked up within
// the poll interval (the poll backstop), and once they are back, by NOTIFY:
// a third worker, on its own queue, polls only every minute, so its pickup
// within seconds can only come through its reconnected listener. It runs
// with plain payloads and with payloads sealed (eachPayloadMode).
func TestTerminateBackendsDuringDrain(t *testing.T) {
	t.Parallel()
	eachPayloadMode(t, 150, 90, terminateBackendsDuringDrain)
}

func terminateBackendsDuringDrain(t *testing.T, m payloadMode) {
	e := newEnv(t)
	m.apply(e)
	const pollEvery = time.Second
	const notifyQueue, slowPoll = "notified", time.Minute
	ids := e.enqueue(m.jobs, job{Sleep: []int{100}}, 20)
	ws := []*proc{e.worker("a", "-poll", pollEvery.String()), e.worker("b", "-poll", pollEvery.String()),
		e.worker("c", "-poll", slowPoll.String(), "-queue", notifyQueue)}
	listeners := func() int {
		return e.count("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'skiplock-listener'")
	}
	waitFor(t, 15*time.Second, "the three listeners", func() bool { return listeners() == 3 })

	killedListeners, killedPool := 0, 0
	for range 6 {
		time.Sleep(300 * time.Millisecond)
		killedListeners += e.terminate("skiplock-listener")
		killedPool += e.terminate("fw-%")
	}
	require.Positive(t, killedListeners)
	require.Positive(t, killedPool)
	e.waitDrained(60 * time.Second)
	waitFor(t, 15*time.Second, "the listeners to come back", func() bool { return listeners() == 3 })

	// Listeners just killed: the poll backstop (or the reconnect's catch-up
	// poll) must find a new job within the poll interval.
	pickup := func(queue string) time.Duration {
		t.Helper()
		var enqueued time.Time
		require.NoError(t, e.pool.QueryRow(context.Background(), "SELECT clock_timestamp()").Scan(&enqueued))
		id := e.enqueueTo(queue, 1, job{}, 20)[0]
		ids = append(ids, id)
		waitFor(t, 10*time.Second, "the new job to start", func() bool {
			return e.count("SELECT count(*) FROM public.runs WHERE job_id = $1", id) == 1
		})
		var started time.Time
		require.NoError(t, e.pool.QueryRow(context.Background(), "SELECT started_at FROM public.runs WHERE job_id = $1", id).Scan(&started))
		return started.Sub(enqueued)
	}
	require.Equal(t, 3, e.terminate("skiplock-listener"))
	withoutListener := pickup("default")
	waitFor(t, 15*time.Second, "the listeners to come back", func() bool { return listeners() == 3 })
	time.Sleep(pollEvery) // let the reconnect's catch-up poll pass
	withListener := pickup(notifyQueue)
	t.Logf("pickup latency: %s with the listeners just killed (poll interval %s), %s by NOTIFY after they reconnected (poll interval %s)",
		withoutListener, pollEvery, withListener, slowPoll)
	// Generous slack: two shared cores, race-instrumented workers. The
	// NOTIFY bound is far below the third worker's poll interval.
	require.Less(t, withoutListener, pollEvery+time.Second)
	require.Less(t, withListener, 10*time.Second)
	require.Less(t, 10*time.Second, slowPoll)

	e.waitDrained(10 * time.Second)
	for _, p := range ws {
		require.False(t, p.exited(), "%s died: %s", p.app, tail(p.logText(), 2000))
		p.signal(syscall.SIGTERM)
	}
	for _, p := range ws {
		require.True(t, p.wait(15*time.Second))
		require.NoError(t, p.err)
	}
	r := checkInvariants(t, e, checkOpts{committed: ids})
	require.Equal(t, len(ids), r.Completed)
	m.requireChecked(t, r)
	t.Logf("terminated %d listener and %d pool backends: lost 0 of %d", killedListeners, killedPool, len(ids))
}
