// Package bench is the articles' benchmark harness, built into skiplock
// (`skiplock bench`): seed N jobs into a queue of its own, drain them with
// one worker pool of W workers claiming batches of B, a handler that does
// nothing or sleeps a random time in a range, and report throughput against
// the ideal rate (workers ÷ mean handler time), wait time, claim latency,
// WAL written per job, dead tuples left behind and the share of reaped
// leases. RunLatency times enqueue → handler start on an idle queue.
//
// Both runs use a pool of their own (a copy of the caller's configuration
// with a statement tracer), a queue named bench_<random>, and delete their
// jobs, dead letters and worker row when they finish, however they finish.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bench/measure"
	"github.com/skiplock/skiplock/internal/store"
)

// Result is what Run measured. The JSON names are the ones PRODUCT §2
// promises (jobs_per_s, ideal_jobs_per_s, wait_p50_ms, wait_p99_ms,
// claim_p99_ms, wal_bytes_per_job, dead_tuples_after, reaped_leases_pct)
// plus details.
type Result struct {
	Queue   string `json:"queue"`
	Jobs    int    `json:"jobs"`
	Workers int    `json:"workers"`
	Batch   int    `json:"batch"`
	Handler string `json:"handler"`

	// SeedSeconds and SeedJobsPerS time the bulk load (EnqueueMany, COPY in
	// transactions of SeedChunk jobs).
	SeedSeconds  float64 `json:"seed_seconds"`
	SeedJobsPerS float64 `json:"seed_jobs_per_s"`

	// Seconds is the drain: from Start until every job's outcome is written.
	Seconds  float64 `json:"seconds"`
	JobsPerS float64 `json:"jobs_per_s"`
	// IdealJobsPerS is workers ÷ the handler's nominal mean time; nil (JSON
	// null) for the no-op handler, whose ideal is unbounded.
	IdealJobsPerS *float64 `json:"ideal_jobs_per_s"`
	// PctOfIdeal is 100 × JobsPerS ÷ IdealJobsPerS (nil for noop).
	PctOfIdeal *float64 `json:"pct_of_ideal"`
	// HandlerMeanMS is the measured mean handler time (sleep overshoot
	// included); 0 for noop.
	HandlerMeanMS float64 `json:"handler_mean_ms"`
	// PctOfMeasuredIdeal is 100 × JobsPerS ÷ (workers ÷ HandlerMeanMS): the
	// queue's own efficiency, whatever the sleep's precision (nil for noop).
	PctOfMeasuredIdeal *float64 `json:"pct_of_measured_ideal"`

	// Wait is handler start − the job's run_at (all jobs are seeded due).
	WaitP50MS float64 `json:"wait_p50_ms"`
	WaitP99MS float64 `json:"wait_p99_ms"`
	WaitMaxMS float64 `json:"wait_max_ms"`

	// Claim latency as the worker sees it (statement sent → rows read), over
	// every claim of the run.
	ClaimP50MS float64 `json:"claim_p50_ms"`
	ClaimP99MS float64 `json:"claim_p99_ms"`
	Claims     int64   `json:"claims"`

	// WALBytesPerJob is the WAL generated per job over the whole life cycle
	// (enqueue → claim → complete): seed plus drain. It is server-wide, so
	// other sessions' writes during the run count too.
	WALBytesPerJob      float64 `json:"wal_bytes_per_job"`
	SeedWALBytesPerJob  float64 `json:"seed_wal_bytes_per_job"`
	DrainWALBytesPerJob float64 `json:"drain_wal_bytes_per_job"`
	WALStartLSN         string  `json:"wal_start_lsn"`
	WALSeededLSN        string  `json:"wal_seeded_lsn"`
	WALEndLSN           string  `json:"wal_end_lsn"`
	// OtherWriters names what else could write WAL while the run's was
	// counted, seen by sampling pg_stat_activity every 250 ms from the seed
	// to the drain's end: autovacuum in another database, and clients other
	// than the run's own connections holding a transaction id (a writing
	// transaction). With any, the WAL figures above include their writes
	// too; an empty list is what the samples saw, not a proof.
	OtherWriters []string `json:"other_writers,omitempty"`

	// Dead tuples of the jobs table (pg_stat_user_tables.n_dead_tup) before
	// the drain and after it, once the benchmark's backends have exited and
	// flushed their statistics; autovacuum may have run in between.
	DeadTuplesBefore  int64 `json:"dead_tuples_before"`
	DeadTuplesAfter   int64 `json:"dead_tuples_after"`
	AutovacuumsDuring int64 `json:"autovacuums_during"`
	// CheckpointsDuring counts the server's checkpoints that began during
	// the drain (pg_stat_bgwriter; server-wide). After a checkpoint the first
	// change to each page writes the whole page to the WAL, so a run with
	// one writes more WAL per job and runs slower, as production does now
	// and then.
	CheckpointsDuring int64 `json:"checkpoints_during"`

	// ReapedLeasesPct is the share of jobs that ran more than once (attempt
	// > 1: a lease expired and the reaper handed the job back).
	ReapedLeasesPct float64 `json:"reaped_leases_pct"`
	LeaseLost       int64   `json:"lease_lost"`
	Failed          int64   `json:"failed"`

	// StatementsPerJob is the drain's round trips (statements, batches and
	// COPYs sent by the runtime) per job; Statements breaks them down.
	StatementsPerJob float64     `json:"statements_per_job"`
	Statements       []Statement `json:"statements"`
	// CheckpointsPerJob (steps:N) is the checkpoints the drain's step
	// writes carried per job (the rows they returned: one per checkpoint
	// whose lease was held). A job that completes withdraws those still
	// queued when its handler returns (its completion supersedes them), so
	// it is below N when steps return faster than the writes.
	CheckpointsPerJob float64 `json:"checkpoints_per_job,omitempty"`

	// Memory of this process: the peak resident set sampled during the drain
	// and the lifetime high-water mark (VmHWM, seeding included).
	DrainPeakRSSBytes int64 `json:"drain_peak_rss_bytes"`
	MaxRSSBytes       int64 `json:"max_rss_bytes"`

	// With --tenants: the tenants, the burst ahead of them, the cap, how
	// long after the drain started every tenant had had a job started, and
	// how many burst jobs had started by then (FIFO: the whole burst).
	Tenants               int      `json:"tenants,omitempty"`
	Burst                 int      `json:"burst,omitempty"`
	TenantCap             int      `json:"tenant_cap,omitempty"`
	Limit                 int      `json:"limit,omitempty"`
	AllTenantsStartedS    *float64 `json:"all_tenants_started_s,omitempty"`
	BurstStartedBeforeAll *int64   `json:"burst_started_before_all_tenants,omitempty"`

	// Reference (Options.Reference) is the plain-SQL reference run just
	// before this run's seed, and the drain's ratio to it.
	Reference *References `json:"reference,omitempty"`
}

