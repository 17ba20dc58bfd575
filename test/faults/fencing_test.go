package faults

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSIGSTOPPastLeaseIsFenced freezes a worker (SIGSTOP, standing in for a
// long GC pause or a stalled VM) while it runs two jobs, for longer than
// its lease. Another worker reaps and completes both. When the frozen
// worker resumes (SIGCONT), one job's handler is done sleeping (it finishes
// or sees its cancellation, whichever wins on resume) and the other is still
// sleeping: the first's completion and the second's heartbeat must both be
// rejected by the lease fence, the second's handler
// cancelled with ErrLeaseLost, and each job completed exactly once, by the
// second worker.
func TestSIGSTOPPastLeaseIsFenced(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	short := e.enqueue(1, job{Sleep: []int{1500, 100}}, 5)[0] // done by the time it resumes
	long := e.enqueue(1, job{Sleep: []int{60000, 100}}, 5)[0] // still running when it resumes
	ids := []int64{short, long}

	a := e.worker("a", "-archive", "-reaper", "-1s")
	waitFor(t, 10*time.Second, "a to start both jobs", func() bool { return e.inFlight(a.app) == 2 })
	a.signal(syscall.SIGSTOP)
	stoppedAt := time.Now()

	b := e.worker("b", "-archive")
	waitFor(t, 15*time.Second, "b to complete both jobs", func() bool {
		return e.count("SELECT count(*) FROM skiplock.jobs_done WHERE locked_by = $1", b.app) == 2
	})
	if d := 3*lease - time.Since(stoppedAt); d > 0 {
		time.Sleep(d) // frozen for three leases
	}
	var resumedAt time.Time
	require.NoError(t, e.pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&resumedAt))
	a.signal(syscall.SIGCONT)

	// The long job's handler is cancelled within a heartbeat or two.
	waitFor(t, 5*time.Second, "a's long handler to be cancelled", func() bool {
		return e.count("SELECT count(*) FROM public.runs WHERE worker = $1 AND job_id = $2 AND outcome IS NOT NULL", a.app, long) == 1
	})
	var outcome string
	require.NoError(t, e.pool.QueryRow(ctx, "SELECT outcome FROM public.runs WHERE worker = $1 AND job_id = $2", a.app, long).Scan(&outcome))
	require.Equal(t, "ctx: skiplock: lease lost", outcome)
	// The short handler's sleep ended while a was frozen: on resume its timer
	// and the heartbeat's cancellation race, and either may win (when the
	// timer does, its own bookkeeping write sees the cancelled context).
	// Either way its result must be discarded: a's stats below count both
	// jobs as lease_lost and none completed, and the audit shows no write.

	// Let a try to write (its completer and heartbeat), then drain it.
	time.Sleep(2 * heartbeat)
	a.signal(syscall.SIGTERM)
	require.True(t, a.wait(15*time.Second))
	require.NoError(t, a.err)
	st := a.stats(t)
	require.EqualValues(t, 2, st["lease_lost"], "a must find both leases gone: %v", st)
	require.EqualValues(t, 0, st["completed"], "a must complete nothing: %v", st)
	b.signal(syscall.SIGTERM)
	require.True(t, b.wait(15*time.Second))

	// Nothing a wrote after it resumed landed.
	require.Zero(t, e.count("SELECT count(*) FROM public.audit WHERE app = $1 AND at >= $2", a.app, resumedAt),
		"a stale holder's write was accepted")
	for _, id := range ids {
		require.Equal(t, 1, e.count("SELECT count(*) FROM skiplock.jobs_done WHERE id = $1 AND locked_by = $2 AND attempts = 2", id, b.app),
			"job %d must be completed exactly once, by b, at attempt 2", id)
	}
	r := checkInvariants(t, e, checkOpts{committed: ids, archive: true})
	require.Equal(t, 2, r.Completed)
	require.Equal(t, 2, r.Reaped)
}

// TestSeededBugIsCaught runs the frozen-worker case above with workers
// built without the lease fence (the skiplock_seedbug tag): the stale
// worker's completion then deletes the job while the new holder runs it.
// The checker must report it, and the fenced build (the test above) must
// not: a checker that cannot fail would make every fault test vacuous.
func TestSeededBugIsCaught(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.workerProgram = "faultworker-seedbug"
	// Attempt 1 (a) sleeps past a's freeze; attempt 2 (b) is still running
	// when a wakes and completes its stale attempt.
	id := e.enqueue(1, job{Sleep: []int{2500, 8000}}, 5)[0]

	a := e.worker("a", "-reaper", "-1s")
	waitFor(t, 10*time.Second, "a to start the job", func() bool { return e.inFlight(a.app) == 1 })
	a.signal(syscall.SIGSTOP)
	b := e.worker("b")
	waitFor(t, 20*time.Second, "b to take the job over", func() bool { return e.inFlight(b.app) == 1 })
	a.signal(syscall.SIGCONT)
	waitFor(t, 20*time.Second, "the job to leave the hot table", func() bool {
		return e.count("SELECT count(*) FROM skiplock.jobs WHERE id = $1", id) == 0
	})
	time.Sleep(2 * heartbeat)
	for _, p := range []*proc{a, b} {
		p.signal(syscall.SIGTERM)
		require.True(t, p.wait(20*time.Second))
	}

	r := analyze(t, e, checkOpts{committed: []int64{id}})
	t.Logf("checker on the seeded bug: %s", r)
	for _, v := range r.violations {
		t.Logf("  %s", v)
	}
	require.NotEmpty(t, r.violations, "the checker found nothing wrong with a build that has no lease fence")
	require.Equal(t, 1, e.count("SELECT count(*) FROM public.audit WHERE tbl = 'jobs' AND op = 'delete' AND job_id = $1 AND app = $2", id, a.app),
		"the stale worker's completion did not land: the seeded bug was not exercised")
}
