package skiplock_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
)

// BenchmarkFleetOverDatabases drains no-op jobs with one worker fleet over
// 1 and 3 databases, the way `skiplock work --database-url A --database-url
// B ...` runs it: one client per database, each with 32 slots, claiming
// batches of 50. The jobs are split evenly and loaded by COPY before the
// timer starts; jobs/s is the drain rate over every database. dbs=1,pools=3
// gives one database the same three claim loops and 96 slots as three
// databases get, to tell the databases' effect from the loops'. On one
// machine the databases share its CPUs, so this measures the fleet's
// overhead, not the scaling that separate servers give (docs/scaling.md).
// Run with e.g.
//
//	go test -run '^$' -bench FleetOverDatabases -benchtime 3x .
func BenchmarkFleetOverDatabases(b *testing.B) {
	const total = 30000
	for _, cs := range []struct{ dbs, pools int }{{1, 1}, {1, 3}, {3, 1}} {
		n := cs.dbs
		b.Run(fmt.Sprintf("dbs=%d,pools=%d", cs.dbs, cs.pools), func(b *testing.B) {
			dbs := make([]*dbtest.DB, n)
			for i := range dbs {
				dbs[i] = dbtest.New(b)
			}
			ctx := context.Background()
			var elapsed time.Duration
			for b.Loop() {
				b.StopTimer()
				var done atomic.Int64
				clients := make([]*skiplock.Client, n)
				for i, db := range dbs {
					pools := make([]skiplock.WorkerPool, cs.pools)
					for p := range pools {
						pools[p] = skiplock.WorkerPool{Name: fmt.Sprint("p", p), Concurrency: 32, BatchSize: 50}
					}
					c, err := skiplock.NewClient(db.Pool, skiplock.Config{Schema: db.Schema, PollInterval: 100 * time.Millisecond,
						Logger: slog.New(slog.DiscardHandler), Pools: pools})
					require.NoError(b, err)
					require.NoError(b, skiplock.Handle(c, "noop", func(context.Context, *skiplock.Job[struct{}]) error {
						done.Add(1)
						return nil
					}))
					ps := make([]skiplock.EnqueueParams, total/n)
					for j := range ps {
						ps[j] = skiplock.EnqueueParams{Kind: "noop"}
					}
					_, err = c.EnqueueMany(ctx, ps)
					require.NoError(b, err)
					clients[i] = c
				}
				want := int64(total / n * n)
				b.StartTimer()
				start := time.Now()
				for _, c := range clients {
					require.NoError(b, c.Start(ctx))
				}
				for done.Load() < want {
					time.Sleep(time.Millisecond)
				}
				elapsed += time.Since(start)
				b.StopTimer()
				for _, c := range clients {
					require.NoError(b, c.Stop(ctx))
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(total/n*n*b.N)/elapsed.Seconds(), "jobs/s")
		})
	}
}
