package faults

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/store"
)

// TestCheckerCatchesViolations proves the checker can fail: it seeds the
// histories with a stale holder's completion, a run without a claim, a job
// left behind and a run of a job nobody committed, and expects each to be
// reported. A checker that never fails would make every other test vacuous.
func TestCheckerCatchesViolations(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	ids := e.enqueue(3, job{}, 3)
	st := store.New("skiplock")

	// Claim the first job as "fw-holder.1", then complete it from a
	// connection of another process, bypassing the fence.
	jobs, err := st.Claim(ctx, e.pool, store.ClaimParams{Queues: []string{"default"}, Batch: 1, WorkerID: "fw-holder.1", Lease: lease})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	stale, err := pgx.Connect(ctx, e.appURL("fw-stale.1"))
	require.NoError(t, err)
	defer stale.Close(ctx)
	_, err = stale.Exec(ctx, "DELETE FROM skiplock.jobs WHERE id = $1", jobs[0].ID)
	require.NoError(t, err)
	// A run that no claim granted, and a run of a job that was never committed.
	_, err = e.pool.Exec(ctx, `INSERT INTO public.runs (job_id, attempt, worker, lease_token, pid, outcome)
		VALUES ($1, 1, 'x', 42, 1, 'ok'), (999999, 1, 'x', 43, 1, 'ok')`, ids[1])
	require.NoError(t, err)
	// ids[2] is never run: lost.

	r := analyze(t, e, checkOpts{committed: ids})
	all := strings.Join(r.violations, "\n")
	for _, want := range []string{
		"stale holder not fenced",
		"which no claim granted",
		"jobs left in the hot table",
		"ran but the test never committed it",
		"without a successful run of that lease",
	} {
		require.Contains(t, all, want)
	}
}