// References are the plain-SQL reference at 10 and at 50 jobs a statement
// (RunReference), run one after the other just before a drain, and the
// drain's jobs/s over each: the drain against the same row work with
// nothing in between, in the same minutes (issue 40 asks ≥ 1.5 × B10 and
// ≥ 0.5 × B50 at the median of ten runs).
type References struct {
	B10   ReferenceResult `json:"b10"`
	B50   ReferenceResult `json:"b50"`
	VsB10 float64         `json:"vs_b10"`
	VsB50 float64         `json:"vs_b50"`
}

// SeedChunk is how many jobs one seeding transaction (one COPY) loads.
const SeedChunk = 10_000

const benchKind = "bench"

// stepNames are the names of the steps:N handler's steps.
var stepNames = func() []string {
	out := make([]string, 100)
	for i := range out {
		out[i] = "step-" + strconv.Itoa(i+1)
	}
	return out
}()

// Run runs the harness once on pool's database; see the package comment.
// The schema must be migrated. ctx cancels the run (its jobs are still
// cleaned up).
func Run(ctx context.Context, pool *pgxpool.Pool, o Options) (Result, error) {
	o = o.withDefaults()
	h, err := o.validate()
	if err != nil {
		return Result{}, err
	}
	progress := o.Progress
	if progress == nil {
		progress = io.Discard
	}
	st := store.New(o.Schema)
	if err := checkSchema(ctx, pool, st); err != nil {
		return Result{}, err
	}
	var refs *References
	if o.Reference > 0 {
		refs = &References{}
		for _, r := range []struct {
			n   int
			out *ReferenceResult
		}{{10, &refs.B10}, {50, &refs.B50}} {
			fmt.Fprintf(progress, "bench: the plain-SQL reference, %d jobs a statement, %d clients, %s\n", r.n, ReferenceClients, o.Reference)
			if *r.out, err = RunReference(ctx, pool, r.n, o.Reference); err != nil {
				return Result{}, err
			}
		}
	}
	tr := newTracer(st)
	queue, workerID := names()
	conns := int32(8)
	if h.Steps > 0 {
		conns += int32(min(o.Workers, 32)) // the handlers' steps use the client's pool, as an application's would
	}
	bp, err := ownPool(ctx, pool, tr, conns, queue)
	if err != nil {
		return Result{}, err
	}
	defer bp.Close()

	res := Result{Queue: queue, Jobs: o.Jobs + o.Burst, Workers: o.Workers, Batch: o.Batch, Handler: h.String(),
		Tenants: o.Tenants, Burst: o.Burst, TenantCap: o.TenantCap, Limit: o.Limit, Reference: refs}
	seeded := o.Jobs + o.Burst
	var (
		// One flag per seeded tenant (tenantName's index), set by its first
		// job: a sync.Map of the names, hashed and boxed at every job, was
		// 12 % of the benchmark process's CPU in a 20,000-tenant drain, CPU
		// the measured client and server did not get.
		tenantsSeen  = make([]atomic.Bool, o.Tenants)
		tenantsCount atomic.Int64
		burstStarted atomic.Int64
		allStarted   atomic.Int64 // unix nanoseconds; 0 until every tenant had a job
		burstAtAll   atomic.Int64
	)
	noteTenant := func(tenant string) {
		if o.Tenants == 0 {
			return
		}
		if tenant == "a-burst" {
			burstStarted.Add(1)
			return
		}
		i, ok := tenantIndex(tenant, o.Tenants)
		if ok && !tenantsSeen[i].Swap(true) && tenantsCount.Add(1) == int64(o.Tenants) {
			burstAtAll.Store(burstStarted.Load())
			allStarted.Store(time.Now().UnixNano())
		}
	}
	c, err := skiplock.NewClient(bp, skiplock.Config{
		Schema: o.Schema, Logger: orQuiet(o.Logger, progress), WorkerID: workerID, ShutdownTimeout: 30 * time.Second,
		DeleteCompleted: o.DeleteCompleted, ListenURL: o.ListenURL,
		Pools: []skiplock.WorkerPool{{Name: "bench", Queues: []string{queue}, Concurrency: o.Workers, BatchSize: o.Batch,
			TenantCap: o.TenantCap}},
	})
	if err != nil {
		return res, err
	}
	var txPool *pgxpool.Pool
	if h.Tx {
		// The handlers' own transactions use a pool of their own, as an
		// application's would.
		if txPool, err = ownPool(ctx, pool, nil, int32(min(o.Workers, 32)), queue+"_tx"); err != nil {
			return res, err
		}
		defer txPool.Close()
	}
	var waits, handlerTimes measure.Hist
	var started atomic.Int64 // handler calls, for waitDone
	var reaped atomic.Int64
	err = skiplock.Handle(c, benchKind, func(ctx context.Context, j *skiplock.Job[json.RawMessage]) error {
		start := time.Now()
		started.Add(1)
		waits.Add(start.Sub(j.RunAt))
		noteTenant(j.Tenant)
		if j.Attempt > 1 {
			reaped.Add(1)
		}
		if h.Tx {
			return pgx.BeginFunc(ctx, txPool, func(tx pgx.Tx) error { return skiplock.CompleteTx(ctx, c, tx, j) })
		}
		for i := range h.Steps {
			if _, err := skiplock.Step(ctx, stepNames[i], func(ctx context.Context) (int, error) {
				if h.StepSleep > 0 { // a wait, as for a call to another service: a timer, not a spin
					t := time.NewTimer(h.StepSleep)
					defer t.Stop()
					select {
					case <-t.C:
					case <-ctx.Done():
						return i, context.Cause(ctx)
					}
				}
				return i, nil
			}); err != nil {
				return err
			}
		}
		if h.Noop {
			return nil
		}
		if h.Steps > 0 {
			handlerTimes.Add(time.Since(start))
			return nil
		}
		d := h.Min
		if h.Max > h.Min {
			d += mrand.N(h.Max - h.Min + 1)
		}
		if err := measure.Sleep(ctx, start.Add(d)); err != nil {
			return err
		}
		handlerTimes.Add(time.Since(start))
		return nil
	})
	if err != nil {
		return res, err
	}
	defer cleanup(pool, st, queue, workerID)
	if o.Limit > 0 {
		if err := c.LimitSet(ctx, skiplock.Limit{Name: queue, Queue: queue, Concurrency: o.Limit}); err != nil {
			return res, err
		}
		defer func() {
			rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = c.LimitRemove(rctx, queue)
		}()
	}

	lsn0, err := walLSN(ctx, pool)
	if err != nil {
		return res, err
	}
	res.WALStartLSN = lsn0
	stopWatch := watchOtherWriters(ctx, pool, "skiplock-"+queue, st.Schema)
	defer func() { stopWatch() }()
	seedStart := time.Now()
	if o.Burst > 0 {
		if err := seed(ctx, c, queue, o.Burst, 0, "a-burst", progress); err != nil {
			return res, err
		}
	}
	if err := seed(ctx, c, queue, o.Jobs, o.Tenants, "", progress); err != nil {
		return res, err
	}
	res.SeedSeconds = time.Since(seedStart).Seconds()
	res.SeedJobsPerS = float64(seeded) / res.SeedSeconds
	cp0, err := checkpoints(ctx, pool)
	if err != nil {
		return res, err
	}
	lsn1, err := walLSN(ctx, pool)
	if err != nil {
		return res, err
	}
	res.WALSeededLSN = lsn1
	deadBefore, avBefore, err := deadTuples(ctx, pool, st)
	if err != nil {
		return res, err
	}
	res.DeadTuplesBefore = deadBefore

	if o.CPUProfile != nil {
		if err := pprof.StartCPUProfile(o.CPUProfile); err != nil {
			return res, fmt.Errorf("bench: cpu profile: %w", err)
		}
	}
	tr.Start()
	start := time.Now()
	if err := c.Start(ctx); err != nil {
		return res, err
	}
	peakRSS, err := waitDone(ctx, c, &started, seeded, start, progress)
	res.Seconds = time.Since(start).Seconds()
	if o.CPUProfile != nil {
		pprof.StopCPUProfile()
	}
	if err != nil {
		_ = c.StopAndCancel(context.WithoutCancel(ctx))
		return res, err
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	err = c.Stop(stopCtx)
	cancel()
	if err != nil {
		return res, err
	}
	counts := tr.Stop()
	stats := c.Stats()
	cp1, err := checkpoints(ctx, pool)
	if err != nil {
		return res, err
	}
	res.CheckpointsDuring = cp1 - cp0
	lsn2, err := walLSN(ctx, pool)
	if err != nil {
		return res, err
	}
	res.WALEndLSN = lsn2
	res.OtherWriters = stopWatch()
	// Backends flush their table statistics when they exit: close our pool
	// and wait for them before reading n_dead_tup.
	bp.Close()
	waitBackendsGone(ctx, pool, queue)
	res.DeadTuplesAfter, res.AutovacuumsDuring, err = deadTuples(ctx, pool, st)
	if err != nil {
		return res, err
	}
	res.AutovacuumsDuring -= avBefore

	n := float64(seeded)
	res.JobsPerS = n / res.Seconds
	if res.Reference != nil {
		res.Reference.VsB10 = res.JobsPerS / res.Reference.B10.JobsPerS
		res.Reference.VsB50 = res.JobsPerS / res.Reference.B50.JobsPerS
	}
	if at := allStarted.Load(); at != 0 {
		s, b := time.Duration(at-start.UnixNano()).Seconds(), burstAtAll.Load()
		res.AllTenantsStartedS, res.BurstStartedBeforeAll = &s, &b
	}
	if !h.Noop {
		ideal := float64(o.Workers) / h.Mean().Seconds()
		pct := 100 * res.JobsPerS / ideal
		res.IdealJobsPerS, res.PctOfIdeal = &ideal, &pct
		res.HandlerMeanMS = handlerTimes.MeanMS()
		if res.HandlerMeanMS > 0 {
			m := 100 * res.JobsPerS / (float64(o.Workers) / (res.HandlerMeanMS / 1000))
			res.PctOfMeasuredIdeal = &m
		}
	}
	res.WaitP50MS, res.WaitP99MS, res.WaitMaxMS = waits.QuantileMS(0.50), waits.QuantileMS(0.99), waits.MaxMS()
	res.ClaimP50MS, res.ClaimP99MS, res.Claims = tr.Timed.QuantileMS(0.50), tr.Timed.QuantileMS(0.99), int64(tr.Timed.Count())
	seedWAL, err1 := lsnDiff(ctx, pool, lsn1, lsn0)
	drainWAL, err2 := lsnDiff(ctx, pool, lsn2, lsn1)
	if err := errors.Join(err1, err2); err != nil {
		return res, err
	}
	res.SeedWALBytesPerJob, res.DrainWALBytesPerJob = float64(seedWAL)/n, float64(drainWAL)/n
	res.WALBytesPerJob = float64(seedWAL+drainWAL) / n
	res.ReapedLeasesPct = 100 * float64(reaped.Load()) / n
	res.LeaseLost, res.Failed = stats.LeaseLost, stats.Failed
	var total int64
	for _, v := range counts {
		total += v
	}
	res.StatementsPerJob = float64(total) / n
	if h.Steps > 0 {
		res.CheckpointsPerJob = float64(tr.Rows("step_put_many")+tr.Rows("step_put")) / n
	}
	res.Statements = measure.SortedCounts(counts)
	res.DrainPeakRSSBytes = peakRSS
	res.MaxRSSBytes = measure.ProcStatus("VmHWM")
	return res, nil
}

// ownPool opens a pool for the benchmark with the caller's connection
// settings, the tracer and the application_name "skiplock-<queue>".
func ownPool(ctx context.Context, pool *pgxpool.Pool, tr *measure.Tracer, maxConns int32, queue string) (*pgxpool.Pool, error) {
	cfg := pool.Config()
	cfg.MaxConns = maxConns
	cfg.MinConns = 0
	if tr != nil {
		cfg.ConnConfig.Tracer = tr
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "skiplock-" + queue
	bp, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("bench: open pool: %w", err)
	}
	return bp, nil
}

func checkSchema(ctx context.Context, pool *pgxpool.Pool, st *store.Store) error {
	var ok bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", st.Table("jobs")).Scan(&ok); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if !ok {
		return fmt.Errorf("bench: schema %q is not migrated (run skiplock migrate up)", st.Schema)
	}
	return nil
}

