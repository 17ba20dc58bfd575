package store_test

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/store"
)

// claimOrder returns queue's ready jobs as bounds, in claim order.
func claimOrder(t *testing.T, pool *pgxpool.Pool, queue string) []store.Bound {
	return readyOrder(t, pool, "queue = $1", queue)
}

// readyOrder returns the ready jobs that where selects as bounds, in claim
// order.
func readyOrder(t *testing.T, pool *pgxpool.Pool, where string, args ...any) []store.Bound {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT priority, run_at, id FROM skiplock.jobs
		WHERE state = 'ready' AND `+where+` ORDER BY priority DESC, run_at, id`, args...)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Bound, error) {
		var b store.Bound
		return b, r.Scan(&b.Priority, &b.RunAt, &b.ID)
	})
	require.NoError(t, err)
	return out
}

// claimJobs runs one claim and returns its jobs, for the tests that need
// nothing else of its result.
func claimJobs(ctx context.Context, st *store.Store, db store.DBTX, r store.ClaimRequest) ([]store.ClaimedJob, error) {
	res, err := st.Claim(ctx, db, r)
	return res.Jobs, err
}

func claimedIDs(jobs []store.ClaimedJob) map[int64]bool {
	out := map[int64]bool{}
	for _, j := range jobs {
		out[j.ID] = true
	}
	return out
}

func boundIDs(bs []store.Bound) map[int64]bool {
	out := map[int64]bool{}
	for _, b := range bs {
		out[b.ID] = true
	}
	return out
}

// A claim with a bound takes the jobs right after it in claim order
// (priority descending, then run_at, then id), crossing into lower
// priorities when the bound's own priority runs out; a queue without a bound
// in the same claim is read from the front.
func TestClaimAfterBound(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	st := store.New("skiplock")
	// Three priorities, run_at spread over the past (some equal, so id
	// breaks ties), ids interleaved across priorities.
	_, err := db.Pool.Exec(ctx, `INSERT INTO skiplock.jobs (queue, kind, priority, run_at)
		SELECT q, 'k', g % 3, now() - (g / 2) * interval '1 second'
		FROM generate_series(1, 60) AS g, (VALUES ('a'), ('b')) AS v(q)`)
	require.NoError(t, err)
	order := claimOrder(t, db.Pool, "a")
	require.Len(t, order, 60)
	fronts := claimOrder(t, db.Pool, "b")

	claim := func(after map[string]store.Bound, queues ...string) []store.ClaimedJob {
		t.Helper()
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }() // each case sees the same jobs
		jobs, err := claimJobs(ctx, st, tx, store.ClaimRequest{Queues: queues, Batch: 8, WorkerID: benchWorker,
			Lease: time.Minute, After: after})
		require.NoError(t, err)
		return jobs
	}

	for _, pos := range []int{0, 10, 19, 21, 39, 50} {
		got := claim(map[string]store.Bound{"a": order[pos]}, "a")
		want := order[pos+1 : min(pos+9, len(order))]
		require.Equal(t, boundIDs(want), claimedIDs(got), "bound at position %d (priority %d)", pos, order[pos].Priority)
	}
	require.Empty(t, claim(map[string]store.Bound{"a": order[59]}, "a"), "nothing after the last job")
	require.Equal(t, boundIDs(order[:8]), claimedIDs(claim(nil, "a")), "no bound: the front")

	// Two queues, a bound on one: the batch is the best 8 of a's jobs after
	// its bound and b's from the front, in claim order.
	got := claim(map[string]store.Bound{"a": order[30]}, "a", "b")
	merged := append(append([]store.Bound{}, order[31:]...), fronts...)
	best := map[int64]bool{}
	for len(best) < 8 {
		var next store.Bound
		found := false
		for _, b := range merged {
			if !best[b.ID] && (!found || b.Before(next)) {
				next, found = b, true
			}
		}
		best[next.ID] = true
	}
	require.Equal(t, best, claimedIDs(got))
}

// The point of the bound: with the vacuum horizon pinned, every job claimed
// and finished since the pin leaves an index entry and a row version at the
// front of the claim order that vacuum may not remove. A claim from the
// front reads all of them; a claim after the bound reads none.
func TestClaimAfterBoundSkipsPinnedDeadEntries(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	st := store.New("skiplock")
	_, err := db.Pool.Exec(ctx, `INSERT INTO skiplock.jobs (queue, kind, run_at)
		SELECT 'q', 'k', now() - interval '1 hour' + g * interval '1 millisecond' FROM generate_series(1, 12000) AS g`)
	require.NoError(t, err)

	// The pin: a transaction holding an xid, in this database (the horizon
	// of a table only counts its own database's transactions).
	db.Pin(t)

	var last store.ClaimedJob
	for done := 0; done < 10000; {
		jobs, err := claimJobs(ctx, st, db.Pool, store.ClaimRequest{Queues: []string{"q"}, Batch: 250,
			WorkerID: benchWorker, Lease: time.Minute})
		require.NoError(t, err)
		require.NotEmpty(t, jobs)
		ids := make([]int64, len(jobs))
		for i, j := range jobs {
			ids[i] = j.ID
			if store.BoundOf(last).Before(store.BoundOf(j)) || last.ID == 0 {
				last = j
			}
		}
		_, err = db.Pool.Exec(ctx, "DELETE FROM skiplock.jobs WHERE id = ANY ($1)", ids)
		require.NoError(t, err)
		done += len(jobs)
	}
	_, err = db.Pool.Exec(ctx, "VACUUM skiplock.jobs") // removes nothing: pinned
	require.NoError(t, err)

	front := claimBuffers(t, db.Pool, st, nil)
	after := claimBuffers(t, db.Pool, st, map[string]store.Bound{"q": store.BoundOf(last)})
	t.Logf("claim of 50 with 10,000 jobs processed since the pin: the ready index scan read %d buffers from the front, %d after the bound", front, after)
	require.Greater(t, front, 150, "the pin should leave dead entries at the front")
	require.Less(t, after*10, front, "a claim after the bound must not read the pinned dead entries")
}

// claimBuffers runs the claim under EXPLAIN (ANALYZE, BUFFERS), rolled back,
// and returns the buffers its scans of the ready index touched (the rest is
// the update of the 50 rows claimed, the same either way). Buffers count
// pages, not entries: consecutive dead entries on one heap page count once.
func claimBuffers(t *testing.T, pool *pgxpool.Pool, st *store.Store, after map[string]store.Bound) int {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	// The claim's pipeline: its settings first (no sequential scan: an empty
	// generation of the ring would otherwise be planned as one, and the
	// ordered read of the partitions as an Append and a Sort).
	_, err = tx.Exec(ctx, st.SQL("claim_settings"))
	require.NoError(t, err)
	args := []any{[]string{"q"}, nil, 50, benchWorker, int64(time.Minute / time.Microsecond)}
	args = append(args, store.BoundArgs([]string{"q"}, after)...)
	var plan []byte
	require.NoError(t, tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+st.SQL("claim"), args...).Scan(&plan))
	var out []struct {
		Plan planNode `json:"Plan"`
	}
	require.NoError(t, json.Unmarshal(plan, &out))
	require.Equal(t, 50, out[0].Plan.Rows)
	if os.Getenv("SKIPLOCK_SHOW_PLANS") != "" {
		t.Logf("%s", plan)
	}
	n := out[0].Plan.readyScans()
	require.Positive(t, n, "no scan of jobs_ready in the plan:\n%s", plan)
	return n
}

type planNode struct {
	Index string     `json:"Index Name"`
	Hit   int        `json:"Shared Hit Blocks"`
	Read  int        `json:"Shared Read Blocks"`
	Rows  int        `json:"Actual Rows"`
	Plans []planNode `json:"Plans"`
}

// readyScans sums the buffers of the plan's scans of jobs_ready in
// jobs_keyed, the partition the tests' rows (inserted without a generation)
// are in; the ring's empty generations add a few buffers per scan whatever
// the pin, which is not what these tests measure.
func (n planNode) readyScans() int { return n.indexScans("jobs_ready_keyed") }

// indexScans sums the buffers of the plan's scans of the named indexes.
func (n planNode) indexScans(indexes ...string) int {
	sum := 0
	if slices.Contains(indexes, n.Index) {
		sum += n.Hit + n.Read
	}
	for _, c := range n.Plans {
		sum += c.indexScans(indexes...)
	}
	return sum
}
