package faults

import (
	"encoding/json"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestKill9AfterHandOff kills, with SIGKILL, a worker that enqueues its own
// jobs (Client.Enqueue while its pool waits idle claims each for the pool
// in the enqueue's transaction: the hand-off) while handed-off jobs run.
// Those jobs are running, leased to the dead process, with no claim of
// its own ever made; the survivor's reaper hands them back once their
// leases expire and it runs them. Nothing may be lost, every write is
// fenced, and every job completes.
func TestKill9AfterHandOff(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	marker := plainMarker + "self-"
	// Executors to spare and a gap longer than a claim: a job is handed
	// off only while the pool waits idle with an executor free, and with 4
	// executors, 40 ms between enqueues and a slow CI machine, the jobs
	// enqueued while the pool was still claiming the one before (after its
	// NOTIFY) filled the executors before a second hand-off (CI,
	// 2026-11-30: 1 of 12 handed off in 15 s).
	h := e.worker("h", "-archive", "-concurrency", "16", "-self", "12", "-self-marker", marker,
		"-self-sleep", "600", "-self-gap", "150ms")
	enqueued := regexp.MustCompile(`faultworker: enqueued (\d+) self (\d+) handed (\d+)`)
	handed := func() int {
		m := enqueued.FindAllStringSubmatch(h.logText(), -1)
		if len(m) == 0 {
			return 0
		}
		n, _ := strconv.Atoi(m[len(m)-1][3])
		return n
	}
	waitFor(t, 15*time.Second, "jobs handed off and running", func() bool {
		return handed() >= 2 && e.inFlight(h.app) > 0
	})
	h.kill9(t)

	// The jobs the dead worker committed, with their payloads, for the
	// checker (each one's marker is rebuilt from its index).
	var ids []int64
	commit := func(id int64, i int) {
		raw, err := json.Marshal(job{Sleep: []int{600}, Marker: marker + strconv.Itoa(i)})
		require.NoError(t, err)
		e.mu.Lock()
		e.enqueued[id] = enqueuedPayload{json: raw}
		e.mu.Unlock()
		ids = append(ids, id)
	}
	next := 0
	for _, m := range enqueued.FindAllStringSubmatch(h.logText(), -1) {
		id, _ := strconv.ParseInt(m[1], 10, 64)
		i, _ := strconv.Atoi(m[2])
		commit(id, i)
		next = i + 1
	}
	// The enqueue after the last one logged may have committed with the
	// kill landing before its log line (a slow, loaded CI machine,
	// 2026-11-30: the checker then saw a job in the audit that the test did
	// not know it had committed). Its outcome is in doubt only for the
	// test: each enqueue is a transaction of its own, so the database says
	// whether it committed. The dead worker's jobs are all still in the hot
	// table (nothing else runs them yet).
	if id, ok := e.jobByMarker(marker + strconv.Itoa(next)); ok {
		commit(id, next)
	}
	require.GreaterOrEqual(t, handed(), 2)
	cut := e.count("SELECT count(*) FROM public.runs WHERE outcome IS NULL")
	require.Positive(t, cut, "no handed-off run was cut by the kill")

	b := e.worker("b", "-archive")
	e.waitDrained(60 * time.Second)
	b.signal(syscall.SIGTERM)
	require.True(t, b.wait(15*time.Second), "b did not drain")
	require.NoError(t, b.err)

	r := checkInvariants(t, e, checkOpts{committed: ids, archive: true})
	require.Equal(t, len(ids), r.Completed)
	require.GreaterOrEqual(t, r.Reaped, 1, "the dead worker's leases were reaped")
	require.GreaterOrEqual(t, r.Reruns, 1, "a cut run ran again")
}
