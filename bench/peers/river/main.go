// Command river is the River side of the head-to-head benchmark: it runs the
// scenarios `skiplock bench` measures (bench/bench.go, bench/latency.go) with
// River (github.com/riverqueue/river, driver riverpgxv5) and reports the same
// numbers, measured the same way.
//
// Drain mode (the default) seeds --jobs jobs of one kind into a queue of its
// own with InsertManyFastTx (COPY, 10,000 jobs per transaction, like ours),
// then starts a River client whose queue has MaxWorkers = --workers and
// times Start → every job's completion written, with a handler that sleeps a
// random time in a range (the same precise sleep as ours) or does nothing.
//
// --latency instead inserts --samples jobs one at a time with Client.Insert
// into an idle queue and times insert call → handler start.
//
// It is a module of its own (bench/peers/river/go.mod) so that skiplock never
// depends on River. It runs River's migrations itself and deletes its queue's
// rows when it ends, however it ends.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/skiplock/skiplock/bench"
	"github.com/skiplock/skiplock/bench/measure"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// Defaults mirror skiplock's harness (bench/options.go) and River's own
// defaults (river.FetchCooldownDefault, river.FetchPollIntervalDefault).
const (
	defaultJobs     = 100_000
	defaultWorkers  = 32
	defaultHandler  = "sleep:2ms-5ms"
	defaultSamples  = 1000
	defaultMaxConns = 8 // the size of skiplock bench's own pool (bench.ownPool)

	// seedChunk is how many jobs one seeding transaction (one COPY) loads,
	// as bench.SeedChunk.
	seedChunk = 10_000
	// latencyWorkers is the latency client's MaxWorkers: skiplock's default
	// pool concurrency (River has no default; MaxWorkers is required).
	latencyWorkers = 10
	// latencyWarmup samples are taken and discarded, as in bench/latency.go.
	latencyWarmup = 20
	// eventChanSize is the completion-event subscription's buffer. River
	// drops events that overflow it; the completer writes at most 5,000
	// completions per statement, so this never fills while we drain it.
	eventChanSize = 20_000

	benchKind   = "bench"
	latencyKind = "bench_latency"
)

type flags struct {
	databaseURL       string
	jobs, workers     int
	handler           string
	fetchCooldown     time.Duration
	fetchPollInterval time.Duration
	maxConns          int
	latency           bool
	samples           int
	jsonOut           bool
}

func main() {
	var f flags
	fs := flag.NewFlagSet("river-bench", flag.ContinueOnError)
	fs.StringVar(&f.databaseURL, "database-url", os.Getenv("DATABASE_URL"), "PostgreSQL URL (default $DATABASE_URL)")
	fs.IntVar(&f.jobs, "jobs", defaultJobs, "jobs to seed and drain")
	fs.IntVar(&f.workers, "workers", defaultWorkers, "the queue's MaxWorkers")
	fs.StringVar(&f.handler, "handler", defaultHandler, "handler: noop or sleep:MIN-MAX (uniform random, e.g. sleep:2ms-5ms)")
	fs.DurationVar(&f.fetchCooldown, "fetch-cooldown", river.FetchCooldownDefault, "River Config.FetchCooldown: least time between two fetches")
	fs.DurationVar(&f.fetchPollInterval, "fetch-poll-interval", river.FetchPollIntervalDefault, "River Config.FetchPollInterval: backstop poll")
	fs.IntVar(&f.maxConns, "max-conns", defaultMaxConns, "pgxpool MaxConns of the client's pool (skiplock bench uses 8)")
	fs.BoolVar(&f.latency, "latency", false, "measure insert → handler start on an idle queue instead")
	fs.IntVar(&f.samples, "samples", defaultSamples, "jobs timed by --latency")
	fs.BoolVar(&f.jsonOut, "json", false, "print the result as JSON")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: go run . [--jobs N] [--workers N] [--handler noop|sleep:MIN-MAX] [--fetch-cooldown D] [--fetch-poll-interval D] [--json]\n"+
			"       go run . --latency [--samples N] [--fetch-cooldown D] [--fetch-poll-interval D] [--json]\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
	changed := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { changed[fl.Name] = true })
	if err := validate(f, changed); err != nil {
		fmt.Fprintln(os.Stderr, "river-bench:", err)
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, f); err != nil {
		fmt.Fprintln(os.Stderr, "river-bench:", err)
		stop()
		os.Exit(1)
	}
}

