package faults

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/store"
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
	require.Positive(t, r.TokenWrites, "no holder write recorded its lease token: the per-token fence check saw nothing")
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

	require.Equal(t, 1, e.count("SELECT count(*) FROM public.audit WHERE tbl = 'jobs' AND op = 'delete' AND job_id = $1 AND app = $2", id, a.app),
		"the stale worker's completion did not land: the seeded bug was not exercised")

	// a's stale completion carried its reaped lease's token and came from
	// another process than the holder's: both fencing checks fire, and b's
	// run, cancelled when its lease vanished, never succeeded. a's stale
	// heartbeat may land too, before its completion, or not.
	r := analyze(t, e, checkOpts{committed: []int64{id}})
	t.Logf("checker on the seeded bug: %s", r)
	requireKindsAmong(t, r, []string{vStaleToken, vStaleWrite, vCompletedNoOKRun}, vStaleHeartbeat)
	require.Equal(t, 1, r.Reaped, "a's lease was not reaped: the freeze cost nothing")
}

// TestSeededBugSameProcessIsCaught is the case a per-process fence check
// cannot see: a worker built without the lease fence is frozen past its
// lease, the reaper takes the job, and the same worker, resumed, claims it
// again under a new lease; then its first execution ends and completes
// with the old lease's token, deleting the row its own new lease holds.
// Every write comes from the holder's process, so only the per-token check
// (the audit's presented token against the row's) reports it.
func TestSeededBugSameProcessIsCaught(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.workerProgram = "faultworker-seedbug"
	ctx := context.Background()
	// Attempt 1 outlives the freeze and the re-claim; attempt 2 is still
	// running when attempt 1 completes.
	id := e.enqueue(1, job{Sleep: []int{12000, 30000}}, 5)[0]
	st := store.New("skiplock")

	a := e.worker("a", "-reaper", "-1s")
	waitFor(t, 10*time.Second, "a to start the job", func() bool { return e.inFlight(a.app) == 1 })
	a.signal(syscall.SIGSTOP)
	waitFor(t, 10*time.Second, "the reaper to take a's expired lease", func() bool {
		back, _, err := st.Reap(ctx, e.pool, 10)
		require.NoError(t, err)
		return back == 1
	})
	a.signal(syscall.SIGCONT)
	waitFor(t, 8*time.Second, "a to claim the job again and start attempt 2", func() bool {
		return e.count("SELECT count(*) FROM public.runs WHERE job_id = $1 AND worker = $2 AND attempt = 2", id, a.app) == 1
	})
	waitFor(t, 20*time.Second, "the job to leave the hot table", func() bool {
		return e.count("SELECT count(*) FROM skiplock.jobs WHERE id = $1", id) == 0
	})
	time.Sleep(2 * heartbeat)
	a.signal(syscall.SIGTERM)
	require.True(t, a.wait(20*time.Second))

	r := analyze(t, e, checkOpts{committed: []int64{id}})
	t.Logf("checker on the seeded bug, one process: %s", r)
	// a's stale heartbeat may have touched the ready row before a claimed
	// it again (token-write-to-idle-row); the process check sees nothing.
	requireKindsAmong(t, r, []string{vStaleToken, vCompletedNoOKRun}, vTokenOnIdleRow)
	require.Equal(t, 2, e.count("SELECT count(DISTINCT lease_token) FROM public.runs WHERE job_id = $1 AND worker = $2", id, a.app),
		"a did not run the job under two leases")
}
