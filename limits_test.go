package skiplock_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
)

func TestLimitValidationNamesTheField(t *testing.T) {
	t.Parallel()
	c := offlineClient(t)
	ok := skiplock.Limit{Name: "email", Kind: "send", Concurrency: 5}
	for _, tc := range []struct {
		field string
		edit  func(*skiplock.Limit)
	}{
		{"name", func(l *skiplock.Limit) { l.Name = "" }},
		{"name", func(l *skiplock.Limit) { l.Name = "has space" }},
		{"queue", func(l *skiplock.Limit) { l.Queue = "q" }},
		{"queue", func(l *skiplock.Limit) { l.Kind = "" }},
		{"queue", func(l *skiplock.Limit) { l.Kind, l.Queue = "", "bad queue" }},
		{"kind", func(l *skiplock.Limit) { l.Kind = "bad kind" }},
		{"partition", func(l *skiplock.Limit) { l.Partition = "customer" }},
		{"partition", func(l *skiplock.Limit) { l.Partition = "arg:a.b" }},
		{"concurrency", func(l *skiplock.Limit) { l.Concurrency = 0 }},
		{"concurrency", func(l *skiplock.Limit) { l.Concurrency = skiplock.MaxLimitConcurrency + 1 }},
		{"concurrency", func(l *skiplock.Limit) { l.Rate, l.Per = 5, time.Second }},
		{"rate", func(l *skiplock.Limit) { l.Concurrency, l.Per = 0, time.Second }},
		{"per", func(l *skiplock.Limit) { l.Concurrency, l.Rate = 0, 5 }},
		{"per", func(l *skiplock.Limit) { l.Concurrency, l.Rate, l.Per = 0, 5, 25*time.Hour }},
	} {
		l := ok
		tc.edit(&l)
		err := c.LimitSet(context.Background(), l)
		var fe *skiplock.FieldError
		require.ErrorAs(t, err, &fe, "%+v", l)
		require.Equal(t, tc.field, fe.Field, "%+v: %v", l, err)
		require.ErrorIs(t, err, skiplock.ErrInvalidLimit)
	}
	for _, p := range []string{"", "tenant", "entity", "arg:customer_id"} {
		l := ok
		l.Partition = p
		require.NoError(t, l.Validate())
	}
}

