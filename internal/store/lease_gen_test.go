package store_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/store"
)

// A claim's lease token names the partition that holds its job (claim_set:
// the sequence's value × 16 + the generation + 1), and a batched fenced
// write probes that partition alone (lease_gen): completing a job of the
// ring and one of jobs_keyed runs the primary-key probe of the two
// partitions that hold them, once each, and never the other partitions'.
// The same completion with the tokens' partitions swapped lands nowhere.
func TestLeaseTokenNamesThePartition(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	st := store.New("skiplock")

	var ring int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT skiplock.ring_size()").Scan(&ring))
	require.LessOrEqual(t, ring, 15, "a token's four low bits hold jobs_keyed and every generation of the ring")

	entity := "e1"
	_, _, err := st.Enqueue(ctx, db.Pool, store.EnqueueArgs{Queue: "q", Kind: "k", Payload: "{}"})
	require.NoError(t, err)
	_, _, err = st.Enqueue(ctx, db.Pool, store.EnqueueArgs{Queue: "q", Kind: "k", Payload: "{}", Entity: &entity})
	require.NoError(t, err)
	jobs, err := claimJobs(ctx, st, db.Pool, store.ClaimRequest{Queues: []string{"q"}, Batch: 2, WorkerID: "w", Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, jobs, 2)

	var leases, swapped []store.Lease
	held := map[string]bool{} // the partitions that hold the two jobs
	for _, j := range jobs {
		var gen, seq int64
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT j.gen, s.last_value FROM skiplock.jobs AS j, skiplock.lease_tokens AS s
			WHERE j.id = $1`, j.ID).Scan(&gen, &seq))
		require.Equal(t, gen+1, j.LeaseToken%16, "job %d, generation %d, token %d", j.ID, gen, j.LeaseToken)
		require.LessOrEqual(t, j.LeaseToken/16, seq, "the rest of the token is a value of lease_tokens")
		part := fmt.Sprintf("jobs_g%d", gen)
		if gen == -1 {
			part = "jobs_keyed"
		}
		held[part] = true
		leases = append(leases, store.Lease{ID: j.ID, Token: j.LeaseToken})
	}
	require.Len(t, held, 2, "one job in the ring, one in jobs_keyed")
	// Each token with the other's partition: the right row, the wrong partition.
	for i, l := range leases {
		other := leases[1-i].Token % 16
		swapped = append(swapped, store.Lease{ID: l.ID, Token: l.Token - l.Token%16 + other})
	}

	explain := func(ls []store.Lease) string {
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, st.SQL("write_batch_settings"))
		require.NoError(t, err)
		q := st.CompleteQuery(ls, "w", false, false)
		rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) "+q.SQL, q.Args...)
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return strings.Join(lines, "\n")
	}

	plan := explain(leases)
	probe := regexp.MustCompile(`Index Scan using jobs_pkey_\w+ on (jobs_\w+) j_\d+ \((never executed|actual rows=(\d+) loops=(\d+))\)`)
	probes := probe.FindAllStringSubmatch(plan, -1)
	require.Len(t, probes, ring+1, "a probe of every partition's key in the plan:\n%s", plan)
	for _, p := range probes {
		if held[p[1]] {
			require.Equal(t, "1", p[3], "%s holds one of the jobs:\n%s", p[1], plan)
			require.Equal(t, "1", p[4], "%s is probed once, for its lease alone:\n%s", p[1], plan)
		} else {
			require.Equal(t, "never executed", p[2], "%s holds neither job:\n%s", p[1], plan)
		}
	}
	require.Contains(t, plan, "Delete on jobs j (actual rows=2 loops=1)", "both completions land:\n%s", plan)

	plan = explain(swapped)
	require.Contains(t, plan, "Delete on jobs j (actual rows=0 loops=1)", "a token that names another partition matches nothing:\n%s", plan)
}
