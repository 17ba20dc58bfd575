package bench

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
)

func TestParseHandler(t *testing.T) {
	good := map[string]Handler{
		"noop":             {Noop: true},
		"completetx":       {Noop: true, Tx: true},
		"steps:3":          {Noop: true, Steps: 3},
		"steps:3:1ms":      {Steps: 3, StepSleep: time.Millisecond, Min: 3 * time.Millisecond, Max: 3 * time.Millisecond},
		"sleep:2ms-5ms":    {Min: 2 * time.Millisecond, Max: 5 * time.Millisecond},
		"sleep:3ms":        {Min: 3 * time.Millisecond, Max: 3 * time.Millisecond},
		" sleep:1ms - 2ms": {Min: time.Millisecond, Max: 2 * time.Millisecond},
		"sleep:500us-1s":   {Min: 500 * time.Microsecond, Max: time.Second},
	}
	for in, want := range good {
		h, err := ParseHandler(in)
		require.NoError(t, err, in)
		require.Equal(t, want, h, in)
		again, err := ParseHandler(h.String())
		require.NoError(t, err)
		require.Equal(t, h, again, "String round-trips")
	}
	require.Equal(t, 3500*time.Microsecond, Handler{Min: 2 * time.Millisecond, Max: 5 * time.Millisecond}.Mean())

	for _, in := range []string{"", "sleep", "sleep:", "sleep:5ms-2ms", "sleep:-1ms", "sleep:0s", "sleep:2ms-", "sleep:2h",
		"sleep:abc", "busy:1ms", "noop2", "steps:0", "steps:x", "steps:101",
		"steps:3:", "steps:3:x", "steps:3:0s", "steps:3:30s"} {
		_, err := ParseHandler(in)
		var oe *OptionError
		require.True(t, errors.As(err, &oe), "%q: %v", in, err)
		require.Equal(t, "handler", oe.Option, in)
	}
}

func TestOptionsValidate(t *testing.T) {
	require.NoError(t, Options{}.Validate(), "defaults are valid")
	d := Options{}.withDefaults()
	require.Equal(t, Options{Jobs: 100000, Workers: 32, Batch: 50, Handler: "sleep:2ms-5ms", Schema: "skiplock"}, d)

	bad := []struct {
		o   Options
		opt string
	}{
		{Options{Jobs: -1}, "jobs"},
		{Options{Jobs: MaxJobs + 1}, "jobs"},
		{Options{Workers: -3}, "workers"},
		{Options{Workers: 10001}, "workers"},
		{Options{Batch: -1}, "batch"},
		{Options{Batch: 1001}, "batch"},
		{Options{Handler: "sleep:9ms-1ms"}, "handler"},
		{Options{Schema: "Bad-Schema"}, "schema"},
		{Options{Reference: time.Millisecond}, "reference"},
		{Options{Reference: MaxReference + time.Second}, "reference"},
	}
	for _, b := range bad {
		err := b.o.Validate()
		var oe *OptionError
		require.True(t, errors.As(err, &oe), "%+v: %v", b.o, err)
		require.Equal(t, b.opt, oe.Option)
		require.True(t, strings.HasPrefix(err.Error(), b.opt+": "), err.Error())
	}

	require.NoError(t, LatencyOptions{}.Validate())
	for _, o := range []LatencyOptions{{Samples: -1}, {Samples: 2_000_000}, {Schema: "x y"}} {
		var oe *OptionError
		require.True(t, errors.As(o.Validate(), &oe), "%+v", o)
	}
}