// Three clients (three processes' worth of claimers) drain jobs under a
// global limit of 3 on one kind and a limit of 1 per customer on another:
// no limit is ever exceeded, neither in the handlers nor in the jobs table
// (sampled continuously), every job runs, and each limit is reached (the
// limits bind, so the test tests something).
func TestLimitsAreNeverExceeded(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	admin := schedClient(t, db.URL, skiplock.Config{Logger: quietLogger()})
	require.NoError(t, admin.LimitSet(ctx, skiplock.Limit{Name: "email", Kind: "send", Concurrency: 3}))
	require.NoError(t, admin.LimitSet(ctx, skiplock.Limit{Name: "per-customer", Kind: "sync",
		Partition: "arg:customer", Concurrency: 1}))

	const sends, syncs, customers = 120, 160, 8
	var ps []skiplock.EnqueueParams
	for i := 0; i < sends; i++ {
		ps = append(ps, skiplock.EnqueueParams{Kind: "send", Payload: map[string]int{"n": i}})
	}
	for i := 0; i < syncs; i++ {
		ps = append(ps, skiplock.EnqueueParams{Kind: "sync", Payload: map[string]string{"customer": fmt.Sprint("c", i%customers)}})
	}
	for i := 0; i < 40; i++ { // not limited: fill the workers meanwhile
		ps = append(ps, skiplock.EnqueueParams{Kind: "free"})
	}
	_, err := admin.EnqueueMany(ctx, ps)
	require.NoError(t, err)

	var (
		sending, sendMax atomic.Int64
		mu               sync.Mutex
		perCustomer      = map[string]int{}
		customerMax      int
		done             atomic.Int64
		violations       []string
	)
	total := int64(sends + syncs + 40)
	note := func(s string) {
		mu.Lock()
		violations = append(violations, s)
		mu.Unlock()
	}
	var clients []*skiplock.Client
	for i := 0; i < 3; i++ {
		c := schedClient(t, db.URL, skiplock.Config{Logger: quietLogger(), PollInterval: 200 * time.Millisecond,
			Pools: []skiplock.WorkerPool{{Queues: []string{"default"}, Concurrency: 6, BatchSize: 10}}})
		require.NoError(t, skiplock.Handle(c, "send", func(ctx context.Context, j *skiplock.Job[struct{ N int }]) error {
			n := sending.Add(1)
			defer sending.Add(-1)
			for m := sendMax.Load(); n > m && !sendMax.CompareAndSwap(m, n); m = sendMax.Load() {
			}
			if n > 3 {
				note(fmt.Sprintf("%d send jobs running at once", n))
			}
			time.Sleep(time.Duration(5+j.Args.N%10) * time.Millisecond)
			done.Add(1)
			return nil
		}))
		require.NoError(t, skiplock.Handle(c, "sync", func(ctx context.Context, j *skiplock.Job[struct{ Customer string }]) error {
			mu.Lock()
			perCustomer[j.Args.Customer]++
			n := perCustomer[j.Args.Customer]
			customerMax = max(customerMax, n)
			mu.Unlock()
			if n > 1 {
				note(fmt.Sprintf("%d jobs of customer %s running at once", n, j.Args.Customer))
			}
			time.Sleep(3 * time.Millisecond)
			mu.Lock()
			perCustomer[j.Args.Customer]--
			mu.Unlock()
			done.Add(1)
			return nil
		}))
		require.NoError(t, skiplock.Handle(c, "free", func(ctx context.Context, j *skiplock.Job[struct{}]) error {
			time.Sleep(5 * time.Millisecond)
			done.Add(1)
			return nil
		}))
		clients = append(clients, c)
	}

	// The table's own view, sampled while the clients run.
	sampleCtx, stopSampling := context.WithCancel(ctx)
	var samples, dbSendMax, dbCustomerMax atomic.Int64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for sampleCtx.Err() == nil {
			var s, c int64
			err := db.Pool.QueryRow(sampleCtx, `SELECT
				(SELECT count(*) FROM skiplock.jobs WHERE state = 'running' AND kind = 'send'),
				(SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM skiplock.jobs
				  WHERE state = 'running' AND kind = 'sync' GROUP BY payload->>'customer') AS x)`).Scan(&s, &c)
			if err != nil {
				if !errors.Is(err, context.Canceled) {
					note("sample: " + err.Error())
				}
				return
			}
			samples.Add(1)
			dbSendMax.Store(max(dbSendMax.Load(), s))
			dbCustomerMax.Store(max(dbCustomerMax.Load(), c))
			if s > 3 || c > 1 {
				note(fmt.Sprintf("the jobs table shows %d send jobs and %d of one customer running", s, c))
			}
		}
	}()

	start := time.Now()
	for _, c := range clients {
		require.NoError(t, c.Start(ctx))
	}
	require.Eventually(t, func() bool { return done.Load() == total }, 60*time.Second, 20*time.Millisecond,
		"%d of %d jobs done", done.Load(), total)
	elapsed := time.Since(start)
	stopSampling()
	<-sampled
	for _, c := range clients {
		require.NoError(t, c.Stop(ctx))
	}
	t.Logf("%d jobs in %v; handlers saw at most %d send and %d per customer; the table (%d samples) at most %d and %d",
		total, elapsed.Round(time.Millisecond), sendMax.Load(), customerMax, samples.Load(), dbSendMax.Load(), dbCustomerMax.Load())
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, violations)
	require.Equal(t, int64(3), sendMax.Load(), "the send limit should bind")
	require.Equal(t, 1, customerMax)
	require.Positive(t, samples.Load())

	st, err := admin.LimitList(ctx)
	require.NoError(t, err)
	require.Len(t, st, 2)
	require.Equal(t, "email", st[0].Name)
	require.Equal(t, 3, st[0].Concurrency)
	require.Zero(t, st[0].Used)
	require.NoError(t, admin.LimitRemove(ctx, "email"))
	require.ErrorIs(t, admin.LimitRemove(ctx, "email"), skiplock.ErrLimitNotFound)
}

