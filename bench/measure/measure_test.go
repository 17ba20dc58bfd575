package measure

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
)

func TestHistQuantiles(t *testing.T) {
	var h Hist
	var all []time.Duration
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		d := time.Duration(r.ExpFloat64() * float64(3*time.Millisecond))
		all = append(all, d)
		h.Add(d)
	}
	h.Add(-time.Second) // clamped to 0
	all = append(all, 0)
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		exact := float64(all[int(q*float64(len(all)))]) / 1e6
		require.InEpsilon(t, exact, h.QuantileMS(q), 0.03, "q=%v", q)
	}
	require.InDelta(t, float64(all[len(all)-1])/1e6, h.MaxMS(), 0.001)
	require.Equal(t, uint64(len(all)), h.Count())

	// Every bucket's midpoint maps back to the bucket.
	for i := 0; valueOf(i) < 1<<52; i++ {
		require.Equal(t, i, bucketOf(uint64(valueOf(i))), "bucket %d", i)
	}
	var empty Hist
	require.Zero(t, empty.QuantileMS(0.99))
	require.Zero(t, empty.MeanMS())
}

// Sleep never returns before its deadline, and returns the context's cause
// at once when the context ends first.
func TestSleep(t *testing.T) {
	for _, d := range []time.Duration{0, 300 * time.Microsecond, 2 * time.Millisecond, 5 * time.Millisecond} {
		deadline := time.Now().Add(d)
		require.NoError(t, Sleep(context.Background(), deadline))
		require.False(t, time.Now().Before(deadline), "woke before the deadline (%v)", d)
	}

	stop := errors.New("stop")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(stop)
	start := time.Now()
	require.ErrorIs(t, Sleep(ctx, start.Add(time.Hour)), stop)
	require.Less(t, time.Since(start), time.Minute)
}

func TestProcStatus(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		require.Zero(t, ProcStatus("VmRSS"))
		return
	}
	rss, hwm := ProcStatus("VmRSS"), ProcStatus("VmHWM")
	require.Positive(t, rss)
	require.GreaterOrEqual(t, hwm, rss)
	require.Zero(t, ProcStatus("NoSuchField"))
}

// The tracer counts what a pool sends while it is on — a statement by
// name, a batch and a COPY as one round trip each — and times the
// statements it is told to, against a real server.
func TestTracerCountsRoundTrips(t *testing.T) {
	db := dbtest.NewEmpty(t)
	ctx := context.Background()
	tr := NewTracer(func(sql string) string {
		if strings.Contains(sql, "pg_sleep") {
			return "sleep"
		}
		return "other"
	}, func(name string) bool { return name == "sleep" })
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(ctx, "CREATE TABLE t (n int)")
	require.NoError(t, err)

	_, err = pool.Exec(ctx, "SELECT 1") // before Start: not counted
	require.NoError(t, err)
	tr.Start()
	_, err = pool.Exec(ctx, "SELECT pg_sleep(0.002)")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "SELECT 2")
	require.NoError(t, err)
	b := &pgx.Batch{}
	b.Queue("SELECT 3")
	b.Queue("SELECT 4")
	require.NoError(t, pool.SendBatch(ctx, b).Close())
	_, err = pool.CopyFrom(ctx, pgx.Identifier{"t"}, []string{"n"}, pgx.CopyFromRows([][]any{{1}, {2}}))
	require.NoError(t, err)
	counts := tr.Stop()
	_, err = pool.Exec(ctx, "SELECT pg_sleep(0)") // after Stop: not counted
	require.NoError(t, err)

	assert.Equal(t, int64(1), counts["sleep"])
	assert.Equal(t, int64(1), counts["batch"])
	assert.Equal(t, int64(1), counts["copy"])
	assert.Positive(t, counts["other"]) // SELECT 2, and whatever pgx sends for the batch and COPY
	assert.EqualValues(t, 1, tr.Timed.Count())
	assert.GreaterOrEqual(t, tr.Timed.MaxMS(), 2.0)
	sorted := SortedCounts(map[string]int64{"b": 1, "a": 1, "c": 5})
	assert.Equal(t, []Statement{{"c", 5}, {"a", 1}, {"b", 1}}, sorted)
}

func TestTimeStart(t *testing.T) {
	ctx := context.Background()
	started := make(chan time.Time, 1)
	started <- time.Unix(0, 0) // stale: must be dropped
	toStart, call, err := TimeStart(ctx, started, 10*time.Second, func(context.Context) error {
		go func() { time.Sleep(2 * time.Millisecond); started <- time.Now() }()
		return nil
	})
	require.NoError(t, err)
	assert.GreaterOrEqual(t, toStart, 2*time.Millisecond)
	assert.LessOrEqual(t, call, toStart)

	boom := errors.New("boom")
	_, _, err = TimeStart(ctx, started, time.Second, func(context.Context) error { return boom })
	assert.ErrorIs(t, err, boom)

	_, _, err = TimeStart(ctx, started, 10*time.Millisecond, func(context.Context) error { return nil })
	assert.ErrorContains(t, err, "did not start within 10ms")

	cctx, cancel := context.WithCancelCause(ctx)
	cancel(boom)
	_, _, err = TimeStart(cctx, started, time.Minute, func(context.Context) error { return nil })
	assert.ErrorIs(t, err, boom)
}
