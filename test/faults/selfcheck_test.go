package faults

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/store"
)

// TestCheckerCatchesViolations proves the checker can fail on histories
// written by the real triggers of a real database (checker_seed_test.go
// does it for every kind on synthetic histories): it seeds a stale
// holder's completion, a run without a claim, jobs left behind and a run
// of a job nobody committed, and expects exactly those kinds.
func TestCheckerCatchesViolations(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	ids := e.enqueue(3, job{}, 3)
	st := store.New("skiplock")

	// Claim the first job as "fw-holder.1", then complete it from a
	// connection of another process, bypassing the fence.
	res, err := st.Claim(ctx, e.pool, store.ClaimRequest{Queues: []string{"default"}, Batch: 1, WorkerID: "fw-holder.1", Lease: lease})
	require.NoError(t, err)
	jobs := res.Jobs
	require.Len(t, jobs, 1)
	e.own("fw-holder.1")
	stale, err := pgx.Connect(ctx, e.appURL("fw-stale.1"))
	require.NoError(t, err)
	defer stale.Close(ctx)
	_, err = stale.Exec(ctx, "DELETE FROM skiplock.jobs WHERE id = $1", jobs[0].ID)
	require.NoError(t, err)
	// A run that no claim granted (of the payload enqueued, as a handler
	// records it), and a run of a job that was never committed.
	_, err = e.pool.Exec(ctx, `INSERT INTO public.runs (job_id, attempt, worker, lease_token, pid, outcome, payload)
		VALUES ($1, 1, 'x', 42, 1, 'ok', (SELECT payload FROM skiplock.jobs WHERE id = $1)), (999999, 1, 'x', 43, 1, 'ok', NULL)`, ids[1])
	require.NoError(t, err)
	// ids[1] and ids[2] are never claimed: left behind.

	r := analyze(t, e, checkOpts{committed: ids})
	requireKinds(t, r, vStaleWrite, vCompletedNoOKRun, vRunWithoutClaim, vLeftBehind, vUncommittedRan)
}

// TestCheckerFencesPerLeaseToken seeds, through the real triggers, what a
// build without the lease fence lets one process do: it holds a job under
// lease 1, the reaper takes that lease, the same process claims the job
// again under lease 2, and then its stale completion for lease 1 lands.
// The writer is the lease holder by process (same application_name and
// worker id), so only the per-token check can see it.
func TestCheckerFencesPerLeaseToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	id := e.enqueue(1, job{}, 3)[0]
	st := store.New("skiplock")
	const holder = "fw-same.1"
	e.own(holder)
	conn, err := pgx.Connect(ctx, e.appURL(holder))
	require.NoError(t, err)
	defer conn.Close(ctx)

	res, err := st.Claim(ctx, conn, store.ClaimRequest{Queues: []string{"default"}, Batch: 1, WorkerID: holder, Lease: time.Millisecond})
	require.NoError(t, err)
	first := res.Jobs
	require.Len(t, first, 1)
	waitFor(t, 5*time.Second, "the first lease to be reaped", func() bool {
		back, _, err := st.Reap(ctx, e.pool, 10)
		require.NoError(t, err)
		return back == 1
	})
	res, err = st.Claim(ctx, conn, store.ClaimRequest{Queues: []string{"default"}, Batch: 1, WorkerID: holder, Lease: lease})
	require.NoError(t, err)
	second := res.Jobs
	require.Len(t, second, 1)
	require.NotEqual(t, first[0].LeaseToken, second[0].LeaseToken)
	// The second lease's run succeeds, so only the token betrays the write.
	_, err = e.pool.Exec(ctx, `INSERT INTO public.runs (job_id, attempt, worker, lease_token, pid, outcome, finished_at, payload)
		VALUES ($1, 2, $2, $3, 1, 'ok', clock_timestamp(), (SELECT payload FROM skiplock.jobs WHERE id = $1))`, id, holder, second[0].LeaseToken)
	require.NoError(t, err)

	// The stale completion: it presents the first token, as the
	// faultworker's tracer would record it, and no fence stops it.
	const del = "DELETE FROM skiplock.jobs AS j WHERE j.id = $1"
	sum := md5.Sum([]byte(del))
	presented := fmt.Sprintf(`{"%s": {"%d": %d}}`, hex.EncodeToString(sum[:]), id, first[0].LeaseToken)
	_, err = conn.Exec(ctx, "SELECT set_config('skiplock_test.presented', $1, false)", presented)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, del, id)
	require.NoError(t, err)

	r := analyze(t, e, checkOpts{committed: []int64{id}})
	requireKinds(t, r, vStaleToken)
	require.Equal(t, 1, r.TokenWrites)
	require.Equal(t, 1, r.Completed)
}

// TestCheckerSeesPlaintextAtRest seeds, through the real triggers, what a
// broken sealing would leave behind: a job enqueued sealed whose row is
// rewritten with its plaintext, and a run that got another job's payload.
// The audit's look at each row version written must see the first, the
// run check the second.
func TestCheckerSeesPlaintextAtRest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.encrypt()
	ctx := context.Background()
	ids := e.enqueue(2, job{}, 3)
	sent := e.enqueuedPayloads()
	_, err := e.pool.Exec(ctx, "UPDATE skiplock.jobs SET payload = $2::jsonb WHERE id = $1", ids[0], string(sent[ids[0]].json))
	require.NoError(t, err)
	_, err = e.pool.Exec(ctx, `INSERT INTO public.runs (job_id, attempt, worker, lease_token, pid, outcome, payload)
		VALUES ($1, 1, 'x', 42, 1, 'fail', $2::jsonb)`, ids[1], string(sent[ids[0]].json))
	require.NoError(t, err)

	r := analyze(t, e, checkOpts{committed: ids})
	requireKinds(t, r, vPlainAtRest, vPayloadMismatch, vRunWithoutClaim, vLeftBehind)
	require.Equal(t, 2, r.SealedWrites, "the two inserts")
	require.Equal(t, 1, r.PlainWrites, "the rewrite")
}

// requireKinds requires the report's violations to be exactly of the
// given kinds (each at least once, no other kind).
func requireKinds(t *testing.T, r *report, kinds ...string) {
	t.Helper()
	want := map[string]bool{}
	for _, k := range kinds {
		want[k] = true
	}
	got := r.kinds()
	for _, v := range r.violations {
		t.Logf("  %s", v)
	}
	for k := range want {
		require.Contains(t, got, k, "the checker did not report %s", k)
	}
	for k := range got {
		require.True(t, want[k], "the checker reported %s, which the seeded history does not contain", k)
	}
}

// requireKindsAmong requires every kind of must to be reported, and any
// other kind reported to be one of may (for seeded faults whose side
// effects depend on timing).
func requireKindsAmong(t *testing.T, r *report, must []string, may ...string) {
	t.Helper()
	allowed := map[string]bool{}
	for _, k := range append(append([]string(nil), must...), may...) {
		allowed[k] = true
	}
	got := r.kinds()
	for _, v := range r.violations {
		t.Logf("  %s", v)
	}
	for _, k := range must {
		require.Contains(t, got, k, "the checker did not report %s", k)
	}
	for k := range got {
		require.True(t, allowed[k], "the checker reported %s, which the seeded fault does not explain", k)
	}
}