// TestRunEndToEnd drains a tiny run against real PostgreSQL and checks every
// reported figure is plausible and nothing is left behind.
func TestRunEndToEnd(t *testing.T) {
	db := dbtest.New(t)
	ctx := context.Background()
	var progress bytes.Buffer
	res, err := Run(ctx, db.Pool, Options{Jobs: 200, Workers: 8, Batch: 10, Handler: "sleep:1ms-2ms", Progress: &progress})
	require.NoError(t, err)
	require.Equal(t, 200, res.Jobs)
	require.True(t, strings.HasPrefix(res.Queue, "bench_"))
	require.Greater(t, res.JobsPerS, 0.0)
	require.NotNil(t, res.IdealJobsPerS)
	require.InDelta(t, 8/0.0015, *res.IdealJobsPerS, 0.01)
	require.Greater(t, *res.PctOfIdeal, 0.0)
	require.GreaterOrEqual(t, res.HandlerMeanMS, 1.0)
	require.Greater(t, res.WaitP99MS, 0.0)
	require.GreaterOrEqual(t, res.WaitP99MS, res.WaitP50MS)
	require.Greater(t, res.ClaimP99MS, 0.0)
	require.Greater(t, res.Claims, int64(0))
	require.Greater(t, res.WALBytesPerJob, 0.0)
	require.InDelta(t, res.WALBytesPerJob, res.SeedWALBytesPerJob+res.DrainWALBytesPerJob, 0.01)
	require.GreaterOrEqual(t, res.DeadTuplesAfter, int64(0))
	require.Zero(t, res.ReapedLeasesPct)
	require.Zero(t, res.Failed)
	require.Greater(t, res.StatementsPerJob, 0.0)
	require.Greater(t, res.MaxRSSBytes, int64(0))
	require.Contains(t, progress.String(), "seeded 200/200")

	var left int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM skiplock.jobs)
		+ (SELECT count(*) FROM skiplock.jobs_dead) + (SELECT count(*) FROM skiplock.workers)`).Scan(&left))
	require.Zero(t, left, "the run cleans up after itself")

	res2, err := Run(ctx, db.Pool, Options{Jobs: 100, Workers: 4, Batch: 7, Handler: "noop"})
	require.NoError(t, err)
	require.Nil(t, res2.IdealJobsPerS, "no ideal rate for noop")
	require.Nil(t, res2.PctOfIdeal)
	require.Zero(t, res2.HandlerMeanMS)
}

func TestRunLatencyEndToEnd(t *testing.T) {
	db := dbtest.New(t)
	ctx := context.Background()
	res, err := RunLatency(ctx, db.Pool, LatencyOptions{Samples: 30})
	require.NoError(t, err)
	require.Equal(t, 30, res.Samples)
	require.True(t, res.ListenerUp)
	require.Greater(t, res.LatencyP50MS, 0.0)
	require.GreaterOrEqual(t, res.LatencyP99MS, res.LatencyP50MS)
	require.GreaterOrEqual(t, res.LatencyMaxMS, res.LatencyP99MS)
	// With LISTEN up no sample waits for the 1 s poll.
	require.Less(t, res.LatencyMaxMS, 900.0)
	// The waits too: their client listens from the first (warm-up) wait
	// on, and the worker announces every end to it.
	require.Greater(t, res.WakeUpP50MS, 0.0)
	require.GreaterOrEqual(t, res.WakeUpP99MS, res.WakeUpP50MS)
	require.GreaterOrEqual(t, res.WakeUpMaxMS, res.WakeUpP99MS)
	require.Less(t, res.WakeUpMaxMS, 900.0)
	var left int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM skiplock.jobs)
		+ (SELECT count(*) FROM skiplock.workers)`).Scan(&left))
	require.Zero(t, left)
}

func TestRunRejectsUnmigratedSchema(t *testing.T) {
	db := dbtest.New(t)
	_, err := Run(context.Background(), db.Pool, Options{Jobs: 10, Schema: "nothing_here"})
	require.ErrorContains(t, err, "not migrated")
	_, err = RunLatency(context.Background(), db.Pool, LatencyOptions{Samples: 1, Schema: "nothing_here"})
	require.ErrorContains(t, err, "not migrated")
}

func TestParseShape(t *testing.T) {
	s, err := ParseShape("fanout:10")
	require.NoError(t, err)
	require.Equal(t, Shape{Fanout: 10}, s)
	require.Equal(t, 12, s.Tasks())
	require.Equal(t, "fanout:10", s.String())
	for _, in := range []string{"", "fanout", "fanout:", "fanout:0", "fanout:-2", "fanout:x", "chain:3", "fanout:10001"} {
		_, err := ParseShape(in)
		var oe *OptionError
		require.True(t, errors.As(err, &oe), "%q: %v", in, err)
		require.Equal(t, "workflow", oe.Option, in)
	}
	var oe *OptionError
	require.True(t, errors.As(WorkflowOptions{Shape: "fanout:3", Workers: -1}.Validate(), &oe))
	require.Equal(t, "workers", oe.Option)
}