func validate(f flags, changed map[string]bool) error {
	if f.databaseURL == "" {
		return errors.New("--database-url: not set (nor $DATABASE_URL)")
	}
	if f.latency {
		for _, name := range []string{"jobs", "workers", "handler"} {
			if changed[name] {
				return fmt.Errorf("--%s: not used with --latency", name)
			}
		}
		if f.samples < 1 || f.samples > 1_000_000 {
			return fmt.Errorf("--samples: must be between 1 and 1000000, got %d", f.samples)
		}
	} else {
		if changed["samples"] {
			return errors.New("--samples: only used with --latency")
		}
		if f.jobs < 1 || f.jobs > 100_000_000 {
			return fmt.Errorf("--jobs: must be between 1 and 100000000, got %d", f.jobs)
		}
		if f.workers < 1 || f.workers > river.QueueNumWorkersMax {
			return fmt.Errorf("--workers: must be between 1 and %d, got %d", river.QueueNumWorkersMax, f.workers)
		}
		if _, err := parseHandler(f.handler); err != nil {
			return fmt.Errorf("--handler: %w", err)
		}
	}
	if f.fetchCooldown < river.FetchCooldownMin {
		return fmt.Errorf("--fetch-cooldown: must be at least %s", river.FetchCooldownMin)
	}
	if f.fetchPollInterval < river.FetchPollIntervalMin || f.fetchPollInterval < f.fetchCooldown {
		return fmt.Errorf("--fetch-poll-interval: must be at least %s and at least --fetch-cooldown", river.FetchPollIntervalMin)
	}
	if f.maxConns < 2 || f.maxConns > 1000 {
		return fmt.Errorf("--max-conns: must be between 2 and 1000, got %d", f.maxConns)
	}
	return nil
}

