package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/store"
)

// Benchmarks of the runtime's hot statements. `make bench` runs them with
// -benchtime 3x as a smoke test; for figures use e.g.
//
//	go test -run '^$' -bench . -benchtime 2s ./internal/store

const benchWorker = "bench-worker"

// seedReady inserts n due jobs into queue with one statement.
func seedReady(tb testing.TB, pool *pgxpool.Pool, queue string, n int) {
	tb.Helper()
	_, err := pool.Exec(context.Background(), `INSERT INTO skiplock.jobs (queue, kind, priority, payload, run_at)
		SELECT $1, 'bench', g % 11, jsonb_build_object('n', g), now() - interval '1 second'
		FROM generate_series(1, $2::int) AS g`, queue, n)
	require.NoError(tb, err)
	_, err = pool.Exec(context.Background(), "ANALYZE skiplock.jobs")
	require.NoError(tb, err)
}

// claimAll claims n jobs of queue in batches of batch and returns their leases.
func claimAll(tb testing.TB, st *store.Store, pool *pgxpool.Pool, queue string, n, batch int) []store.Lease {
	tb.Helper()
	out := make([]store.Lease, 0, n)
	for len(out) < n {
		jobs, err := claimJobs(context.Background(), st, pool, store.ClaimRequest{Queues: []string{queue}, Batch: min(batch, n-len(out)),
			WorkerID: benchWorker, Lease: time.Minute})
		require.NoError(tb, err)
		require.NotEmpty(tb, jobs, "ran out of jobs to claim")
		for _, j := range jobs {
			out = append(out, store.Lease{ID: j.ID, Token: j.LeaseToken})
		}
	}
	return out
}

// BenchmarkClaim50 claims a batch of 50 due jobs per op (store.Claim: one
// statement) from a backlog of 50 per op.
func BenchmarkClaim50(b *testing.B) {
	db := dbtest.New(b)
	st := store.New("skiplock")
	seedReady(b, db.Pool, "bench", 50*b.N+50)
	ctx := context.Background()
	p := store.ClaimRequest{Queues: []string{"bench"}, Batch: 50, WorkerID: benchWorker, Lease: time.Minute}
	_, err := st.Claim(ctx, db.Pool, p) // warm the statement cache
	require.NoError(b, err)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		jobs, err := claimJobs(ctx, st, db.Pool, p)
		if err != nil {
			b.Fatal(err)
		}
		if len(jobs) != 50 {
			b.Fatalf("claimed %d, want 50", len(jobs))
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(50*b.N)/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkComplete50 completes (deletes, fenced by lease) a batch of 50
// running jobs per op: the completer's write (WriteBatch, one round trip).
func BenchmarkComplete50(b *testing.B) {
	db := dbtest.New(b)
	st := store.New("skiplock")
	seedReady(b, db.Pool, "bench", 50*b.N+50)
	leases := claimAll(b, st, db.Pool, "bench", 50*b.N+50, 500)
	ctx := context.Background()
	_, err := st.WriteBatch(ctx, db.Pool, []store.Query{st.CompleteQuery(leases[:50], benchWorker, false, false)}) // warm
	require.NoError(b, err)
	leases = leases[50:]
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		held, err := st.WriteBatch(ctx, db.Pool, []store.Query{st.CompleteQuery(leases[i*50:(i+1)*50], benchWorker, false, false)})
		if err != nil {
			b.Fatal(err)
		}
		if len(held) != 50 {
			b.Fatalf("completed %d, want 50", len(held))
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(50*b.N)/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkHeartbeat1000 extends the leases of 1,000 running jobs per op
// (one statement, HOT updates).
func BenchmarkHeartbeat1000(b *testing.B) {
	db := dbtest.New(b)
	st := store.New("skiplock")
	seedReady(b, db.Pool, "bench", 1000)
	leases := claimAll(b, st, db.Pool, "bench", 1000, 1000)
	ctx := context.Background()
	_, err := st.Heartbeat(ctx, db.Pool, leases, nil, time.Minute, benchWorker) // warm
	require.NoError(b, err)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		alive, err := st.Heartbeat(ctx, db.Pool, leases, nil, time.Minute, benchWorker)
		if err != nil {
			b.Fatal(err)
		}
		if len(alive) != 1000 {
			b.Fatalf("%d leases alive, want 1000", len(alive))
		}
	}
}

// BenchmarkCompleteArchive50 archives a batch of 50 running jobs per op as
// the runtime writes a no-op drain's completions (issue 39: a run without a
// result or progress): complete_archive alone (as when no process waits),
// and with the ends announced to waiters (notify_done, while one listens).
func BenchmarkCompleteArchive50(b *testing.B) {
	for _, announce := range []bool{false, true} {
		b.Run(map[bool]string{false: "complete_archive", true: "with_notify_done"}[announce], func(b *testing.B) {
			db := dbtest.New(b)
			st := store.New("skiplock")
			rt := store.Runtime{Store: st, Pool: db.Pool}
			seedReady(b, db.Pool, "bench", 50*b.N+50)
			leases := claimAll(b, st, db.Pool, "bench", 50*b.N+50, 500)
			ctx := context.Background()
			write := func(ls []store.Lease) (map[int64]bool, error) {
				if announce {
					return rt.WriteOutcomes(ctx, store.Outcomes{Done: ls, Announce: true}, benchWorker, true)
				}
				return st.WriteBatch(ctx, db.Pool, []store.Query{st.CompleteQuery(ls, benchWorker, true, false)})
			}
			_, err := write(leases[:50]) // warm
			require.NoError(b, err)
			leases = leases[50:]
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				held, err := write(leases[i*50 : (i+1)*50])
				if err != nil {
					b.Fatal(err)
				}
				if len(held) != 50 {
					b.Fatalf("completed %d, want 50", len(held))
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(50*b.N)/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}
