package skiplock_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/devdb"
	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/pgbouncertest"
)

type renderArgs struct {
	Doc string `json:"doc"`
}

type echoArgs struct {
	N int `json:"n"`
}

type rendered struct {
	URL string `json:"url"`
}

// resultHandlers registers: render (a result), fail (a final failure
// after one attempt), plain (no result), big (a result over the bound).
func resultHandlers(t *testing.T, c *skiplock.Client) {
	t.Helper()
	require.NoError(t, skiplock.Handle(c, "render", func(ctx context.Context, j *skiplock.Job[renderArgs]) error {
		return skiplock.SetResult(ctx, rendered{URL: "https://example.test/" + j.Args.Doc + ".pdf"})
	}))
	require.NoError(t, skiplock.Handle(c, "fail", func(ctx context.Context, j *skiplock.Job[struct{}]) error {
		require.NoError(t, skiplock.SetResult(ctx, "dropped: the attempt fails"))
		return errors.New("the printer is on fire")
	}, skiplock.WithMaxAttempts(1)))
	require.NoError(t, skiplock.Handle(c, "plain", func(ctx context.Context, j *skiplock.Job[struct{}]) error { return nil }))
	require.NoError(t, skiplock.Handle(c, "big", func(ctx context.Context, j *skiplock.Job[struct{}]) error {
		err := skiplock.SetResult(ctx, make([]byte, skiplock.MaxResultBytes))
		require.ErrorIs(t, err, skiplock.ErrResultTooLarge)
		return nil
	}))
}