func run(ctx context.Context, f flags) error {
	cfg, err := pgxpool.ParseConfig(f.databaseURL)
	if err != nil {
		return fmt.Errorf("--database-url: %w", err)
	}
	// The administrative pool: migrations, WAL positions, statistics and
	// clean-up, as skiplock bench's connect(ctx, 2).
	adminCfg := cfg.Copy()
	adminCfg.MaxConns = 2
	admin, err := pgxpool.NewWithConfig(ctx, adminCfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer admin.Close()
	if err := migrate(ctx, admin); err != nil {
		return err
	}
	progress := io.Writer(os.Stderr)
	if f.latency {
		res, err := runLatency(ctx, admin, cfg, f, progress)
		if err != nil {
			return err
		}
		if f.jsonOut {
			return printJSON(res)
		}
		printLatency(os.Stdout, res)
		return nil
	}
	res, err := runDrain(ctx, admin, cfg, f, progress)
	if err != nil {
		return err
	}
	if f.jsonOut {
		return printJSON(res)
	}
	printDrain(os.Stdout, res)
	return nil
}

// migrate runs River's migrations up to the latest version.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// Result is what the drain measured. The JSON names are those of skiplock
// bench's Result where the quantity is the same.
type Result struct {
	Peer              string  `json:"peer"`
	RiverVersion      string  `json:"river_version"`
	Queue             string  `json:"queue"`
	Jobs              int     `json:"jobs"`
	Workers           int     `json:"workers"`
	Handler           string  `json:"handler"`
	FetchCooldownMS   float64 `json:"fetch_cooldown_ms"`
	FetchPollMS       float64 `json:"fetch_poll_interval_ms"`
	MaxConns          int     `json:"max_conns"`
	CompletedRowsKept bool    `json:"completed_rows_kept"`

	// SeedSeconds and SeedJobsPerS time the bulk load (InsertManyFastTx,
	// COPY, in transactions of seedChunk jobs).
	SeedSeconds  float64 `json:"seed_seconds"`
	SeedJobsPerS float64 `json:"seed_jobs_per_s"`

	// Seconds is the drain as skiplock bench measures it: from Start until
	// every job's completion is written (River's JobCompleted event, sent
	// after the completer's UPDATE returned).
	Seconds  float64 `json:"seconds"`
	JobsPerS float64 `json:"jobs_per_s"`
	// HandlersSeconds is from Start until the N-th Work returned (an atomic
	// counter in the worker); the completer may not have written the last
	// completions yet.
	HandlersSeconds  float64 `json:"handlers_seconds"`
	HandlersJobsPerS float64 `json:"handlers_jobs_per_s"`
	// StopSeconds is how long Stop took afterwards (not in either time).
	StopSeconds float64 `json:"stop_seconds"`
	// OutcomesFromStop is true when fewer than N completion events arrived
	// (some dropped) and Seconds is the time Stop returned instead.
	OutcomesFromStop bool `json:"outcomes_from_stop,omitempty"`

	IdealJobsPerS      *float64 `json:"ideal_jobs_per_s"`
	PctOfIdeal         *float64 `json:"pct_of_ideal"`
	HandlerMeanMS      float64  `json:"handler_mean_ms"`
	PctOfMeasuredIdeal *float64 `json:"pct_of_measured_ideal"`

	// Wait is handler start − the job's scheduled_at (all jobs seeded due;
	// InsertManyFast sets scheduled_at to the client's clock at insert).
	WaitP50MS float64 `json:"wait_p50_ms"`
	WaitP99MS float64 `json:"wait_p99_ms"`
	WaitMaxMS float64 `json:"wait_max_ms"`

	// Claim latency of River's fetch statement (JobGetAvailable) as the
	// client sees it, over every fetch of the drain.
	ClaimP50MS float64 `json:"claim_p50_ms"`
	ClaimP99MS float64 `json:"claim_p99_ms"`
	Claims     int64   `json:"claims"`

	// WAL generated per job (server-wide): seed, drain and both.
	WALBytesPerJob      float64 `json:"wal_bytes_per_job"`
	SeedWALBytesPerJob  float64 `json:"seed_wal_bytes_per_job"`
	DrainWALBytesPerJob float64 `json:"drain_wal_bytes_per_job"`
	WALStartLSN         string  `json:"wal_start_lsn"`
	WALSeededLSN        string  `json:"wal_seeded_lsn"`
	WALEndLSN           string  `json:"wal_end_lsn"`

	// Dead tuples of river_job before and after the drain (after the
	// client's backends exited and flushed their statistics).
	DeadTuplesBefore  int64 `json:"dead_tuples_before"`
	DeadTuplesAfter   int64 `json:"dead_tuples_after"`
	AutovacuumsDuring int64 `json:"autovacuums_during"`

	// RerunPct is the share of jobs worked with attempt > 1 (rescued or
	// retried); Failed counts Work calls that returned an error.
	RerunPct float64 `json:"reaped_leases_pct"`
	Failed   int64   `json:"failed"`

	// Round trips (statements, batches, COPYs) sent on the client's pool
	// during the drain, per job and by statement.
	StatementsPerJob float64             `json:"statements_per_job"`
	Statements       []measure.Statement `json:"statements"`

	DrainPeakRSSBytes int64 `json:"drain_peak_rss_bytes"`
	MaxRSSBytes       int64 `json:"max_rss_bytes"`
}

type benchArgs struct {
	N int `json:"n"`
}

func (benchArgs) Kind() string { return benchKind }

type latencyArgs struct{}

func (latencyArgs) Kind() string { return latencyKind }

// benchWorker is the drain's handler, the same as skiplock bench's.
type benchWorker struct {
	river.WorkerDefaults[benchArgs]
	h                   bench.Handler
	waits, handlerTimes *measure.Hist
	rerun, failed       *atomic.Int64
	done                *atomic.Int64
	n                   int64
	doneAt              *atomic.Int64 // UnixNano when the n-th Work returned
	allDone             chan struct{}
}

func (w *benchWorker) Work(ctx context.Context, j *river.Job[benchArgs]) error {
	start := time.Now()
	w.waits.Add(start.Sub(j.ScheduledAt))
	if j.Attempt > 1 {
		w.rerun.Add(1)
	}
	if !w.h.Noop {
		d := w.h.Min
		if w.h.Max > w.h.Min {
			d += mrand.N(w.h.Max - w.h.Min + 1)
		}
		if err := measure.Sleep(ctx, start.Add(d)); err != nil {
			w.failed.Add(1)
			return err
		}
		w.handlerTimes.Add(time.Since(start))
	}
	if w.done.Add(1) == w.n {
		w.doneAt.Store(time.Now().UnixNano())
		close(w.allDone)
	}
	return nil
}

func runDrain(ctx context.Context, admin *pgxpool.Pool, cfg *pgxpool.Config, f flags, progress io.Writer) (Result, error) {
	h, err := parseHandler(f.handler)
	if err != nil {
		return Result{}, err
	}
	queue := queueName()
	tr := newTracer()
	bp, err := ownPool(ctx, cfg, tr, int32(f.maxConns), queue)
	if err != nil {
		return Result{}, err
	}
	defer bp.Close()
	res := Result{Peer: "river", RiverVersion: riverVersion(), Queue: queue, Jobs: f.jobs, Workers: f.workers, Handler: h.String(),
		FetchCooldownMS: ms(f.fetchCooldown), FetchPollMS: ms(f.fetchPollInterval), MaxConns: f.maxConns, CompletedRowsKept: true}

	var waits, handlerTimes measure.Hist
	var rerun, failed, done, doneAt atomic.Int64
	allDone := make(chan struct{})
	workers := river.NewWorkers()
	river.AddWorker(workers, &benchWorker{h: h, waits: &waits, handlerTimes: &handlerTimes, rerun: &rerun, failed: &failed,
		done: &done, n: int64(f.jobs), doneAt: &doneAt, allDone: allDone})
	// River's defaults but for the queue's MaxWorkers, the fetch knobs (whose
	// defaults are River's) and a logger on stderr at warn level (River's
	// default logger writes to stdout, which --json needs clean).
	c, err := river.NewClient(riverpgxv5.New(bp), &river.Config{
		Queues:            map[string]river.QueueConfig{queue: {MaxWorkers: f.workers}},
		Workers:           workers,
		FetchCooldown:     f.fetchCooldown,
		FetchPollInterval: f.fetchPollInterval,
		Logger:            quietLogger(progress),
	})
	if err != nil {
		return res, err
	}
	defer cleanup(admin, queue)

	// Completions as skiplock counts them: once written. River sends
	// JobCompleted after the completer's UPDATE returned.
	events, cancelSub := c.SubscribeConfig(&river.SubscribeConfig{Kinds: []river.EventKind{river.EventKindJobCompleted}, ChanSize: eventChanSize})
	defer cancelSub()
	var outcomes, outcomesAt atomic.Int64
	outcomesDone := make(chan struct{})
	go func() {
		for ev := range events {
			if ev.Job != nil && ev.Job.Queue == queue && outcomes.Add(1) == int64(f.jobs) {
				outcomesAt.Store(time.Now().UnixNano())
				close(outcomesDone)
			}
		}
	}()

	lsn0, err := walLSN(ctx, admin)
	if err != nil {
		return res, err
	}
	res.WALStartLSN = lsn0
	seedStart := time.Now()
	if err := seed(ctx, c, bp, queue, f.jobs, progress); err != nil {
		return res, err
	}
	res.SeedSeconds = time.Since(seedStart).Seconds()
	res.SeedJobsPerS = float64(f.jobs) / res.SeedSeconds
	lsn1, err := walLSN(ctx, admin)
	if err != nil {
		return res, err
	}
	res.WALSeededLSN = lsn1
	deadBefore, avBefore, err := deadTuples(ctx, admin)
	if err != nil {
		return res, err
	}
	res.DeadTuplesBefore = deadBefore

	tr.Start()
	start := time.Now()
	if err := c.Start(ctx); err != nil {
		return res, err
	}
	peakRSS, err := waitDone(ctx, &done, &outcomes, allDone, f.jobs, start, progress)
	if err != nil {
		_ = c.StopAndCancel(context.WithoutCancel(ctx))
		return res, err
	}
	res.HandlersSeconds = float64(doneAt.Load()-start.UnixNano()) / 1e9
	// The completer writes completions every 50 ms once 100 are pending, or
	// every 250 ms: wait for the last ones before stopping, as skiplock bench
	// waits for its outcomes (Stop would flush them too).
	select {
	case <-outcomesDone:
	case <-time.After(10 * time.Second):
	case <-ctx.Done():
	}
	stopStart := time.Now()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	err = c.Stop(stopCtx)
	cancel()
	stopEnd := time.Now()
	res.StopSeconds = stopEnd.Sub(stopStart).Seconds()
	if err != nil {
		return res, fmt.Errorf("stop: %w", err)
	}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	if at := outcomesAt.Load(); at != 0 {
		res.Seconds = float64(at-start.UnixNano()) / 1e9
	} else {
		res.Seconds, res.OutcomesFromStop = stopEnd.Sub(start).Seconds(), true
	}
	counts := tr.Stop()
	lsn2, err := walLSN(ctx, admin)
	if err != nil {
		return res, err
	}
	res.WALEndLSN = lsn2
	bp.Close()
	waitBackendsGone(ctx, admin, queue)
	res.DeadTuplesAfter, res.AutovacuumsDuring, err = deadTuples(ctx, admin)
	if err != nil {
		return res, err
	}
	res.AutovacuumsDuring -= avBefore

	n := float64(f.jobs)
	res.JobsPerS = n / res.Seconds
	res.HandlersJobsPerS = n / res.HandlersSeconds
	if !h.Noop {
		ideal := float64(f.workers) / h.Mean().Seconds()
		pct := 100 * res.JobsPerS / ideal
		res.IdealJobsPerS, res.PctOfIdeal = &ideal, &pct
		res.HandlerMeanMS = handlerTimes.MeanMS()
		if res.HandlerMeanMS > 0 {
			m := 100 * res.JobsPerS / (float64(f.workers) / (res.HandlerMeanMS / 1000))
			res.PctOfMeasuredIdeal = &m
		}
	}
	res.WaitP50MS, res.WaitP99MS, res.WaitMaxMS = waits.QuantileMS(0.50), waits.QuantileMS(0.99), waits.MaxMS()
	res.ClaimP50MS, res.ClaimP99MS, res.Claims = tr.Timed.QuantileMS(0.50), tr.Timed.QuantileMS(0.99), int64(tr.Timed.Count())
	seedWAL, err1 := lsnDiff(ctx, admin, lsn1, lsn0)
	drainWAL, err2 := lsnDiff(ctx, admin, lsn2, lsn1)
	if err := errors.Join(err1, err2); err != nil {
		return res, err
	}
	res.SeedWALBytesPerJob, res.DrainWALBytesPerJob = float64(seedWAL)/n, float64(drainWAL)/n
	res.WALBytesPerJob = float64(seedWAL+drainWAL) / n
	res.RerunPct = 100 * float64(rerun.Load()) / n
	res.Failed = failed.Load()
	var total int64
	for _, v := range counts {
		total += v
	}
	res.StatementsPerJob = float64(total) / n
	res.Statements = measure.SortedCounts(counts)
	res.DrainPeakRSSBytes = peakRSS
	res.MaxRSSBytes = measure.ProcStatus("VmHWM")
	return res, nil
}

// seed loads n due jobs into queue with InsertManyFastTx (COPY), seedChunk
// per transaction, random priorities over River's whole range 1..4 (ours
// draws 0..10 over its range).
func seed(ctx context.Context, c *river.Client[pgx.Tx], pool *pgxpool.Pool, queue string, n int, progress io.Writer) error {
	ps := make([]river.InsertManyParams, 0, min(n, seedChunk))
	last := time.Now()
	for done := 0; done < n; {
		ps = ps[:0]
		for i := done; i < n && len(ps) < seedChunk; i++ {
			ps = append(ps, river.InsertManyParams{Args: benchArgs{N: i},
				InsertOpts: &river.InsertOpts{Queue: queue, Priority: 1 + mrand.IntN(4)}})
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := c.InsertManyFastTx(ctx, tx, ps)
			return err
		})
		if err != nil {
			return fmt.Errorf("seed: %w", err)
		}
		done += len(ps)
		if time.Since(last) >= time.Second || done == n {
			last = time.Now()
			fmt.Fprintf(progress, "river bench: seeded %d/%d jobs\n", done, n)
		}
	}
	return nil
}