// TestRunWorkflowEndToEnd runs a few small workflows and checks the
// figures are plausible and nothing is left behind.
func TestRunWorkflowEndToEnd(t *testing.T) {
	db := dbtest.New(t)
	ctx := context.Background()
	res, err := RunWorkflow(ctx, db.Pool, WorkflowOptions{Shape: "fanout:3", Tasks: 100, Workers: 4, Batch: 5})
	require.NoError(t, err)
	require.Equal(t, 20, res.Workflows)
	require.Equal(t, 100, res.Tasks)
	require.Greater(t, res.TasksPerS, 0.0)
	require.InDelta(t, res.TasksPerS/5, res.WorkflowsPerS, 0.001)
	require.Greater(t, res.StatementsPerTask, 0.0)
	require.Greater(t, res.WALBytesPerTask, 0.0)
	require.Zero(t, res.Failed)
	var left int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM skiplock.jobs) + (SELECT count(*) FROM skiplock.workflows)
		+ (SELECT count(*) FROM skiplock.workflow_tasks) + (SELECT count(*) FROM skiplock.workflow_deps)`).Scan(&left))
	require.Zero(t, left, "the run cleans up after itself")
}

func TestRunRepeatedFreshSchemaEachRun(t *testing.T) {
	db := dbtest.New(t)
	ctx := context.Background()
	var progress bytes.Buffer
	rep, err := RunRepeated(ctx, db.Pool, Options{Jobs: 100, Workers: 4, Batch: 10, Handler: "noop", Schema: "rb",
		Progress: &progress}, 3)
	require.NoError(t, err)
	require.Len(t, rep.Runs, 3)
	var schemas []string
	for _, r := range rep.Runs {
		require.Equal(t, 100, r.Jobs)
		require.Greater(t, r.JobsPerS, 0.0)
		require.GreaterOrEqual(t, r.JobsPerS, rep.JobsPerS.Min)
		require.LessOrEqual(t, r.JobsPerS, rep.JobsPerS.Max)
	}
	require.LessOrEqual(t, rep.JobsPerS.Min, rep.JobsPerS.Median)
	require.LessOrEqual(t, rep.JobsPerS.Median, rep.JobsPerS.Max)
	require.InDelta(t, rep.JobsPerS.Max/rep.JobsPerS.Min, rep.JobsPerS.Ratio, 1e-9)
	for _, line := range strings.Split(progress.String(), "\n") {
		if _, s, ok := strings.Cut(line, " in schema "); ok {
			schemas = append(schemas, s)
		}
	}
	require.Len(t, schemas, 3, progress.String())
	require.NotEqual(t, schemas[0], schemas[1], "each run has a schema of its own")
	var left int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'rb\_r%'`).Scan(&left))
	require.Zero(t, left, "every run's schema is dropped")

	_, err = RunRepeated(ctx, db.Pool, Options{Jobs: 10}, 0)
	var oe *OptionError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "repeat", oe.Option)
}

func TestSpreadOf(t *testing.T) {
	require.Equal(t, Spread{Min: 1, Median: 2, Max: 4, Ratio: 4}, spreadOf([]float64{4, 1, 2}))
	require.Equal(t, Spread{Min: 1, Median: 2.5, Max: 4, Ratio: 4}, spreadOf([]float64{4, 1, 2, 3}))
	require.Equal(t, Spread{Min: 5, Median: 5, Max: 5, Ratio: 1}, spreadOf([]float64{5}))
}

// tenantIndex reads back exactly the names tenantName gives, within the
// seeded count, and nothing else.
func TestTenantIndexReadsTenantName(t *testing.T) {
	for _, i := range []int{0, 1, 9, 10, 19999} {
		got, ok := tenantIndex(tenantName(i), 20000)
		require.True(t, ok, tenantName(i))
		require.Equal(t, i, got)
	}
	for _, name := range []string{"", "t", "t20000", "t-1", "t+1", "t01", "x1", "a-burst", "t1a", "T1"} {
		_, ok := tenantIndex(name, 20000)
		require.False(t, ok, name)
	}
}

