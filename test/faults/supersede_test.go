package faults

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

// TestSupersedeUnderKill9: producers supersede four keys again and again
// while three worker processes run them and get killed with SIGKILL. The
// checker (checkOpts.supersede) holds the history to its invariants: every
// superseded run's lease ends at the supersede and the run never completes
// (its handler, which ignores cancellation, claims success: the fence
// refuses it), no key ever has two live rows (so never two leases), no
// stale write, nothing lost; and the newest job of each key completes.
func TestSupersedeUnderKill9(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	names := []string{"a", "b", "c"}
	ws := map[string]*proc{}
	for _, n := range names {
		ws[n] = e.worker(n, "-archive")
	}
	keys := []string{"doc1", "doc2", "doc3", "doc4"}
	var ids []int64
	newest := map[string]int64{}
	kills := 0
	for i := range 120 {
		key := keys[i%len(keys)]
		r, err := e.client.Enqueue(ctx, skiplock.EnqueueParams{Kind: "job", Payload: job{Sleep: []int{60 + i%5*40}},
			MaxAttempts: 10, UniqueKey: key, Supersede: true})
		require.NoError(t, err)
		if r.Inserted {
			ids = append(ids, r.ID)
		}
		newest[key] = r.ID
		time.Sleep(15 * time.Millisecond)
		if i%30 == 29 {
			n := names[kills%len(names)]
			ws[n].kill9(t)
			kills++
			ws[n] = e.worker(n, "-archive")
		}
	}

	e.waitDrained(90 * time.Second)
	for _, p := range ws {
		p.signal(syscall.SIGTERM)
	}
	for _, p := range ws {
		require.True(t, p.wait(15*time.Second), "%s did not drain", p.app)
	}

	r := checkInvariants(t, e, checkOpts{committed: ids, archive: true, supersede: true})
	require.Equal(t, len(ids), r.Completed+r.Dead, "every job completed or was superseded")
	require.Positive(t, r.Superseded, "the producers superseded running jobs")
	for key, id := range newest {
		require.Equal(t, 1, e.count("SELECT count(*) FROM skiplock.jobs_done WHERE id = $1", id), "the newest job of %s completed", key)
	}
	refused := e.count(`SELECT count(*) FROM public.runs AS r WHERE r.outcome = 'ok'
		AND r.job_id IN (SELECT id FROM skiplock.jobs_dead WHERE last_error = 'superseded')`)
	t.Logf("supersede under kill -9: %d kills, %d jobs inserted by %d enqueues, %d running leases superseded, %d of their runs claimed success and were refused; %s",
		kills, len(ids), 120, r.Superseded, refused, r)
}