// A handler's result is kept with the finished job; Wait (woken by
// NOTIFY, and by polling alone), JobResult and EnqueueAndWait return it; a
// failed job's result is its last error.
func TestResultsWaitAndEnqueueAndWait(t *testing.T) {
	t.Parallel()
	for _, pollOnly := range []bool{false, true} {
		t.Run(fmt.Sprintf("poll_only=%v", pollOnly), func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cfg := skiplock.Config{Logger: quietLogger(), PollOnly: pollOnly, PollInterval: 200 * time.Millisecond}
			c := newClient(t, db.Pool, cfg)
			resultHandlers(t, c)
			// The waiting client is a pure producer of its own, as an HTTP
			// handler's process would be.
			producer := newClient(t, db.Pool, cfg)

			require.ErrorIs(t, skiplock.SetResult(ctx, 1), skiplock.ErrNotInHandler)
			require.ErrorIs(t, skiplock.SetProgress(ctx, 1, 2, ""), skiplock.ErrNotInHandler)

			enq := func(kind string, args any) int64 {
				r, err := producer.Enqueue(ctx, skiplock.EnqueueParams{Kind: kind, Payload: args})
				require.NoError(t, err)
				return r.ID
			}
			render := enq("render", renderArgs{Doc: "a"})
			fail := enq("fail", nil)
			plain := enq("plain", nil)
			big := enq("big", nil)

			// Before any worker runs: the wait times out with nothing known.
			short, stop := context.WithTimeout(ctx, 300*time.Millisecond)
			ends, err := producer.Wait(short, render, plain)
			stop()
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.Len(t, ends, 2)
			require.Empty(t, ends[0].State)
			got, err := producer.JobResult(ctx, render)
			require.NoError(t, err)
			require.Equal(t, skiplock.JobStateReady, got.State)

			require.NoError(t, c.Start(ctx))
			defer func() { require.NoError(t, c.Stop(context.Background())) }()

			ends, err = producer.Wait(ctx, render, fail, plain, big, render)
			require.NoError(t, err)
			require.Len(t, ends, 5)
			require.Equal(t, skiplock.JobStateCompleted, ends[0].State)
			require.JSONEq(t, `{"url":"https://example.test/a.pdf"}`, string(ends[0].Result))
			require.Equal(t, ends[0], ends[4], "the same id twice: the same end")
			require.Equal(t, skiplock.JobStateDead, ends[1].State)
			require.Equal(t, "error", ends[1].Reason)
			require.Equal(t, "the printer is on fire", ends[1].Error, "a failed job's result is its last error")
			require.Nil(t, ends[1].Result, "a failed attempt's result is dropped")
			require.Equal(t, skiplock.JobStateCompleted, ends[2].State)
			require.Nil(t, ends[2].Result)
			require.Equal(t, skiplock.JobStateCompleted, ends[3].State)
			require.Nil(t, ends[3].Result, "a refused result is not kept")

			got, err = producer.JobResult(ctx, render)
			require.NoError(t, err)
			require.Equal(t, ends[0], got)
			var noResult int
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM skiplock.jobs_done WHERE result IS NULL`).Scan(&noResult))
			require.Equal(t, 2, noResult, "no result written for runs without one")

			// Typed.
			r, err := skiplock.EnqueueAndWait[rendered](ctx, producer, skiplock.EnqueueParams{Kind: "render", Payload: renderArgs{Doc: "b"}})
			require.NoError(t, err)
			require.Equal(t, "https://example.test/b.pdf", r.URL)
			_, err = skiplock.EnqueueAndWait[rendered](ctx, producer, skiplock.EnqueueParams{Kind: "fail"})
			var fe *skiplock.JobFailedError
			require.ErrorAs(t, err, &fe)
			require.ErrorIs(t, err, skiplock.ErrJobFailed)
			require.Equal(t, "the printer is on fire", fe.Err)

			// A job no table holds any more.
			_, err = db.Pool.Exec(ctx, `DELETE FROM skiplock.jobs_done WHERE id = $1`, plain)
			require.NoError(t, err)
			ends, err = producer.Wait(ctx, plain)
			require.NoError(t, err)
			require.Equal(t, skiplock.JobStateGone, ends[0].State)
		})
	}
}

// A handler calling SetProgress a million times writes at most one
// progress row per second of its run (plus its last report with the
// completion); job get shows the report while it runs, and the finished
// job keeps the last one.
func TestSetProgressIsCoalesced(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := newClient(t, db.Pool, skiplock.Config{Logger: quietLogger()})
	const calls = 1_000_000
	halfway := make(chan struct{})
	seen := make(chan struct{})
	var ran time.Duration
	require.NoError(t, skiplock.Handle(c, "import", func(ctx context.Context, j *skiplock.Job[struct{}]) error {
		start := time.Now()
		for i := int64(1); i <= calls; i++ {
			if err := skiplock.SetProgress(ctx, i, calls, "rows imported"); err != nil {
				return err
			}
			if i == calls/2 {
				close(halfway)
				<-seen // job get saw a report written while running
			}
		}
		ran = time.Since(start)
		return nil
	}))
	r, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "import"})
	require.NoError(t, err)
	require.NoError(t, c.Start(ctx))
	defer func() { require.NoError(t, c.Stop(context.Background())) }()

	<-halfway
	release := sync.OnceFunc(func() { close(seen) })
	defer release()
	var rec *skiplock.JobRecord
	require.Eventually(t, func() bool {
		rec, err = c.JobGet(ctx, r.ID)
		return err == nil && rec.Progress != nil && rec.Progress.Done == calls/2
	}, 5*time.Second, 20*time.Millisecond, "the report made before pausing was not written while the job ran")
	require.Equal(t, skiplock.JobStateRunning, rec.State)
	require.Equal(t, int64(calls/2), rec.Progress.Done)
	require.Equal(t, int64(calls), rec.Progress.Total)
	require.Equal(t, "rows imported", rec.Progress.Note)
	release()

	ends, err := c.Wait(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, skiplock.JobStateCompleted, ends[0].State)
	rec, err = c.JobGet(ctx, r.ID)
	require.NoError(t, err)
	require.NotNil(t, rec.Progress)
	require.Equal(t, int64(calls), rec.Progress.Done, "the last report is kept with the completion")

	rows := c.Stats().ProgressRows
	bound := int64(ran/skiplock.ProgressInterval) + 2
	t.Logf("%d SetProgress calls in %v: %d progress rows written (bound %d), plus the completion", calls, ran.Round(time.Millisecond), rows, bound)
	require.GreaterOrEqual(t, rows, int64(1))
	require.LessOrEqual(t, rows, bound, "at most one write per job per interval")
}

// One Wait for 10,000 jobs, and 10,000 callers waiting for one job each:
// one look-up loop and one LISTEN connection, whatever the number of jobs
// and callers; every job reported exactly once. The wake-up latency after
// completion is logged (a figure, not an assertion), with the jobs run by
// a worker in another process (as an HTTP server waits for jobs its
// workers run) and by a worker pool in the waiting process itself, whose
// full-speed drain then shares the process and its cores with the
// waiters; and with jobs of 10 ms, whose drain leaves the cores room.
func TestWaitForTenThousandJobs(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 jobs")
	}
	// Not parallel: it counts the process's goroutines, which tests
	// running beside it would add to.
	t.Run("worker in another process", func(t *testing.T) { waitForTenThousand(t, false, 0) })
	t.Run("worker in this process", func(t *testing.T) { waitForTenThousand(t, true, 0) })
	// Jobs that take 10 ms: 5,000 a second through 50 executors, the
	// drain no longer taking every core.
	t.Run("worker in another process, 10 ms jobs", func(t *testing.T) { waitForTenThousand(t, false, 10*time.Millisecond) })
}

// waitWorkerEnv names the database a TestWaitWorkerProcess runs jobs of,
// waitPauseEnv how long each job takes.
const (
	waitWorkerEnv = "SKIPLOCK_TEST_WAIT_WORKER_URL"
	waitPauseEnv  = "SKIPLOCK_TEST_WAIT_WORKER_PAUSE"
)

// TestWaitWorkerProcess is the worker process of TestWaitForTenThousandJobs
// (this test binary, run again): it runs the echo jobs of the database
// named by waitWorkerEnv until its standard input closes.
func TestWaitWorkerProcess(t *testing.T) {
	u := os.Getenv(waitWorkerEnv)
	if u == "" {
		t.Skip("the worker process of TestWaitForTenThousandJobs")
	}
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(u)
	require.NoError(t, err)
	cfg.MaxConns = 20
	dbtest.TrimIdle(cfg)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	pause, err := time.ParseDuration(os.Getenv(waitPauseEnv))
	require.NoError(t, err)
	worker := newClient(t, pool, echoWorkerConfig())
	echoHandler(t, worker, pause)
	require.NoError(t, worker.Start(ctx))
	_, _ = io.Copy(io.Discard, os.Stdin)
	require.NoError(t, worker.Stop(ctx))
}

// echoWorkerConfig is the worker of TestWaitForTenThousandJobs: 50
// executors, batches of 200.
func echoWorkerConfig() skiplock.Config {
	return skiplock.Config{Logger: quietLogger(),
		Pools: []skiplock.WorkerPool{{Name: "default", Queues: []string{"default"}, Concurrency: 50, BatchSize: 200}}}
}

// echoHandler registers echo, whose result is its argument, after pause.
func echoHandler(t *testing.T, c *skiplock.Client, pause time.Duration) {
	t.Helper()
	require.NoError(t, skiplock.Handle(c, "echo", func(ctx context.Context, j *skiplock.Job[echoArgs]) error {
		time.Sleep(pause)
		return skiplock.SetResult(ctx, j.Args.N)
	}))
}

func waitForTenThousand(t *testing.T, inProcess bool, pause time.Duration) {
	db := dbtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	const n = 10_000
	producer := newClient(t, db.Pool, skiplock.Config{Logger: quietLogger()})
	ps := make([]skiplock.EnqueueParams, n)
	for i := range ps {
		ps[i] = skiplock.EnqueueParams{Kind: "echo", Payload: echoArgs{N: i}}
	}
	_, err := producer.EnqueueMany(ctx, ps)
	require.NoError(t, err)
	var ids []int64
	rows, err := db.Pool.Query(ctx, `SELECT id FROM skiplock.jobs ORDER BY id`)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	require.Len(t, ids, n)

	before := runtime.NumGoroutine()
	// 10,000 callers, one job each, and one caller for all of them.
	returned := make([]time.Time, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ends, err := producer.Wait(ctx, id)
			returned[i] = time.Now()
			if err != nil || ends[0].State != skiplock.JobStateCompleted || string(ends[0].Result) != fmt.Sprint(i) {
				mu.Lock()
				failures = append(failures, fmt.Sprintf("job %d: %v %+v", id, err, ends))
				mu.Unlock()
			}
		}()
	}
	allDone := make(chan []skiplock.JobEnd, 1)
	go func() {
		ends, err := producer.Wait(ctx, ids...)
		require.NoError(t, err)
		allDone <- ends
	}()
	// Let every caller register, then count what the waiting costs.
	time.Sleep(500 * time.Millisecond)
	during := runtime.NumGoroutine() - before - n - 1
	var listeners int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'skiplock-wait'`).Scan(&listeners))

	if inProcess {
		worker := newClient(t, db.Pool, echoWorkerConfig())
		echoHandler(t, worker, pause)
		require.NoError(t, worker.Start(ctx))
		defer func() { require.NoError(t, worker.Stop(context.Background())) }()
	} else {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestWaitWorkerProcess$")
		cmd.Env = append(os.Environ(), waitWorkerEnv+"="+db.URL, waitPauseEnv+"="+pause.String())
		stdin, err := cmd.StdinPipe()
		require.NoError(t, err)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		require.NoError(t, cmd.Start())
		defer func() {
			_ = stdin.Close()
			require.NoError(t, cmd.Wait(), "the worker process: %s", &out)
		}()
	}
	wg.Wait()
	ends := <-allDone
	require.Empty(t, failures)
	for i, e := range ends {
		require.Equal(t, skiplock.JobStateCompleted, e.State)
		require.Equal(t, fmt.Sprint(i), string(e.Result), "each job reported with its own result")
	}
	t.Logf("waiting for %d jobs (%d callers + one for all): %d goroutines and %d LISTEN connection(s) of skiplock's", n, n, during, listeners)
	require.LessOrEqual(t, during, 4, "no goroutine per waiter: the look-up loop and the listener's")
	require.Equal(t, 1, listeners, "one LISTEN connection")

	// Wake-up latency: from each job's completion to its caller's return,
	// on the database's clock (this machine's). The completion is the
	// commit of the statement that wrote it when the server records commit
	// times (track_commit_timestamp); else the start of that transaction
	// (finished_at), which adds the completion statement's own duration.
	var commitTimes bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT current_setting('track_commit_timestamp')::bool`).Scan(&commitTimes))
	from, clock := `finished_at`, "the completion's transaction start (finished_at)"
	if commitTimes {
		from, clock = `pg_xact_commit_timestamp(xmin)`, "the completion's commit (track_commit_timestamp)"
	}
	finished := map[int64]time.Time{}
	rows, err = db.Pool.Query(ctx, `SELECT id, `+from+` FROM skiplock.jobs_done`)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		var at time.Time
		require.NoError(t, rows.Scan(&id, &at))
		finished[id] = at
	}
	require.NoError(t, rows.Err())
	lat := make([]time.Duration, 0, n)
	for i, id := range ids {
		lat = append(lat, returned[i].Sub(finished[id]))
	}
	slices.Sort(lat)
	t.Logf("wake-up after %s: p50 %v, p99 %v, max %v", clock, lat[n/2].Round(time.Microsecond), lat[n*99/100].Round(time.Microsecond), lat[n-1].Round(time.Microsecond))
}

// Behind PgBouncer (transaction mode): with ListenURL, Wait is woken by
// NOTIFY on the direct connection (the poll is an hour away); without it,
// the waiter's listener finds the pooler and the poll alone finds the job,
// also when the waiting client runs worker pools of its own (whose
// subscription to the shared listener found the pooler first).
func TestWaitBehindPgBouncer(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	b := pgbouncertest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	worker := newClient(t, db.Pool, skiplock.Config{Schema: db.Schema, Logger: quietLogger()})
	resultHandlers(t, worker)
	require.NoError(t, worker.Start(ctx))
	defer func() { require.NoError(t, worker.Stop(context.Background())) }()
	pool := pooled(t, b.URL(t, db.URL))
	for _, tc := range []struct {
		name string
		cfg  skiplock.Config
		work bool
	}{
		{"listen-url", skiplock.Config{ListenURL: db.URL, PollInterval: time.Hour}, false},
		{"poll", skiplock.Config{PollInterval: 100 * time.Millisecond}, false},
		{"poll-with-workers", skiplock.Config{PollInterval: 100 * time.Millisecond}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Schema, tc.cfg.Logger = db.Schema, quietLogger()
			producer := newClient(t, pool, tc.cfg)
			if tc.work {
				resultHandlers(t, producer)
				require.NoError(t, producer.Start(ctx))
				defer func() { require.NoError(t, producer.Stop(context.Background())) }()
			}
			// The first look-up runs at once; wait until the listener is up
			// (with ListenURL) by waiting for a first job, then time the
			// second, which only an announcement can deliver in time.
			for range 2 {
				r, err := skiplock.EnqueueAndWait[rendered](ctx, producer, skiplock.EnqueueParams{Kind: "render", Payload: renderArgs{Doc: tc.name}})
				require.NoError(t, err)
				require.Equal(t, "https://example.test/"+tc.name+".pdf", r.URL)
			}
			if tc.work {
				require.False(t, producer.Stats().ListenerUp, "no LISTEN through the pooler")
			}
		})
	}
}

// WAL per job for a job that reports progress every 10 ms for 10 s, and the
// same job reporting nothing, on a private cluster (so the WAL is this
// test's alone): from enqueue to completion, pg_current_wal_insert_lsn
// before and after. A figure for the report (logged); the assertion is the
// row bound.
func TestProgressWAL(t *testing.T) {
	if testing.Short() {
		t.Skip("a cluster of its own and 20 s of handlers")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cluster, err := devdb.Start(ctx, devdb.Options{})
	if err != nil {
		t.Skipf("no private cluster: %v", err)
	}
	defer func() { _ = cluster.Remove() }()
	pool, err := pgxpool.New(ctx, cluster.URL("postgres"))
	require.NoError(t, err)
	defer pool.Close()
	_, err = skiplock.Migrate(ctx, pool, "skiplock")
	require.NoError(t, err)
	c := newClient(t, pool, skiplock.Config{Logger: quietLogger()})
	const run = 10 * time.Second
	require.NoError(t, skiplock.Handle(c, "report", func(ctx context.Context, j *skiplock.Job[struct{}]) error {
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for i, end := int64(0), time.Now().Add(run); time.Now().Before(end); i++ {
			if err := skiplock.SetProgress(ctx, i, 1000, "rows"); err != nil {
				return err
			}
			<-t.C
		}
		return nil
	}))
	require.NoError(t, skiplock.Handle(c, "quiet", func(ctx context.Context, j *skiplock.Job[struct{}]) error {
		time.Sleep(run)
		return nil
	}))
	require.NoError(t, c.Start(ctx))
	defer func() { require.NoError(t, c.Stop(context.Background())) }()
	walOf := func(kind string) (bytes, rows int64) {
		var start string
		require.NoError(t, pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&start))
		before := c.Stats().ProgressRows
		r, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: kind})
		require.NoError(t, err)
		_, err = c.Wait(ctx, r.ID)
		require.NoError(t, err)
		rows = c.Stats().ProgressRows - before
		require.NoError(t, pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)::bigint`, start).Scan(&bytes))
		return bytes, rows
	}
	quiet, _ := walOf("quiet")
	report, rows := walOf("report")
	t.Logf("WAL from enqueue to completion, whole private cluster (heartbeats, worker beats and the ring's turns included): a job reporting progress every 10 ms for %v: %d bytes (%d progress writes); the same job reporting nothing: %d bytes",
		run, report, rows, quiet)
	require.LessOrEqual(t, rows, int64(run/skiplock.ProgressInterval)+2)
}

