package faults

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestKill9WorkersMidBatch kills worker processes with SIGKILL while they
// run a batch, restarts them (as a new process: a new worker id), and lets
// the survivors' reapers hand the dead workers' jobs back once their leases
// expire. Nothing may be lost, the cut executions must run again (under a
// new lease, only after the old one expired), and every claim counts as an
// attempt. It runs with plain payloads and with payloads sealed
// (eachPayloadMode).
func TestKill9WorkersMidBatch(t *testing.T) {
	t.Parallel()
	eachPayloadMode(t, 160, 96, kill9WorkersMidBatch)
}

func kill9WorkersMidBatch(t *testing.T, m payloadMode) {
	e := newEnv(t)
	m.apply(e)
	ids := e.enqueue(m.jobs, job{Sleep: []int{300}}, 10)
	names := []string{"a", "b", "c"}
	ws := map[string]*proc{}
	for _, n := range names {
		ws[n] = e.worker(n, "-archive")
	}

	// Each round kills a worker that has jobs in flight, the next in turn
	// first. The queue is done only when the hot table is empty: the jobs
	// of a killed worker are not ready until the reapers hand them back,
	// and a loaded machine (2026-11-30) reached "nothing ready" after one
	// kill, and the loop stopped there.
	kills := 0
	for kills < 4 {
		var n string
		waitFor(t, 15*time.Second, "a worker running jobs", func() bool {
			for k := range names {
				if c := names[(kills+k)%len(names)]; e.inFlight(ws[c].app) > 0 {
					n = c
					return true
				}
			}
			n = ""
			return e.count("SELECT count(*) FROM skiplock.jobs") == 0
		})
		if n == "" {
			break // the queue ran dry first
		}
		ws[n].kill9(t)
		kills++
		ws[n] = e.worker(n, "-archive")
		time.Sleep(300 * time.Millisecond)
	}
	require.GreaterOrEqual(t, kills, 3, "the kills must land on workers with jobs in flight")

	e.waitDrained(60 * time.Second)
	for _, p := range ws {
		p.signal(syscall.SIGTERM)
	}
	for _, p := range ws {
		require.True(t, p.wait(15*time.Second), "%s did not drain", p.app)
		require.NoError(t, p.err, "%s exit", p.app)
	}

	r := checkInvariants(t, e, checkOpts{committed: ids, archive: true})
	require.Equal(t, len(ids), r.Completed)
	m.requireChecked(t, r)

	// Every execution a kill cut short ran again, to success, at a later
	// attempt (the checker already verified: only after its lease expired).
	type cut struct {
		job     int64
		attempt int
	}
	var cuts []cut
	rows, err := e.pool.Query(context.Background(), "SELECT job_id, attempt FROM public.runs WHERE outcome IS NULL")
	require.NoError(t, err)
	for rows.Next() {
		var c cut
		require.NoError(t, rows.Scan(&c.job, &c.attempt))
		cuts = append(cuts, c)
	}
	require.NoError(t, rows.Err())
	require.NotEmpty(t, cuts, "no execution was cut by a kill")
	for _, c := range cuts {
		require.Equal(t, 1, e.count("SELECT count(*) FROM public.runs WHERE job_id = $1 AND outcome = 'ok' AND attempt > $2", c.job, c.attempt),
			"job %d cut at attempt %d did not rerun to success", c.job, c.attempt)
		require.Greater(t, r.Attempts[c.job], c.attempt, "job %d: the cut attempt was not counted", c.job)
		require.Equal(t, r.Attempts[c.job], e.count("SELECT attempts FROM skiplock.jobs_done WHERE id = $1", c.job))
	}
	require.GreaterOrEqual(t, r.Reaped, len(cuts), "each cut lease comes back through the reaper")
	t.Logf("kill -9: %d kills cut %d executions; lost 0 of %d; reaped %d leases; %d jobs ran more than once",
		kills, len(cuts), len(ids), r.Reaped, r.Reruns)
}
