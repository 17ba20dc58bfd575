package faults

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

// TestTenantCapHoldsThroughKill9AndSIGSTOP runs three worker processes with
// the tenant-capped claim (cap 2, batch 4) over 60 jobs of five tenants
// while one is killed with SIGKILL and another frozen past its lease with
// SIGSTOP: the capped claim locks and fences as the plain one does, so the
// checker's invariants hold (every committed job finished once under a held
// lease, nothing lost) and the queue drains.
func TestTenantCapHoldsThroughKill9AndSIGSTOP(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	var ids []int64
	for i := range 60 {
		r, err := e.client.Enqueue(ctx, skiplock.EnqueueParams{Kind: "job", Payload: job{Sleep: []int{60, 120}},
			MaxAttempts: 10, Tenant: fmt.Sprint("t", i%5)})
		require.NoError(t, err)
		ids = append(ids, r.ID)
	}
	b, c := e.killOneFreezeOne(t, "-tenant-cap", "2", "-batch", "4")
	e.waitDrained(90 * time.Second)
	for _, p := range []*proc{b, c} {
		p.signal(syscall.SIGTERM)
		require.True(t, p.wait(15*time.Second))
	}
	require.Positive(t, e.count("SELECT count(*) FROM public.audit WHERE tbl = 'jobs' AND reaper"),
		"the killed or frozen worker's leases should have been reaped")
	checkInvariants(t, e, checkOpts{committed: ids})
}