// waitDone waits until n Work calls returned, printing a progress line
// every second, and returns the peak RSS sampled meanwhile.
func waitDone(ctx context.Context, done, outcomes *atomic.Int64, allDone <-chan struct{}, n int, start time.Time, progress io.Writer) (int64, error) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var prev, peak int64
	lastMove := time.Now()
	for {
		select {
		case <-ctx.Done():
			return peak, ctx.Err()
		case <-allDone:
			return max(peak, measure.ProcStatus("VmRSS")), nil
		case <-tick.C:
			d := done.Load()
			peak = max(peak, measure.ProcStatus("VmRSS"))
			el := time.Since(start).Seconds()
			fmt.Fprintf(progress, "river bench: %d/%d done  %.0f jobs/s (last second %d)  written %d  rss %d MB\n",
				d, n, float64(d)/el, d-prev, outcomes.Load(), peak>>20)
			if d != prev {
				lastMove = time.Now()
			}
			prev = d
			if time.Since(lastMove) > 2*time.Minute {
				return peak, fmt.Errorf("no job finished for 2 minutes (%d/%d done)", d, n)
			}
		}
	}
}

// LatencyResult is what the latency run measured, with skiplock bench
// --latency's JSON names.
type LatencyResult struct {
	Peer            string  `json:"peer"`
	RiverVersion    string  `json:"river_version"`
	Queue           string  `json:"queue"`
	Samples         int     `json:"samples"`
	MaxWorkers      int     `json:"max_workers"`
	FetchCooldownMS float64 `json:"fetch_cooldown_ms"`
	FetchPollMS     float64 `json:"fetch_poll_interval_ms"`
	// Latency is from just before Insert is called to the first line of the
	// handler.
	LatencyP50MS  float64 `json:"latency_p50_ms"`
	LatencyP99MS  float64 `json:"latency_p99_ms"`
	LatencyMaxMS  float64 `json:"latency_max_ms"`
	LatencyMeanMS float64 `json:"latency_mean_ms"`
	// Enqueue is the Insert call alone (its transaction, insert notification
	// and commit).
	EnqueueP50MS float64 `json:"enqueue_p50_ms"`
	EnqueueP99MS float64 `json:"enqueue_p99_ms"`
	// Over100MS counts samples slower than 100 ms (a fetch that waited for the
	// cooldown or the poll rather than the insert notification).
	Over100MS int `json:"over_100ms"`
	// ListenerUp says whether the client's LISTEN connection was seen in
	// pg_stat_activity before the first sample.
	ListenerUp bool `json:"listener_up"`
}

