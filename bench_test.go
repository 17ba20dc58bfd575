package skiplock_test

import (
	"context"
	"encoding/json"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
)

// Hot-path benchmarks of the producer side. `make bench` runs them with
// -benchtime 3x as a smoke test; for figures use e.g.
//
//	go test -run '^$' -bench 'Enqueue' -benchtime 3s .

// roundTrips counts the statements, batches and COPYs a pool sends: each is
// one round trip with pgx's extended protocol and a cached statement.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	r.n.Add(1)
	return ctx
}
func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.n.Add(1)
	return ctx
}
func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}
func (r *roundTrips) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	r.n.Add(1)
	return ctx
}
func (r *roundTrips) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

// tracedClient returns a client on a fresh database whose pool counts round trips.
func tracedClient(tb testing.TB) (*skiplock.Client, *roundTrips) {
	tb.Helper()
	db := dbtest.New(tb)
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(tb, err)
	rt := &roundTrips{}
	cfg.ConnConfig.Tracer = rt
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(tb, err)
	tb.Cleanup(pool.Close)
	c, err := skiplock.NewClient(pool, skiplock.Config{})
	require.NoError(tb, err)
	return c, rt
}

// TestEnqueueIsOneRoundTrip checks PRODUCT §3's "single enqueue: one round
// trip", counted with a pgx tracer (the pool's statement cache is warm after
// the first call).
func TestEnqueueIsOneRoundTrip(t *testing.T) {
	c, rt := tracedClient(t)
	ctx := context.Background()
	_, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "warm"})
	require.NoError(t, err)
	for _, p := range []skiplock.EnqueueParams{
		{Kind: "k", Payload: map[string]int{"n": 1}},
		{Kind: "k", UniqueKey: "u1", Priority: 5, Tenant: "t", Entity: "e"},
		{Kind: "k", UniqueKey: "u1"}, // duplicate: returns the existing id
		{Kind: "k", UniqueKey: "u1", BumpSchedule: true},
	} {
		before := rt.n.Load()
		_, err := c.Enqueue(ctx, p)
		require.NoError(t, err)
		require.Equal(t, int64(1), rt.n.Load()-before, "%+v", p)
	}
}

func BenchmarkEnqueue(b *testing.B) {
	c, rt := tracedClient(b)
	ctx := context.Background()
	payload := json.RawMessage(`{"user_id":12345,"template":"welcome"}`)
	_, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "warm"})
	require.NoError(b, err)
	before := rt.n.Load()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Enqueue(ctx, skiplock.EnqueueParams{Queue: "bench", Kind: "email", Payload: payload}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(rt.n.Load()-before)/float64(b.N), "roundtrips/op")
}

// BenchmarkEnqueueUniqueness is the cost of one enqueue with each kind of
// uniqueness and each mode next to a plain one, in the same run. Every
// operation inserts a new job (a fresh key or payload), the path every
// first enqueue of a key takes; "_hit" enqueues an existing key.
func BenchmarkEnqueueUniqueness(b *testing.B) {
	c, rt := tracedClient(b)
	ctx := context.Background()
	_, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "warm"})
	require.NoError(b, err)
	payload := func(i int) json.RawMessage {
		return json.RawMessage(`{"user_id":` + strconv.Itoa(i) + `,"template":"welcome"}`)
	}
	key := func(i int) string { return "k" + strconv.Itoa(i) }
	cases := []struct {
		name string
		p    func(i int) skiplock.EnqueueParams
	}{
		{"plain", func(i int) skiplock.EnqueueParams { return skiplock.EnqueueParams{Payload: payload(i)} }},
		{"unique_key", func(i int) skiplock.EnqueueParams {
			return skiplock.EnqueueParams{Payload: payload(i), UniqueKey: key(i)}
		}},
		{"unique_key_hit", func(i int) skiplock.EnqueueParams {
			return skiplock.EnqueueParams{Payload: payload(i), UniqueKey: "same"}
		}},
		{"by_args", func(i int) skiplock.EnqueueParams {
			return skiplock.EnqueueParams{Payload: payload(i), Unique: skiplock.UniqueOpts{ByArgs: true}}
		}},
		{"by_args_hit", func(int) skiplock.EnqueueParams {
			return skiplock.EnqueueParams{Payload: payload(0), Unique: skiplock.UniqueOpts{ByArgs: true}}
		}},
		{"by_period", func(i int) skiplock.EnqueueParams {
			return skiplock.EnqueueParams{Payload: payload(i), UniqueKey: key(i), Unique: skiplock.UniqueOpts{Period: time.Hour}}
		}},
		{"by_period_hit", func(i int) skiplock.EnqueueParams {
			return skiplock.EnqueueParams{Payload: payload(i), UniqueKey: "same", Unique: skiplock.UniqueOpts{Period: time.Hour}}
		}},
		{"supersede", func(i int) skiplock.EnqueueParams {
			return skiplock.EnqueueParams{Payload: payload(i), UniqueKey: key(i), Supersede: true}
		}},
		{"supersede_hit", func(i int) skiplock.EnqueueParams {
			return skiplock.EnqueueParams{Payload: payload(i), UniqueKey: "same", Supersede: true}
		}},
		{"debounce", func(i int) skiplock.EnqueueParams {
			return skiplock.EnqueueParams{Payload: payload(i), UniqueKey: key(i), Debounce: time.Minute}
		}},
		{"throttle", func(i int) skiplock.EnqueueParams {
			return skiplock.EnqueueParams{Payload: payload(i), UniqueKey: key(i), Throttle: time.Minute}
		}},
	}
	for n, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			queue := "bench_" + tc.name + strconv.Itoa(n)
			before := rt.n.Load()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p := tc.p(i)
				p.Queue, p.Kind = queue, "email"
				if _, err := c.Enqueue(ctx, p); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(rt.n.Load()-before)/float64(b.N), "roundtrips/op")
		})
	}
}

func BenchmarkEnqueueMany1000(b *testing.B) {
	c, rt := tracedClient(b)
	ctx := context.Background()
	const n = 1000
	ps := make([]skiplock.EnqueueParams, n)
	for i := range ps {
		ps[i] = skiplock.EnqueueParams{Queue: "bench", Kind: "email", Priority: i % 11,
			Payload: json.RawMessage(`{"user_id":` + strconv.Itoa(i) + `,"template":"welcome"}`)}
	}
	before := rt.n.Load()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		got, err := c.EnqueueMany(ctx, ps)
		if err != nil {
			b.Fatal(err)
		}
		if got != n {
			b.Fatalf("inserted %d, want %d", got, n)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "jobs/s")
	b.ReportMetric(float64(rt.n.Load()-before)/float64(b.N), "roundtrips/op")
}