// Connection faults while waiting: the waiter's LISTEN connection and its
// pool's connections are terminated again and again while 2,000 jobs are
// drained; every awaited job is still reported, once, with its own result.
func TestWaitUnderConnectionFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("2,000 jobs under faults")
	}
	t.Parallel()
	db := dbtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	const n = 2_000
	worker := newClient(t, db.Pool, skiplock.Config{Logger: quietLogger()})
	require.NoError(t, skiplock.Handle(worker, "echo", func(ctx context.Context, j *skiplock.Job[echoArgs]) error {
		return skiplock.SetResult(ctx, j.Args.N)
	}))
	// The waiter has a pool of its own, whose connections the faults kill.
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["application_name"] = "skiplock-wait-pool"
	waitPool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer waitPool.Close()
	producer := newClient(t, waitPool, skiplock.Config{Logger: quietLogger(), PollInterval: 200 * time.Millisecond})
	ids := make([]int64, n)
	for i := range ids {
		r, err := worker.Enqueue(ctx, skiplock.EnqueueParams{Kind: "echo", Payload: echoArgs{N: i}})
		require.NoError(t, err)
		ids[i] = r.ID
	}
	faults := make(chan struct{})
	killed := 0
	go func() {
		defer close(faults)
		for ctx.Err() == nil {
			var k int
			_ = db.Pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
				WHERE datname = current_database() AND application_name IN ('skiplock-wait', 'skiplock-wait-pool')`).Scan(&k)
			killed += k
			select {
			case <-ctx.Done():
			case <-time.After(150 * time.Millisecond):
			}
		}
	}()
	require.NoError(t, worker.Start(ctx))
	defer func() { require.NoError(t, worker.Stop(context.Background())) }()
	// A look-up whose connection was killed is retried at the next poll;
	// Wait itself fails only when its context ends.
	ends, err := producer.Wait(ctx, ids...)
	require.NoError(t, err)
	cancel()
	<-faults
	require.Len(t, ends, n)
	for i, e := range ends {
		require.Equal(t, ids[i], e.ID)
		require.Equal(t, skiplock.JobStateCompleted, e.State, "job %d", e.ID)
		require.Equal(t, fmt.Sprint(i), string(e.Result), "job %d reported with its own result", e.ID)
	}
	t.Logf("%d jobs awaited through %d terminated connections", n, killed)
	require.Positive(t, killed, "the faults hit the waiter")
}

// Fleet.Wait waits across databases: each job by its database and id (ids
// are per database, so the same id in two databases is two jobs).
func TestFleetWait(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var clients []*skiplock.Client
	for range 2 {
		db := dbtest.New(t)
		c := newClient(t, db.Pool, skiplock.Config{Logger: quietLogger()})
		resultHandlers(t, c)
		clients = append(clients, c)
	}
	fleet, err := skiplock.NewFleet(clients, func(p skiplock.EnqueueParams) int {
		if p.Tenant == "b" {
			return 1
		}
		return 0
	})
	require.NoError(t, err)
	var jobs []skiplock.FleetJob
	for _, tenant := range []string{"a", "b"} {
		r, err := fleet.Enqueue(ctx, skiplock.EnqueueParams{Kind: "render", Tenant: tenant, Payload: renderArgs{Doc: tenant}})
		require.NoError(t, err)
		jobs = append(jobs, skiplock.FleetJob{Database: r.Database, ID: r.ID})
	}
	require.Equal(t, jobs[0].ID, jobs[1].ID, "the same id in each database")
	require.NoError(t, fleet.Start(ctx))
	defer func() { require.NoError(t, fleet.Stop(context.Background())) }()
	ends, err := fleet.Wait(ctx, jobs...)
	require.NoError(t, err)
	require.JSONEq(t, `{"url":"https://example.test/a.pdf"}`, string(ends[0].Result))
	require.JSONEq(t, `{"url":"https://example.test/b.pdf"}`, string(ends[1].Result))
	_, err = fleet.Wait(ctx, skiplock.FleetJob{Database: 2, ID: 1})
	require.ErrorIs(t, err, skiplock.ErrInvalidConfig)
}

// A client that runs worker pools and waits has one LISTEN connection for
// both (internal/notify): named skiplock-wait while it carries the waits,
// skiplock-listener before and after. Both wake-ups go through it: with
// the poll an hour away, a job enqueued is picked up by NOTIFY on the
// ready jobs' channel, and its end returns Wait by NOTIFY on the finished
// jobs' channel.
func TestWorkersAndWaitersShareOneListenConnection(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := newClient(t, db.Pool, skiplock.Config{Logger: quietLogger(), PollInterval: time.Hour})
	release := make(chan struct{})
	require.NoError(t, skiplock.Handle(c, "hold", func(ctx context.Context, j *skiplock.Job[struct{}]) error {
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
		return skiplock.SetResult(ctx, "released")
	}))
	// The LISTEN connections of this database, by name (the test's pool
	// has a name of its own).
	listeners := func() map[string]int {
		rows, err := db.Pool.Query(ctx, `SELECT application_name, count(*)::int FROM pg_stat_activity
			WHERE datname = current_database() AND application_name IN ('skiplock-listener', 'skiplock-wait')
			GROUP BY 1`)
		require.NoError(t, err)
		out := map[string]int{}
		for rows.Next() {
			var name string
			var n int
			require.NoError(t, rows.Scan(&name, &n))
			out[name] = n
		}
		require.NoError(t, rows.Err())
		return out
	}
	eventually := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			require.True(t, time.Now().Before(deadline), "timed out waiting for %s (listeners %v)", what, listeners())
			time.Sleep(20 * time.Millisecond)
		}
	}
	require.NoError(t, c.Start(ctx))
	stopped := false
	defer func() {
		if !stopped {
			require.NoError(t, c.StopAndCancel(context.Background()))
		}
	}()
	eventually("the runtime's listener", func() bool { return c.Stats().ListenerUp })
	require.Equal(t, map[string]int{"skiplock-listener": 1}, listeners())

	r, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "hold"})
	require.NoError(t, err)
	type waited struct {
		ends []skiplock.JobEnd
		err  error
		at   time.Time
	}
	done := make(chan waited, 1)
	go func() {
		ends, err := c.Wait(ctx, r.ID)
		done <- waited{ends, err, time.Now()}
	}()
	eventually("the job picked up by NOTIFY (the poll is an hour away)", func() bool {
		e, err := c.JobResult(ctx, r.ID)
		return err == nil && e.State == skiplock.JobStateRunning
	})
	eventually("the waiters on the same connection", func() bool {
		return maps.Equal(listeners(), map[string]int{"skiplock-wait": 1})
	})
	// Past the worker's first look for waiters (once a second) and the
	// waiters' own second look-up (1.5 s after they listen): from here on
	// only an announcement can return Wait before the hour's poll.
	time.Sleep(2 * time.Second)
	require.Empty(t, done, "the job is still running")
	released := time.Now()
	close(release)
	var w waited
	select {
	case w = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Wait was not woken by the job's end")
	}
	require.NoError(t, w.err)
	require.Equal(t, skiplock.JobStateCompleted, w.ends[0].State)
	require.JSONEq(t, `"released"`, string(w.ends[0].Result))
	t.Logf("Wait returned %v after the handler was released", w.at.Sub(released).Round(time.Millisecond))
	eventually("the waiters' subscription to leave the connection", func() bool {
		return maps.Equal(listeners(), map[string]int{"skiplock-listener": 1})
	})

	// A job enqueued now is still picked up by NOTIFY on the same connection.
	r2, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "hold"})
	require.NoError(t, err)
	ends, err := c.Wait(ctx, r2.ID)
	require.NoError(t, err)
	require.Equal(t, skiplock.JobStateCompleted, ends[0].State)

	stopped = true
	require.NoError(t, c.Stop(ctx))
	eventually("the connection to close with the last subscription", func() bool { return len(listeners()) == 0 })
}

// Waits one after another, as a web server's requests come: the waiting
// client's LISTEN connection stays between them (a few seconds after the
// last, waitLinger), so the next wait neither connects nor finds the
// workers not announcing; then it closes, or at once with Stop.
func TestWaitKeepsListeningBetweenWaits(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	worker := newClient(t, db.Pool, skiplock.Config{Logger: quietLogger()})
	resultHandlers(t, worker)
	require.NoError(t, worker.Start(ctx))
	defer func() { require.NoError(t, worker.Stop(context.Background())) }()
	waiter := newClient(t, db.Pool, skiplock.Config{Logger: quietLogger()})
	waitPIDs := func() []int {
		rows, err := db.Pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'skiplock-wait'`)
		require.NoError(t, err)
		pids, err := pgx.CollectRows(rows, pgx.RowTo[int])
		require.NoError(t, err)
		return pids
	}
	// A wait may end by its first look-up while its LISTEN connection is
	// still being opened: the connection is counted once it is up.
	listening := func(what string) []int {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			pids := waitPIDs()
			if len(pids) > 0 || time.Now().After(deadline) {
				require.Len(t, pids, 1, what)
				return pids
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	var first []int
	for i := range 3 {
		got, err := skiplock.EnqueueAndWait[rendered](ctx, waiter, skiplock.EnqueueParams{Kind: "render", Payload: renderArgs{Doc: fmt.Sprint(i)}})
		require.NoError(t, err)
		require.Equal(t, "https://example.test/"+fmt.Sprint(i)+".pdf", got.URL)
		pids := listening("one LISTEN connection, kept after the wait")
		if first == nil {
			first = pids
		}
		require.Equal(t, first, pids, "the same connection for the next wait")
		time.Sleep(300 * time.Millisecond)
	}
	gone := func(within time.Duration, what string) {
		t.Helper()
		deadline := time.Now().Add(within)
		for len(waitPIDs()) > 0 {
			require.True(t, time.Now().Before(deadline), what)
			time.Sleep(50 * time.Millisecond)
		}
	}
	gone(30*time.Second, "the LISTEN connection outlived the linger")

	// Stop ends the linger: a process shutting down keeps no LISTEN
	// connection (and a wait after Stop still returns).
	_, err := skiplock.EnqueueAndWait[rendered](ctx, waiter, skiplock.EnqueueParams{Kind: "render", Payload: renderArgs{Doc: "last"}})
	require.NoError(t, err)
	listening("the wait after the linger opened the LISTEN connection again")
	require.NoError(t, waiter.Stop(ctx))
	gone(3*time.Second, "Stop left the waiters' LISTEN connection up (it lingers 5 s otherwise)")
}