type latencyWorker struct {
	river.WorkerDefaults[latencyArgs]
	started chan time.Time
}

func (w *latencyWorker) Work(context.Context, *river.Job[latencyArgs]) error {
	select {
	case w.started <- time.Now():
	default:
	}
	return nil
}

// runLatency inserts f.samples jobs one at a time into an idle queue and
// times each from insert to handler start. The next job is inserted only
// after the previous one's completion is written, and a millisecond later,
// as in bench/latency.go.
func runLatency(ctx context.Context, admin *pgxpool.Pool, cfg *pgxpool.Config, f flags, progress io.Writer) (LatencyResult, error) {
	queue := queueName()
	bp, err := ownPool(ctx, cfg, nil, int32(f.maxConns), queue)
	if err != nil {
		return LatencyResult{}, err
	}
	defer bp.Close()
	res := LatencyResult{Peer: "river", RiverVersion: riverVersion(), Queue: queue, Samples: f.samples, MaxWorkers: latencyWorkers,
		FetchCooldownMS: ms(f.fetchCooldown), FetchPollMS: ms(f.fetchPollInterval)}
	started := make(chan time.Time, 1)
	workers := river.NewWorkers()
	river.AddWorker(workers, &latencyWorker{started: started})
	c, err := river.NewClient(riverpgxv5.New(bp), &river.Config{
		Queues:            map[string]river.QueueConfig{queue: {MaxWorkers: latencyWorkers}},
		Workers:           workers,
		FetchCooldown:     f.fetchCooldown,
		FetchPollInterval: f.fetchPollInterval,
		Logger:            quietLogger(progress),
	})
	if err != nil {
		return res, err
	}
	defer cleanup(admin, queue)
	events, cancelSub := c.SubscribeConfig(&river.SubscribeConfig{Kinds: []river.EventKind{river.EventKindJobCompleted}, ChanSize: eventChanSize})
	defer cancelSub()
	var completed atomic.Int64
	go func() {
		for ev := range events {
			if ev.Job != nil && ev.Job.Queue == queue {
				completed.Add(1)
			}
		}
	}()
	if err := c.Start(ctx); err != nil {
		return res, err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		_ = c.Stop(stopCtx)
		cancel()
	}()
	// Give the listener a moment to LISTEN, or every sample waits for a poll.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if res.ListenerUp = listening(ctx, admin, queue); res.ListenerUp {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}

	var lat, enq measure.Hist
	last := time.Now()
	opts := &river.InsertOpts{Queue: queue}
	for i := 0; i < latencyWarmup+f.samples; i++ {
		toStart, call, err := measure.TimeStart(ctx, started, 30*time.Second, func(ctx context.Context) error {
			_, err := c.Insert(ctx, latencyArgs{}, opts)
			return err
		})
		if err != nil {
			return res, fmt.Errorf("sample %d: %w", i, err)
		}
		if i >= latencyWarmup {
			lat.Add(toStart)
			enq.Add(call)
			if toStart > 100*time.Millisecond {
				res.Over100MS++
			}
		}
		for want := int64(i + 1); completed.Load() < want; {
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			time.Sleep(200 * time.Microsecond)
		}
		time.Sleep(time.Millisecond)
		if time.Since(last) >= time.Second {
			last = time.Now()
			fmt.Fprintf(progress, "river bench: latency %d/%d samples  p50 %.2f ms  p99 %.2f ms\n",
				max(0, i+1-latencyWarmup), f.samples, lat.QuantileMS(0.5), lat.QuantileMS(0.99))
		}
	}
	res.LatencyP50MS, res.LatencyP99MS = lat.QuantileMS(0.50), lat.QuantileMS(0.99)
	res.LatencyMaxMS, res.LatencyMeanMS = lat.MaxMS(), lat.MeanMS()
	res.EnqueueP50MS, res.EnqueueP99MS = enq.QuantileMS(0.50), enq.QuantileMS(0.99)
	return res, nil
}

