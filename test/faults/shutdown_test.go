package faults

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSIGTERMDrainsSecondStopsAtOnce: the first SIGTERM makes a worker stop
// claiming and wait for its running jobs (it stays up while they run); the
// second stops it at once, and its jobs are handed back to ready right
// away, not after their lease expires. Checked for the Go library worker
// and for `skiplock work --exec` (whose children are killed).
func TestSIGTERMDrainsSecondStopsAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	slow := job{Sleep: []int{60_000, 100}} // far longer than any drain here
	ids := e.enqueue(4, slow, 5)

	for _, w := range []struct {
		name  string
		start func() *proc
	}{
		{"go", func() *proc { return e.worker("go", "-concurrency", "2", "-drain", "30s", "-lease", "20s") }},
		{"exec", func() *proc {
			return e.execWorker("x", `"`+program(t, "faultworker")+`" child`, "--concurrency", "2",
				"--drain-timeout", "30s", "--lease", "20s", "--poll-interval", "200ms")
		}},
	} {
		lastRun := e.count("SELECT coalesce(max(id), 0) FROM public.runs")
		p := w.start()
		// Its handlers started (claimed-ahead jobs may be running too).
		waitFor(t, 15*time.Second, w.name+" to start 2 handlers", func() bool {
			return e.count("SELECT count(*) FROM public.runs WHERE id > $1 AND outcome IS NULL", lastRun) == 2
		})
		p.signal(syscall.SIGTERM)
		// Draining hands back what it claimed but did not start, keeps the two
		// running, and stays up for them.
		waitFor(t, 5*time.Second, w.name+" to hand back unstarted jobs", func() bool {
			return e.count("SELECT count(*) FROM skiplock.jobs WHERE state = 'running'") == 2
		})
		time.Sleep(time.Second)
		require.False(t, p.exited(), "%s: the first SIGTERM must drain, not exit, while jobs run", w.name)
		require.Equal(t, 2, e.count("SELECT count(*) FROM skiplock.jobs WHERE state = 'running'"),
			"%s: draining keeps running jobs and claims no more", w.name)

		stopAt := time.Now()
		p.signal(syscall.SIGTERM)
		require.True(t, p.wait(10*time.Second), "%s: the second SIGTERM must stop it at once", w.name)
		t.Logf("%s: stopped %s after the second SIGTERM", w.name, time.Since(stopAt).Round(time.Millisecond))
		require.Zero(t, e.count("SELECT count(*) FROM skiplock.jobs WHERE state = 'running'"),
			"%s: nothing may be left running after a hard stop", w.name)
		require.Equal(t, 4, e.count("SELECT count(*) FROM skiplock.jobs WHERE state = 'ready' AND id = ANY($1)", ids),
			"%s: its jobs are back to ready at once", w.name)
	}
	// Let the long sleepers go: the next owner would run them for a minute.
	_, err := e.pool.Exec(t.Context(), "DELETE FROM skiplock.jobs")
	require.NoError(t, err)
}
