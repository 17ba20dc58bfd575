package skiplock_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
)

// raceEnqueue runs n enqueues of mk(i) at once and returns their results.
func raceEnqueue(t *testing.T, c *skiplock.Client, n int, mk func(i int) skiplock.EnqueueParams) []skiplock.EnqueueResult {
	t.Helper()
	ctx := context.Background()
	out := make([]skiplock.EnqueueResult, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out[i], errs[i] = c.Enqueue(ctx, mk(i))
		}()
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	return out
}

type modeJob struct {
	Doc int `json:"doc"`
	N   int `json:"n"`
}

// 32 concurrent enqueues of one key leave exactly the outcome each
// uniqueness and each mode promises: one job, whose id every caller got,
// inserted by exactly one of them.
func TestUniqueAndModesRacingEnqueue(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	c := newClient(t, db.Pool, skiplock.Config{Logger: quietLogger()})
	const n = 32
	cases := []struct {
		name   string
		params func(i int) skiplock.EnqueueParams
		// payloadFromAny: the job's payload is one of the racers'; else the first's.
		payloadFromAny bool
		due            time.Duration // the job's run_at is about now + due
	}{
		{name: "by_args", params: func(int) skiplock.EnqueueParams {
			return skiplock.EnqueueParams{Payload: modeJob{Doc: 1}, Unique: skiplock.UniqueOpts{ByArgs: true}}
		}},
		{name: "by_args_fields", params: func(i int) skiplock.EnqueueParams {
			return skiplock.EnqueueParams{Payload: modeJob{Doc: 1, N: i},
				Unique: skiplock.UniqueOpts{ByArgs: true, ArgsFields: []string{"doc"}}}
		}},
		{name: "by_period", params: func(i int) skiplock.EnqueueParams {
			return skiplock.EnqueueParams{Payload: modeJob{Doc: 1, N: i}, UniqueKey: "k",
				Unique: skiplock.UniqueOpts{Period: time.Hour}}
		}},
		{name: "by_args_and_period", params: func(int) skiplock.EnqueueParams {
			return skiplock.EnqueueParams{Payload: modeJob{Doc: 1}, Unique: skiplock.UniqueOpts{ByArgs: true, Period: time.Hour}}
		}},
		{name: "supersede", payloadFromAny: true, params: func(i int) skiplock.EnqueueParams {
			return skiplock.EnqueueParams{Payload: modeJob{Doc: 1, N: i}, UniqueKey: "k", Supersede: true}
		}},
		{name: "debounce", payloadFromAny: true, due: time.Hour, params: func(i int) skiplock.EnqueueParams {
			return skiplock.EnqueueParams{Payload: modeJob{Doc: 1, N: i}, UniqueKey: "k", Debounce: time.Hour}
		}},
		{name: "throttle", payloadFromAny: true, params: func(i int) skiplock.EnqueueParams {
			return skiplock.EnqueueParams{Payload: modeJob{Doc: 1, N: i}, UniqueKey: "k", Throttle: time.Hour}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			queue := "race_" + tc.name
			rs := raceEnqueue(t, c, n, func(i int) skiplock.EnqueueParams {
				p := tc.params(i)
				p.Queue, p.Kind = queue, "modes"
				return p
			})
			require.Equal(t, 1, countJobs(t, db.Pool, "queue = $1", queue), "one job")
			wins := 0
			for _, r := range rs {
				require.Equal(t, rs[0].ID, r.ID, "every caller got the one job's id")
				if r.Inserted {
					wins++
				}
			}
			require.Equal(t, 1, wins, "one caller inserted it")

			var payload modeJob
			var raw []byte
			var wait float64 // seconds
			require.NoError(t, db.Pool.QueryRow(context.Background(),
				`SELECT payload, extract(epoch FROM run_at - now())::float8 FROM skiplock.jobs WHERE id = $1`,
				rs[0].ID).Scan(&raw, &wait))
			require.NoError(t, json.Unmarshal(raw, &payload))
			require.Equal(t, 1, payload.Doc)
			if tc.payloadFromAny {
				require.True(t, payload.N >= 0 && payload.N < n)
			}
			require.InDelta(t, tc.due.Seconds(), wait, time.Minute.Seconds(), "run_at")
		})
	}
}