// listening reports whether one of the client's connections is idle after a
// LISTEN (River's notifier holds one such connection).
func listening(ctx context.Context, admin *pgxpool.Pool, queue string) bool {
	var n int
	err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE application_name = $1 AND query ILIKE 'listen%'`, appName(queue)).Scan(&n)
	return err == nil && n > 0
}

func printDrain(w io.Writer, r Result) {
	fmt.Fprintf(w, "river bench (River %s): %d jobs, MaxWorkers %d, handler %s (queue %s)\n",
		r.RiverVersion, r.Jobs, r.Workers, r.Handler, r.Queue)
	fmt.Fprintf(w, "  settings        FetchCooldown %s, FetchPollInterval %s, pool %d conns, otherwise River's defaults\n",
		time.Duration(r.FetchCooldownMS*1e6), time.Duration(r.FetchPollMS*1e6), r.MaxConns)
	fmt.Fprintf(w, "  seed            %.0f jobs/s (InsertManyFastTx, COPY, %d per transaction)\n", r.SeedJobsPerS, seedChunk)
	written := "completions written"
	if r.OutcomesFromStop {
		written = "Stop returned (completion events missing)"
	}
	if r.IdealJobsPerS != nil {
		fmt.Fprintf(w, "  throughput      %.0f jobs/s in %.2f s (until %s): %.1f %% of the ideal %.0f jobs/s, %.1f %% of the measured ideal (mean handler %.2f ms)\n",
			r.JobsPerS, r.Seconds, written, *r.PctOfIdeal, *r.IdealJobsPerS, *r.PctOfMeasuredIdeal, r.HandlerMeanMS)
	} else {
		fmt.Fprintf(w, "  throughput      %.0f jobs/s in %.2f s (until %s; no-op handler: no ideal rate)\n", r.JobsPerS, r.Seconds, written)
	}
	fmt.Fprintf(w, "  handlers done   %.0f jobs/s in %.2f s (until the last Work returned); Stop took %.2f s more\n",
		r.HandlersJobsPerS, r.HandlersSeconds, r.StopSeconds)
	fmt.Fprintf(w, "  wait            p50 %.1f ms  p99 %.1f ms  max %.1f ms\n", r.WaitP50MS, r.WaitP99MS, r.WaitMaxMS)
	fmt.Fprintf(w, "  claim           p50 %.2f ms  p99 %.2f ms  (%d fetches, JobGetAvailable)\n", r.ClaimP50MS, r.ClaimP99MS, r.Claims)
	fmt.Fprintf(w, "  WAL per job     %.0f bytes (seed %.0f + drain %.0f; server-wide)\n",
		r.WALBytesPerJob, r.SeedWALBytesPerJob, r.DrainWALBytesPerJob)
	fmt.Fprintf(w, "  round trips     %.3f per job during the drain\n", r.StatementsPerJob)
	fmt.Fprintf(w, "  dead tuples     %d after (%d before; %d autovacuums during) in river_job\n",
		r.DeadTuplesAfter, r.DeadTuplesBefore, r.AutovacuumsDuring)
	fmt.Fprintf(w, "  reruns          %.2f %%  (failed %d)\n", r.RerunPct, r.Failed)
	fmt.Fprintf(w, "  memory          peak RSS %.1f MB during the drain, %.1f MB high-water\n",
		float64(r.DrainPeakRSSBytes)/(1<<20), float64(r.MaxRSSBytes)/(1<<20))
	fmt.Fprintf(w, "  note            River keeps completed jobs as rows in state completed (deleted after\n"+
		"                  CompletedJobRetentionPeriod, 24 h) instead of deleting them; this run deleted its rows afterwards.\n")
}

func printLatency(w io.Writer, r LatencyResult) {
	fmt.Fprintf(w, "river bench --latency (River %s): %d samples, idle queue %s, MaxWorkers %d, FetchCooldown %s, FetchPollInterval %s (listener up: %t)\n",
		r.RiverVersion, r.Samples, r.Queue, r.MaxWorkers, time.Duration(r.FetchCooldownMS*1e6), time.Duration(r.FetchPollMS*1e6), r.ListenerUp)
	fmt.Fprintf(w, "  insert → handler start   p50 %.2f ms  p99 %.2f ms  max %.2f ms  mean %.2f ms  (%d over 100 ms)\n",
		r.LatencyP50MS, r.LatencyP99MS, r.LatencyMaxMS, r.LatencyMeanMS, r.Over100MS)
	fmt.Fprintf(w, "  insert call alone        p50 %.2f ms  p99 %.2f ms\n", r.EnqueueP50MS, r.EnqueueP99MS)
}

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// parseHandler parses --handler with skiplock bench's own parser, so both
// sides accept the same syntax; completetx is skiplock's and has no River
// counterpart here.
func parseHandler(s string) (bench.Handler, error) {
	h, err := bench.ParseHandler(s)
	if err == nil && h.Tx {
		err = errors.New(`must be "noop" or "sleep:MIN-MAX" (e.g. sleep:2ms-5ms); completetx is skiplock's own`)
	}
	return h, err
}