// names returns a fresh queue name and worker id.
func names() (queue, workerID string) {
	id := randomID()
	host, _ := os.Hostname()
	return "bench_" + id, fmt.Sprintf("bench:%s:%d:%s", host, os.Getpid(), id)
}

// randomID is 8 random hex digits: what sets a run's queue, schemas and
// worker id apart from another's.
func randomID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// orQuiet is l, or warnings and errors as text on w when l is nil.
func orQuiet(l *slog.Logger, w io.Writer) *slog.Logger {
	if l != nil {
		return l
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// tenantName is the name of the i-th of the tenants seed spreads jobs over.
func tenantName(i int) string { return "t" + strconv.Itoa(i) }

// tenantIndex is the i of tenantName(i) for a name seed gave one of n
// tenants; false for any other name (a sign, a leading zero, the burst's).
func tenantIndex(name string, n int) (int, bool) {
	digits, ok := strings.CutPrefix(name, "t")
	if !ok || digits == "" || (digits[0] == '0' && digits != "0") ||
		strings.ContainsFunc(digits, func(r rune) bool { return r < '0' || r > '9' }) {
		return 0, false
	}
	i, err := strconv.Atoi(digits)
	return i, err == nil && i < n
}

// seed loads n due jobs into queue with EnqueueMany (COPY), SeedChunk per
// transaction, priorities 0..10 like the articles' seed; spread round-robin
// over tenants tenants when tenants > 0, else all of tenant (may be "").
func seed(ctx context.Context, c *skiplock.Client, queue string, n, tenants int, tenant string, progress io.Writer) error {
	ps := make([]skiplock.EnqueueParams, 0, min(n, SeedChunk))
	last := time.Now()
	for done := 0; done < n; {
		ps = ps[:0]
		for i := done; i < n && len(ps) < SeedChunk; i++ {
			t := tenant
			if tenants > 0 {
				t = tenantName(i % tenants)
			}
			p := skiplock.EnqueueParams{Queue: queue, Kind: benchKind, Priority: mrand.IntN(11), Tenant: t,
				Payload: json.RawMessage(`{"n":` + strconv.Itoa(i) + `}`)}
			if tenant == "a-burst" {
				p.Priority = 10 // ahead of every other job in claim order
			}
			ps = append(ps, p)
		}
		if _, err := c.EnqueueMany(ctx, ps); err != nil {
			return fmt.Errorf("bench: seed: %w", err)
		}
		done += len(ps)
		if time.Since(last) >= time.Second || done == n {
			last = time.Now()
			fmt.Fprintf(progress, "bench: seeded %d/%d jobs\n", done, n)
		}
	}
	return nil
}

// waitDone waits until n outcomes are written, printing a progress line
// every second, and returns the peak RSS sampled meanwhile.
// waitDone waits until n jobs have completed or died. It asks the client's
// Stats (which sorts its latency samples) every 5 ms only once the
// handlers have started n runs (started; nil: from the start): asked every
// 5 ms from the start, Stats was
// 15 % of the benchmark process's CPU in a no-op drain, CPU the measured
// client and server did not get.
func waitDone(ctx context.Context, c *skiplock.Client, started *atomic.Int64, n int, start time.Time, progress io.Writer) (int64, error) {
	poll := time.NewTicker(5 * time.Millisecond)
	defer poll.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var prev, peak int64
	lastMove := time.Now()
	for {
		select {
		case <-ctx.Done():
			return peak, ctx.Err()
		case <-poll.C:
			if started != nil && started.Load() < int64(n) {
				continue
			}
			s := c.Stats()
			if s.Completed+s.DeadLettered >= int64(n) {
				return max(peak, measure.ProcStatus("VmRSS")), nil
			}
		case <-tick.C:
			s := c.Stats()
			done := s.Completed + s.DeadLettered
			peak = max(peak, measure.ProcStatus("VmRSS"))
			el := time.Since(start).Seconds()
			fmt.Fprintf(progress, "bench: %d/%d done  %.0f jobs/s (last second %d)  running %d  claim p99 %.2f ms  rss %d MB\n",
				done, n, float64(done)/el, done-prev, s.Running, float64(s.ClaimP99)/1e6, peak>>20)
			if done != prev {
				lastMove = time.Now()
			}
			prev = done
			if time.Since(lastMove) > 2*time.Minute {
				return peak, fmt.Errorf("bench: no job finished for 2 minutes (%d/%d done)", done, n)
			}
		}
	}
}

func walLSN(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	var lsn string
	if err := pool.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsn); err != nil {
		return "", fmt.Errorf("bench: read WAL position: %w", err)
	}
	return lsn, nil
}

func lsnDiff(ctx context.Context, pool *pgxpool.Pool, a, b string) (int64, error) {
	var d int64
	if err := pool.QueryRow(ctx, "SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::bigint", a, b).Scan(&d); err != nil {
		return 0, fmt.Errorf("bench: WAL difference: %w", err)
	}
	return d, nil
}

// deadTuples reads the jobs table's dead tuples and autovacuum count from a
// fresh statistics snapshot.
// checkpoints returns how many checkpoints the server has begun (timed and
// requested) since its statistics were reset.
func checkpoints(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
			return err
		}
		return tx.QueryRow(ctx, "SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter").Scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("bench: read checkpoints: %w", err)
	}
	return n, nil
}