// Two clients drain jobs under a rate limit of 10 starts per second: in no
// one-second window of the recorded starts (each at its claim's time, after
// the limit's lock) are there more than 10, the limit binds (the drain
// takes as long as the rate says), every job runs once, and a limit
// partitioned per customer holds per customer.
func TestRateLimitIsNeverExceeded(t *testing.T) {
	skipInShort(t, "runs for seconds of wall time")
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	admin := schedClient(t, db.URL, skiplock.Config{Logger: quietLogger()})
	require.NoError(t, admin.LimitSet(ctx, skiplock.Limit{Name: "api", Kind: "call", Rate: 10, Per: time.Second}))
	require.NoError(t, admin.LimitSet(ctx, skiplock.Limit{Name: "per-customer", Kind: "sync",
		Partition: "arg:customer", Rate: 2, Per: time.Second}))
	const calls, syncs = 35, 12
	var ps []skiplock.EnqueueParams
	for i := 0; i < calls; i++ {
		ps = append(ps, skiplock.EnqueueParams{Kind: "call"})
	}
	for i := 0; i < syncs; i++ {
		ps = append(ps, skiplock.EnqueueParams{Kind: "sync", Payload: map[string]string{"customer": fmt.Sprint("c", i%3)}})
	}
	_, err := admin.EnqueueMany(ctx, ps)
	require.NoError(t, err)

	var done atomic.Int64
	var mu sync.Mutex
	runs := map[int64]int{}
	var clients []*skiplock.Client
	for i := 0; i < 2; i++ {
		c := schedClient(t, db.URL, skiplock.Config{Logger: quietLogger(), PollInterval: 100 * time.Millisecond,
			Pools: []skiplock.WorkerPool{{Queues: []string{"default"}, Concurrency: 8, BatchSize: 10}}})
		for _, kind := range []string{"call", "sync"} {
			require.NoError(t, skiplock.Handle(c, kind, func(ctx context.Context, j *skiplock.Job[json.RawMessage]) error {
				mu.Lock()
				runs[j.ID]++
				mu.Unlock()
				done.Add(1)
				return nil
			}))
		}
		clients = append(clients, c)
	}
	start := time.Now()
	for _, c := range clients {
		require.NoError(t, c.Start(ctx))
	}
	require.Eventually(t, func() bool { return done.Load() == calls+syncs }, 30*time.Second, 20*time.Millisecond)
	elapsed := time.Since(start)
	for _, c := range clients {
		require.NoError(t, c.Stop(ctx))
	}
	t.Logf("%d rate-limited jobs in %v", calls+syncs, elapsed.Round(time.Millisecond))
	require.Greater(t, elapsed, 3*time.Second, "35 calls at 10/s take over 3 s: the limit must bind")
	for id, n := range runs {
		require.Equal(t, 1, n, "job %d ran %d times", id, n)
	}

	// Every window of one second ending at a recorded start, per limit
	// and partition value.
	var recorded int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM skiplock.limit_starts`).Scan(&recorded))
	require.Equal(t, calls+syncs, recorded, "one recorded start per started job")
	var apiWorst, custWorst int
	require.NoError(t, db.Pool.QueryRow(ctx, `
		SELECT coalesce(max(n) FILTER (WHERE name = 'api'), 0), coalesce(max(n) FILTER (WHERE name = 'per-customer'), 0) FROM (
			SELECT s.name, (SELECT count(*) FROM skiplock.limit_starts AS o
			                WHERE o.name = s.name AND o.key = s.key AND o.at > s.at - interval '1 second' AND o.at <= s.at) AS n
			FROM skiplock.limit_starts AS s) AS x`).Scan(&apiWorst, &custWorst))
	require.Equal(t, 10, apiWorst, "the api limit binds at 10 per second")
	require.Equal(t, 2, custWorst, "each customer's limit binds at 2 per second")

	st, err := admin.LimitList(ctx)
	require.NoError(t, err)
	require.Equal(t, 10, st[0].Rate)
	require.Equal(t, time.Second, st[0].Per)
}

// A pool with a tenant cap that a limit covers obeys the limit (a
// guarantee) rather than the cap (a preference), and says so once.
func TestLimitsTakePrecedenceOverTheTenantCap(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	logs := &countingLogger{substr: "sets its tenant cap aside"}
	c := schedClient(t, db.URL, skiplock.Config{Logger: slog.New(logs), PollInterval: 50 * time.Millisecond,
		Pools: []skiplock.WorkerPool{{Queues: []string{"default"}, Concurrency: 8, BatchSize: 10, TenantCap: 5}}})
	require.NoError(t, c.LimitSet(ctx, skiplock.Limit{Name: "one", Kind: "k", Concurrency: 1}))
	var ps []skiplock.EnqueueParams
	for i := 0; i < 20; i++ {
		ps = append(ps, skiplock.EnqueueParams{Kind: "k", Tenant: fmt.Sprint("t", i%4)})
	}
	_, err := c.EnqueueMany(ctx, ps)
	require.NoError(t, err)
	var running, most, done atomic.Int64
	require.NoError(t, skiplock.Handle(c, "k", func(ctx context.Context, j *skiplock.Job[struct{}]) error {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(5 * time.Millisecond)
		done.Add(1)
		return nil
	}))
	require.NoError(t, c.Start(ctx))
	require.Eventually(t, func() bool { return done.Load() == 20 }, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, c.Stop(ctx))
	require.Equal(t, int64(1), most.Load(), "the limit of 1 holds in a capped pool")
	require.Equal(t, int64(1), logs.n.Load(), "said once")
}

// rateLimitedClient is a client of one pool (concurrency 4, batch 10, poll
// interval 10 s, so any claim sooner than that was woken) whose limited
// claims are counted.
func rateLimitedClient(t *testing.T, url string) (*skiplock.Client, *claimCounter) {
	t.Helper()
	pcfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	claims := &claimCounter{}
	pcfg.ConnConfig.Tracer = claims
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	c, err := skiplock.NewClient(pool, skiplock.Config{Logger: quietLogger(), PollInterval: 10 * time.Second,
		Pools: []skiplock.WorkerPool{{Queues: []string{"default"}, Concurrency: 4, BatchSize: 10}}})
	require.NoError(t, err)
	return c, claims
}

// claimCounter counts a pool's limited claims: every one takes the limits'
// locks first (limit_locks), in a pipeline.
type claimCounter struct{ n atomic.Int64 }

func (c *claimCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (c *claimCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *claimCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (c *claimCounter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	if strings.Contains(d.SQL, "pg_advisory_xact_lock(h.key)") {
		c.n.Add(1)
	}
}
func (c *claimCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// A pool held back by a full rate window sleeps until the window's oldest
// start leaves it, then claims: the next job starts right after the window
// frees, though the poll interval is 10 s, and the pool does not claim in
// between (completions free no rate window, so they do not wake it).
func TestRateLimitWakesWhenTheWindowFrees(t *testing.T) {
	skipInShort(t, "runs for seconds of wall time")
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c, claims := rateLimitedClient(t, db.URL)
	const per, rate, jobs = 2 * time.Second, 3, 9
	require.NoError(t, c.LimitSet(ctx, skiplock.Limit{Name: "api", Kind: "call", Rate: rate, Per: per}))
	var done atomic.Int64
	require.NoError(t, skiplock.Handle(c, "call", func(ctx context.Context, j *skiplock.Job[struct{}]) error {
		done.Add(1)
		return nil
	}))
	var ps []skiplock.EnqueueParams
	for i := 0; i < jobs; i++ {
		ps = append(ps, skiplock.EnqueueParams{Kind: "call"})
	}
	_, err := c.EnqueueMany(ctx, ps)
	require.NoError(t, err)
	require.NoError(t, c.Start(ctx))
	require.Eventually(t, func() bool { return done.Load() == jobs }, 15*time.Second, 10*time.Millisecond)
	require.NoError(t, c.Stop(ctx))

	// The recorded starts (database clock): each after the first window
	// came when the start rate before it left the window, within a margin.
	rows, err := db.Pool.Query(ctx, `SELECT at FROM skiplock.limit_starts ORDER BY at`)
	require.NoError(t, err)
	starts, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	require.NoError(t, err)
	require.Len(t, starts, jobs)
	for k := rate; k < jobs; k++ {
		late := starts[k].Sub(starts[k-rate].Add(per))
		t.Logf("start %d: %v after the window freed", k+1, late.Round(time.Millisecond))
		require.GreaterOrEqual(t, late, time.Duration(0), "start %d within the window: the limit is exceeded", k+1)
		// Woken by the window, not the poll (10 s away); the bound is far
		// from both, so a loaded machine's scheduling does not decide it.
		require.Less(t, late, 3*time.Second, "start %d: the pool woke late: by the poll (interval 10 s), not the window", k+1)
	}
	// Three windows: a claim each, and a few more (the start-up claim, a
	// wake-up per enqueue notification), not one per completion or a loop.
	t.Logf("%d limited claims for %d jobs in %d windows", claims.n.Load(), jobs, jobs/rate)
	require.LessOrEqual(t, claims.n.Load(), int64(3*jobs/rate))
}

func TestTenantWeightValidationNamesTheField(t *testing.T) {
	t.Parallel()
	c := offlineClient(t)
	for _, tc := range []struct {
		field         string
		queue, tenant string
		weight        int
	}{
		{"queue", "", "a", 2},
		{"queue", "has space", "a", 2},
		{"tenant", "q", "", 2},
		{"tenant", "q", "bad\x00", 2},
		{"weight", "q", "a", 0},
		{"weight", "q", "a", skiplock.MaxTenantWeight + 1},
	} {
		err := c.TenantWeightSet(context.Background(), tc.queue, tc.tenant, tc.weight)
		var fe *skiplock.FieldError
		require.ErrorAs(t, err, &fe, "%+v", tc)
		require.Equal(t, tc.field, fe.Field, "%+v", tc)
	}
}