// The WAL figures are server-wide, so a run names what else could write
// while it counted: here a client of another database holding a
// transaction id. A writer with the run's own application_name is the run
// and is not named. (A database of the test's own, so that no other test's
// writes can stand in for the one held here.)
func TestRunNamesOtherWriters(t *testing.T) {
	db := dbtest.New(t)
	ctx := context.Background()
	name := "bench_other_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	_, err := db.Pool.Exec(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = db.Pool.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)") })
	cfg := db.Pool.Config().ConnConfig.Copy()
	cfg.Database = name
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer func() { _ = conn.Close(context.Background()) }()
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SET LOCAL application_name = 'holder'")
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SELECT pg_current_xact_id()") // assigns a transaction id, as a write does
	require.NoError(t, err)

	res, err := Run(ctx, db.Pool, Options{Jobs: 200, Workers: 4, Batch: 10, Handler: "noop"})
	require.NoError(t, err)
	require.Contains(t, res.OtherWriters, name+" (a writing client)")

	stop := watchOtherWriters(ctx, db.Pool, "holder", db.Schema)
	time.Sleep(600 * time.Millisecond)
	require.NotContains(t, stop(), name+" (a writing client)", "the run's own connections are not other writers")
	require.NoError(t, tx.Rollback(ctx))
}

// TestRunReference runs the plain-SQL reference for a second against real
// PostgreSQL: whole life cycles of the asked size, a plausible rate, and
// its schema gone after; a bad size or duration is refused naming the flag.
func TestRunReference(t *testing.T) {
	db := dbtest.New(t)
	ctx := context.Background()
	r, err := RunReference(ctx, db.Pool, 10, time.Second)
	require.NoError(t, err)
	require.Equal(t, 10, r.PerStatement)
	require.Equal(t, ReferenceClients, r.Clients)
	require.Positive(t, r.Jobs)
	require.Zero(t, r.Jobs%10, "only whole life cycles of 10 jobs are counted")
	require.GreaterOrEqual(t, r.Seconds, 1.0)
	require.InDelta(t, float64(r.Jobs)/r.Seconds, r.JobsPerS, 1e-6)
	var left int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'skiplock\_ref\_%'`).Scan(&left))
	require.Zero(t, left, "the reference's schema is dropped")

	for _, c := range []struct {
		n int
		d time.Duration
	}{{0, time.Second}, {1001, time.Second}, {10, 0}, {10, MaxReference + time.Second}} {
		_, err := RunReference(ctx, db.Pool, c.n, c.d)
		var oe *OptionError
		require.ErrorAs(t, err, &oe, "%+v", c)
		require.Equal(t, "reference", oe.Option)
	}
}

// TestRunRepeatedWithReference: with Options.Reference every run carries
// the references run just before it and the drain's ratio to each, and the
// report the spread of those ratios.
func TestRunRepeatedWithReference(t *testing.T) {
	db := dbtest.New(t)
	ctx := context.Background()
	rep, err := RunRepeated(ctx, db.Pool, Options{Jobs: 200, Workers: 4, Batch: 10, Handler: "noop", Schema: "rf",
		Reference: time.Second}, 2)
	require.NoError(t, err)
	require.Len(t, rep.Runs, 2)
	var vs []float64
	for _, r := range rep.Runs {
		require.NotNil(t, r.Reference)
		require.Equal(t, 10, r.Reference.B10.PerStatement)
		require.Equal(t, 50, r.Reference.B50.PerStatement)
		require.Positive(t, r.Reference.B10.JobsPerS)
		require.Positive(t, r.Reference.B50.JobsPerS)
		require.InDelta(t, r.JobsPerS/r.Reference.B10.JobsPerS, r.Reference.VsB10, 1e-9)
		require.InDelta(t, r.JobsPerS/r.Reference.B50.JobsPerS, r.Reference.VsB50, 1e-9)
		vs = append(vs, r.Reference.VsB10)
	}
	require.NotNil(t, rep.VsRefB10)
	require.NotNil(t, rep.VsRefB50)
	require.NotNil(t, rep.RefB50OverB10)
	require.Equal(t, spreadOf(vs), *rep.VsRefB10)

	plain, err := RunRepeated(ctx, db.Pool, Options{Jobs: 50, Workers: 2, Batch: 10, Handler: "noop", Schema: "rf"}, 1)
	require.NoError(t, err)
	require.Nil(t, plain.Runs[0].Reference, "no reference unless asked")
	require.Nil(t, plain.VsRefB10)
}