func deadTuples(ctx context.Context, pool *pgxpool.Pool, st *store.Store) (dead, autovacuums int64, err error) {
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
			return err
		}
		// Over the partitions (migration 016), as the vacuum_state view sums them.
		return tx.QueryRow(ctx, `SELECT coalesce(n_dead_tup, 0), coalesce(autovacuum_count, 0)
			FROM `+st.Table("vacuum_state")).Scan(&dead, &autovacuums)
	})
	if err != nil {
		return 0, 0, fmt.Errorf("bench: read dead tuples: %w", err)
	}
	return dead, autovacuums, nil
}

// otherWritersSQL lists the server's backends, other than the caller and
// the run's connections (application_name $1), that may be writing WAL:
// autovacuum but of a table of the run's schema $2 (the run's own
// autovacuums are counted apart; a worker's query reads "autovacuum:
// VACUUM schema.table"), and client backends holding a transaction id.
const otherWritersSQL = `SELECT DISTINCT coalesce(datname, '?') ||
       CASE WHEN backend_type = 'autovacuum worker' THEN ' (autovacuum)' ELSE ' (a writing client)' END
FROM pg_stat_activity
WHERE pid <> pg_backend_pid()
  AND ((backend_type = 'autovacuum worker'
        AND NOT (datname = current_database() AND query LIKE '% ' || $2 || '.%'))
    OR (backend_type = 'client backend' AND backend_xid IS NOT NULL
        AND application_name IS DISTINCT FROM $1))`