// A held period outlives its job: finished (here cancelled) within the
// period, the key still returns it; once the period is over a new job is
// inserted.
func TestUniquePeriodHoldsWhileFinished(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{Logger: quietLogger()})
	p := skiplock.EnqueueParams{Queue: "reports", Kind: "report", Payload: map[string]int{"customer": 7},
		Unique: skiplock.UniqueOpts{ByArgs: true, Period: time.Hour}}
	first, err := c.Enqueue(ctx, p)
	require.NoError(t, err)
	require.True(t, first.Inserted)
	_, err = c.JobCancel(ctx, first.ID)
	require.NoError(t, err)
	require.Equal(t, 0, countJobs(t, db.Pool, "queue = 'reports'"), "the job has finished")

	again, err := c.Enqueue(ctx, p)
	require.NoError(t, err)
	require.Equal(t, skiplock.EnqueueResult{ID: first.ID, Inserted: false}, again, "held for the period")

	other := p
	other.Payload = map[string]int{"customer": 8}
	o, err := c.Enqueue(ctx, other)
	require.NoError(t, err)
	require.True(t, o.Inserted, "other args, other key")

	// The period ends (moved, rather than waiting an hour).
	_, err = db.Pool.Exec(ctx, `UPDATE skiplock.unique_keys SET held_until = now() - interval '1 second'`)
	require.NoError(t, err)
	next, err := c.Enqueue(ctx, p)
	require.NoError(t, err)
	require.True(t, next.Inserted, "a new period, a new job")
	require.NotEqual(t, first.ID, next.ID)
}

// Throttle: after a run, the next one waits for the window; debounce
// pushes the waiting job back with each enqueue.
func TestThrottleAndDebounceTimes(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{Logger: quietLogger()})
	runIn := func(id int64) time.Duration {
		var d float64
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT extract(epoch FROM run_at - now()) FROM skiplock.jobs WHERE id = $1`,
			id).Scan(&d))
		return time.Duration(d * float64(time.Second))
	}

	th := skiplock.EnqueueParams{Queue: "th", Kind: "sync", UniqueKey: "acct:9", Throttle: time.Hour}
	r1, err := c.Enqueue(ctx, th)
	require.NoError(t, err)
	require.InDelta(t, 0, float64(runIn(r1.ID)), float64(time.Minute), "the first run is due now")
	_, err = c.JobCancel(ctx, r1.ID) // it ran (finished) just now
	require.NoError(t, err)
	r2, err := c.Enqueue(ctx, th)
	require.NoError(t, err)
	require.True(t, r2.Inserted)
	require.InDelta(t, float64(time.Hour), float64(runIn(r2.ID)), float64(time.Minute), "the next waits for the window")
	r3, err := c.Enqueue(ctx, th)
	require.NoError(t, err)
	require.Equal(t, skiplock.EnqueueResult{ID: r2.ID}, r3, "folded into the waiting run")

	db1 := skiplock.EnqueueParams{Queue: "db", Kind: "render", UniqueKey: "doc:1", Debounce: time.Minute}
	d1, err := c.Enqueue(ctx, db1)
	require.NoError(t, err)
	require.InDelta(t, float64(time.Minute), float64(runIn(d1.ID)), float64(5*time.Second))
	db1.Debounce = time.Hour
	d2, err := c.Enqueue(ctx, db1)
	require.NoError(t, err)
	require.Equal(t, skiplock.EnqueueResult{ID: d1.ID}, d2)
	require.InDelta(t, float64(time.Hour), float64(runIn(d1.ID)), float64(5*time.Second), "pushed back")
}

// Supersede replaces a running job: its handler's context is cancelled,
// its completion (a late write) is refused by the fence, it ends in the
// dead-letter table as cancelled ("superseded"), and the new payload runs
// next, once; the key never has two leases at once.
func TestSupersedeRunningJob(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{Logger: quietLogger(), PollInterval: 20 * time.Millisecond})
	type run struct {
		id    int64
		rev   int
		cause error
	}
	started := make(chan run, 4)
	ended := make(chan run, 4)
	require.NoError(t, skiplock.Handle(c, "render", func(ctx context.Context, j *skiplock.Job[map[string]int]) error {
		started <- run{id: j.ID, rev: j.Args["rev"]}
		if j.Args["rev"] == 1 {
			<-ctx.Done()
			// A stale run that claims success anyway: the fence refuses it.
			ended <- run{id: j.ID, rev: 1, cause: context.Cause(ctx)}
			return nil
		}
		ended <- run{id: j.ID, rev: j.Args["rev"]}
		return nil
	}))
	p := skiplock.EnqueueParams{Kind: "render", UniqueKey: "doc:7", Supersede: true}
	p.Payload = map[string]int{"rev": 1}
	old, err := c.Enqueue(ctx, p)
	require.NoError(t, err)
	require.NoError(t, c.Start(ctx))
	defer func() { require.NoError(t, c.Stop(ctx)) }()
	require.Equal(t, old.ID, (<-started).id)
	getEventually(t, c, old.ID, skiplock.JobStateRunning)

	p.Payload = map[string]int{"rev": 2}
	next, err := c.Enqueue(ctx, p)
	require.NoError(t, err)
	require.True(t, next.Inserted)
	require.NotEqual(t, old.ID, next.ID)

	s := <-started
	require.Equal(t, run{id: next.ID, rev: 2}, s, "the new payload runs next")
	// Both handlers return, in either order: the new run may start and end
	// before the stale one's handler sees its context cancelled (the
	// cancellation reaches it by NOTIFY or at its next heartbeat; a loaded
	// machine showed the new run's end first). Its late success is fenced
	// out either way (below: the stale job is dead, superseded).
	var stale run
	for range 2 {
		e := <-ended
		if e.id == old.ID {
			stale = e
			continue
		}
		require.Equal(t, run{id: next.ID, rev: 2}, e)
	}
	require.Equal(t, old.ID, stale.id)
	require.True(t, errors.Is(stale.cause, skiplock.ErrCancelled) || errors.Is(stale.cause, skiplock.ErrLeaseLost),
		"the stale run's context was cancelled: %v", stale.cause)
	getEventually(t, c, next.ID, skiplock.JobStateCompleted)

	rec, err := c.JobGet(ctx, old.ID)
	require.NoError(t, err)
	require.Equal(t, skiplock.JobStateDead, rec.State, "the stale run's completion was refused")
	require.Equal(t, "cancelled", rec.Outcome)
	var done int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM skiplock.jobs_done WHERE id = $1`, old.ID).Scan(&done))
	require.Zero(t, done, "the superseded run never completed")
	select {
	case r := <-started:
		t.Fatalf("a third run started: %+v", r)
	default:
	}
}