func queueName() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "bench_" + hex.EncodeToString(b)
}

func appName(queue string) string { return "river-" + queue }

// ownPool opens the client's pool with the URL's settings, the tracer and
// the application_name "river-<queue>".
func ownPool(ctx context.Context, cfg *pgxpool.Config, tr *measure.Tracer, maxConns int32, queue string) (*pgxpool.Pool, error) {
	c := cfg.Copy()
	c.MaxConns = maxConns
	c.MinConns = 0
	if tr != nil {
		c.ConnConfig.Tracer = tr
	}
	c.ConnConfig.RuntimeParams["application_name"] = appName(queue)
	p, err := pgxpool.NewWithConfig(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	return p, nil
}

func quietLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func riverVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/riverqueue/river" {
				return d.Version
			}
		}
	}
	return "unknown"
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// cleanup deletes the run's jobs and its queue row, whatever happened to the
// run's context.
func cleanup(admin *pgxpool.Pool, queue string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, _ = admin.Exec(ctx, "DELETE FROM river_job WHERE queue = $1", queue)
	_, _ = admin.Exec(ctx, "DELETE FROM river_queue WHERE name = $1", queue)
}

func walLSN(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	var lsn string
	if err := pool.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsn); err != nil {
		return "", fmt.Errorf("read WAL position: %w", err)
	}
	return lsn, nil
}