// watchOtherWriters samples otherWritersSQL every 250 ms until the returned
// function is called; that function (safe to call more than once) stops the
// sampling and returns what was seen, sorted. A failed sample is skipped:
// the list is a note on the WAL figures, not a figure of its own.
func watchOtherWriters(ctx context.Context, pool *pgxpool.Pool, appName, schema string) func() []string {
	ctx, cancel := context.WithCancel(ctx)
	seen := map[string]bool{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			if rows, err := pool.Query(ctx, otherWritersSQL, appName, schema); err == nil {
				names, err := pgx.CollectRows(rows, pgx.RowTo[string])
				if err == nil {
					for _, n := range names {
						seen[n] = true
					}
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	var once sync.Once
	var out []string
	return func() []string {
		once.Do(func() {
			cancel()
			<-done
			for n := range seen {
				out = append(out, n)
			}
			slices.Sort(out)
		})
		return out
	}
}

// waitBackendsGone waits (at most 3 s) until the benchmark pool's backends
// have exited, so their statistics are flushed.
func waitBackendsGone(ctx context.Context, pool *pgxpool.Pool, queue string) {
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`,
			"skiplock-"+queue).Scan(&n)
		if err != nil || n == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
}

// cleanup deletes everything the run left: its queue's jobs, finished-job
// history and dead letters and its worker row. It runs whatever happened to the run's ctx.
func cleanup(pool *pgxpool.Pool, st *store.Store, queue, workerID string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, _ = pool.Exec(ctx, "DELETE FROM "+st.Table("jobs")+" WHERE queue = $1", queue)
	_, _ = pool.Exec(ctx, "DELETE FROM "+st.Table("jobs_dead")+" WHERE queue = $1", queue)
	_, _ = pool.Exec(ctx, "DELETE FROM "+st.Table("jobs_done")+" WHERE queue = $1", queue)
	_, _ = pool.Exec(ctx, "DELETE FROM "+st.Table("workers")+" WHERE id = $1", workerID)
	_, _ = pool.Exec(ctx, "DELETE FROM "+st.Table("queues")+" WHERE name = $1", queue)
}