// Supersede while nothing runs: the waiting job takes the newest payload
// and keeps its id.
func TestSupersedeWaitingJob(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{Logger: quietLogger()})
	p := skiplock.EnqueueParams{Queue: "docs", Kind: "render", UniqueKey: "doc:7", Supersede: true, Priority: 1,
		Payload: map[string]int{"rev": 1}}
	a, err := c.Enqueue(ctx, p)
	require.NoError(t, err)
	p.Payload, p.Priority = map[string]int{"rev": 2}, 9
	b, err := c.Enqueue(ctx, p)
	require.NoError(t, err)
	require.Equal(t, skiplock.EnqueueResult{ID: a.ID}, b)
	var rev, prio int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT (payload->>'rev')::int, priority FROM skiplock.jobs WHERE id = $1`,
		a.ID).Scan(&rev, &prio))
	require.Equal(t, []int{2, 9}, []int{rev, prio})
}

type hourlyReport struct {
	Customer int `json:"customer"`
}

func (hourlyReport) Kind() string { return "hourly_report" }
func (hourlyReport) EnqueueOpts() skiplock.EnqueueOpts {
	return skiplock.EnqueueOpts{Queue: "reports", Priority: 5, MaxAttempts: 3, Tenant: "t1",
		Unique: skiplock.UniqueOpts{ByArgs: true, Period: time.Hour}}
}

// An args type's EnqueueOpts are the defaults a call site may override.
func TestJobArgsWithOpts(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{Logger: quietLogger()})
	var _ skiplock.JobArgsWithOpts = hourlyReport{}

	a, err := c.Enqueue(ctx, skiplock.EnqueueParams{Payload: hourlyReport{Customer: 1}})
	require.NoError(t, err)
	require.True(t, a.Inserted)
	b, err := c.Enqueue(ctx, skiplock.EnqueueParams{Payload: hourlyReport{Customer: 1}})
	require.NoError(t, err)
	require.Equal(t, skiplock.EnqueueResult{ID: a.ID}, b, "the type's uniqueness applies")
	var queue, tenant string
	var prio, maxAttempts int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT queue, priority, max_attempts, tenant FROM skiplock.jobs WHERE id = $1`,
		a.ID).Scan(&queue, &prio, &maxAttempts, &tenant))
	require.Equal(t, []any{"reports", 5, 3, "t1"}, []any{queue, prio, maxAttempts, tenant})

	// The call site overrides: another queue and priority, its own key.
	o, err := c.Enqueue(ctx, skiplock.EnqueueParams{Payload: hourlyReport{Customer: 1}, Queue: "urgent", Priority: 50,
		UniqueKey: "manual"})
	require.NoError(t, err)
	require.True(t, o.Inserted)
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT queue, priority, max_attempts, tenant FROM skiplock.jobs WHERE id = $1`,
		o.ID).Scan(&queue, &prio, &maxAttempts, &tenant))
	require.Equal(t, []any{"urgent", 50, 3, "t1"}, []any{queue, prio, maxAttempts, tenant})
	require.Equal(t, 0, countJobs(t, db.Pool, "id = $1 AND unique_key IS DISTINCT FROM 'manual'", o.ID))
}

// EnqueueMany takes the modes through enqueue_job (not COPY): one key, one job.
func TestEnqueueManyWithModes(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{Logger: quietLogger()})
	var ps []skiplock.EnqueueParams
	for i := range 5 {
		ps = append(ps,
			skiplock.EnqueueParams{Queue: "many", Kind: "k", Payload: map[string]int{"i": i}, UniqueKey: "s", Supersede: true},
			skiplock.EnqueueParams{Queue: "many", Kind: "k", Payload: map[string]int{"x": 1}, Unique: skiplock.UniqueOpts{ByArgs: true}},
			skiplock.EnqueueParams{Queue: "many", Kind: "k", Payload: map[string]int{"i": i}})
	}
	n, err := c.EnqueueMany(ctx, ps)
	require.NoError(t, err)
	require.Equal(t, int64(7), n, "one superseded key, one by args, five plain")
	require.Equal(t, 7, countJobs(t, db.Pool, "queue = 'many'"))
	require.Equal(t, 1, countJobs(t, db.Pool, "queue = 'many' AND unique_key = 's' AND (payload->>'i')::int = 4"),
		"the last payload won")
}

// Bad options are errors naming the field, in Go and in SQL alike.
func TestUniqueAndModesBadInput(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{Logger: quietLogger()})
	for _, tc := range []struct {
		p     skiplock.EnqueueParams
		field string
	}{
		{skiplock.EnqueueParams{Kind: "k", Supersede: true}, "unique_key"},
		{skiplock.EnqueueParams{Kind: "k", Unique: skiplock.UniqueOpts{Period: time.Hour}}, "unique_key"},
		{skiplock.EnqueueParams{Kind: "k", UniqueKey: "a", Unique: skiplock.UniqueOpts{ByArgs: true}}, "unique_key"},
		{skiplock.EnqueueParams{Kind: "k", Unique: skiplock.UniqueOpts{ArgsFields: []string{"a"}}}, "unique_fields"},
		{skiplock.EnqueueParams{Kind: "k", UniqueKey: "a", Unique: skiplock.UniqueOpts{Period: time.Millisecond}}, "unique_period"},
		{skiplock.EnqueueParams{Kind: "k", UniqueKey: "a", Supersede: true, Throttle: time.Second}, "mode"},
		{skiplock.EnqueueParams{Kind: "k", UniqueKey: "a", Debounce: -time.Second}, "debounce"},
		{skiplock.EnqueueParams{Kind: "k", UniqueKey: "a", Throttle: time.Hour, Unique: skiplock.UniqueOpts{Period: time.Hour}}, "throttle"},
		{skiplock.EnqueueParams{Kind: "k", UniqueKey: "a", Supersede: true, BumpSchedule: true}, "supersede"},
	} {
		_, err := c.Enqueue(ctx, tc.p)
		requireField(t, err, tc.field)
	}
	require.Equal(t, 0, countJobs(t, db.Pool, "true"))

	for _, tc := range []struct{ args, field string }{
		{"unique_key => 'a', supersede => true, debounce => '1 s'", "mode"},
		{"supersede => true", "unique_key"},
		{"unique_by => 'payload'", "unique_by"},
		{"unique_key => 'a', unique_by => 'args'", "unique_key"},
		{"unique_key => 'a', unique_period => '1 ms'", "unique_period"},
		{"unique_key => 'a', throttle => '0 s'", "throttle"},
	} {
		_, err := db.Pool.Exec(ctx, "SELECT skiplock.enqueue('q', 'k', "+tc.args+")")
		var pe *pgconn.PgError
		require.True(t, errors.As(err, &pe), "%s: %v", tc.args, err)
		require.Equal(t, "22023", pe.Code, tc.args)
		require.Contains(t, pe.Message, "skiplock: "+tc.field+":", tc.args)
	}
}

// The SQL API decides as the Go API does.
func TestSQLEnqueueModes(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	one := func(pool *pgxpool.Pool, sql string) int64 {
		var id int64
		require.NoError(t, pool.QueryRow(ctx, sql).Scan(&id))
		return id
	}
	hourly := `SELECT skiplock.enqueue(queue => 'mail', kind => 'digest', payload => '{"customer": 42}',
		unique_by => 'args', unique_period => '1 hour')`
	a := one(db.Pool, hourly)
	require.Equal(t, a, one(db.Pool, hourly))
	render := func(rev int) string {
		return `SELECT skiplock.enqueue(queue => 'docs', kind => 'render', payload => '{"rev": ` + string(rune('0'+rev)) +
			`}', unique_key => 'render:7', supersede => true)`
	}
	r1 := one(db.Pool, render(1))
	require.Equal(t, r1, one(db.Pool, render(2)))
	require.Equal(t, 1, countJobs(t, db.Pool, "queue = 'docs' AND payload->>'rev' = '2'"))
	// Existing calls keep working.
	plain := one(db.Pool, `SELECT skiplock.enqueue('q', 'k', '{}', 0, now(), NULL, 'u1')`)
	require.Equal(t, plain, one(db.Pool, `SELECT skiplock.enqueue('q', 'k', unique_key => 'u1')`))
}