func lsnDiff(ctx context.Context, pool *pgxpool.Pool, a, b string) (int64, error) {
	var d int64
	if err := pool.QueryRow(ctx, "SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::bigint", a, b).Scan(&d); err != nil {
		return 0, fmt.Errorf("WAL difference: %w", err)
	}
	return d, nil
}

// deadTuples reads river_job's dead tuples and autovacuum count from a fresh
// statistics snapshot.
func deadTuples(ctx context.Context, pool *pgxpool.Pool) (dead, autovacuums int64, err error) {
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT coalesce(n_dead_tup, 0), coalesce(autovacuum_count, 0)
			FROM pg_stat_user_tables WHERE relid = 'river_job'::regclass`).Scan(&dead, &autovacuums)
	})
	if err != nil {
		return 0, 0, fmt.Errorf("read dead tuples: %w", err)
	}
	return dead, autovacuums, nil
}

// waitBackendsGone waits (at most 3 s) until the client pool's backends have
// exited, so their statistics are flushed.
func waitBackendsGone(ctx context.Context, pool *pgxpool.Pool, queue string) {
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, appName(queue)).Scan(&n)
		if err != nil || n == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
}

// newTracer counts the round trips the client's pool sends during the
// drain, by sqlc query name ("-- name: X" heads every River query), and
// times every fetch (JobGetAvailable): skiplock's own measure.Tracer, as
// skiplock bench uses it for its claims.
func newTracer() *measure.Tracer {
	return measure.NewTracer(statementName, func(name string) bool { return name == "JobGetAvailable" })
}

func statementName(sql string) string {
	s := strings.TrimSpace(sql)
	if rest, ok := strings.CutPrefix(s, "-- name: "); ok {
		if f := strings.Fields(rest); len(f) > 0 {
			return f[0]
		}
	}
	s = strings.ToLower(s)
	switch {
	case s == "begin" || strings.HasPrefix(s, "begin "):
		return "begin"
	case s == "commit":
		return "commit"
	case s == "rollback":
		return "rollback"
	}
	if f := strings.Fields(s); len(f) > 0 {
		return "other:" + f[0]
	}
	return "other"
}