// A storm of supersedes of one key against two worker processes whose
// handler claims success even when cancelled: no superseded job ever
// completes (each one's completion is refused by the fence), the completed
// runs of the key never overlap (by the database's clock: claim to
// completion), and the last payload is the one that completes last.
func TestSupersedeStorm(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	const enqueues = 60
	var mu sync.Mutex
	returnedOK := map[int64]bool{} // guarded by mu: runs whose handler returned nil
	clients := make([]*skiplock.Client, 2)
	for i := range clients {
		clients[i] = newClient(t, db.Pool, skiplock.Config{Logger: quietLogger(), PollInterval: 10 * time.Millisecond,
			Pools: []skiplock.WorkerPool{{Queues: []string{"storm"}, Concurrency: 4}}})
		require.NoError(t, skiplock.Handle(clients[i], "render", func(ctx context.Context, j *skiplock.Job[map[string]int]) error {
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(j.Args["rev"]%7) * time.Millisecond):
			}
			mu.Lock()
			returnedOK[j.ID] = true
			mu.Unlock()
			return nil // even when cancelled: the fence must refuse a superseded run's completion
		}))
		require.NoError(t, clients[i].Start(ctx))
	}
	defer func() {
		for _, c := range clients {
			require.NoError(t, c.Stop(ctx))
		}
	}()
	var last skiplock.EnqueueResult
	for rev := 1; rev <= enqueues; rev++ {
		var err error
		last, err = clients[rev%2].Enqueue(ctx, skiplock.EnqueueParams{Queue: "storm", Kind: "render", UniqueKey: "doc",
			Supersede: true, Payload: map[string]int{"rev": rev}})
		require.NoError(t, err)
		time.Sleep(time.Duration(rev%4) * time.Millisecond)
	}
	getEventually(t, clients[0], last.ID, skiplock.JobStateCompleted)

	var superseded, completedSuperseded int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE d.id IN (SELECT id FROM skiplock.jobs_done))
		FROM skiplock.jobs_dead AS d WHERE d.last_error = 'superseded'`).Scan(&superseded, &completedSuperseded))
	require.Zero(t, completedSuperseded, "a superseded job completed")
	require.Positive(t, superseded, "the storm superseded running jobs")
	var overlaps int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM skiplock.jobs_done AS a JOIN skiplock.jobs_done AS b
		ON a.id < b.id AND a.attempted_at < b.finished_at AND b.attempted_at < a.finished_at
		WHERE a.queue = 'storm' AND b.queue = 'storm'`).Scan(&overlaps))
	require.Zero(t, overlaps, "two completed runs of the key overlapped")
	var lastRev int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT (payload->>'rev')::int FROM skiplock.jobs_done
		WHERE queue = 'storm' ORDER BY finished_at DESC LIMIT 1`).Scan(&lastRev))
	require.Equal(t, enqueues, lastRev, "the newest payload completes last")
	require.Equal(t, 0, countJobs(t, db.Pool, "queue = 'storm'"), "nothing left")
	mu.Lock()
	refused := 0
	for id := range returnedOK {
		var done bool
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM skiplock.jobs_done WHERE id = $1)`, id).Scan(&done))
		if !done {
			refused++
		}
	}
	mu.Unlock()
	t.Logf("%d enqueues, %d running jobs superseded, %d handler successes refused by the fence", enqueues, superseded, refused)
}
