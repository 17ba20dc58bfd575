package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bench"
)

type benchFlags struct {
	jobs, workers, batch int
	handler              string
	latency              bool
	samples              int
	cpuProfile           string
	repeat               int
	reference            time.Duration
	deleteCompleted      bool
	tenants, burst       int
	tenantCap            int
	limit                int
	listenURL            string
	workflow             string

	// --pressure and its knobs.
	pressure                                     string
	rate, payloadBytes, readers                  int
	handlerTime, warmup, clean, stress, recovery time.Duration
	pinDuration, drainCap                        time.Duration
	overloadFactor                               float64
	timeline                                     string
}

func newBenchCmd(g *globals) *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench [--jobs N] [--workers N] [--batch N] [--handler noop|sleep:2ms-5ms] | --latency [--samples N] | --workflow fanout:N",
		Short: "Run the articles' benchmark harness against the database",
		Long: `Seeds --jobs jobs into a queue of its own (bench_<random>), drains them with one pool of
--workers workers claiming batches of --batch, and reports throughput against the ideal rate
(workers ÷ mean handler time), wait p50/p99 (handler start − run_at), claim p99, WAL bytes per
job (pg_current_wal_insert_lsn before and after; server-wide, so the summary names any other
writer it saw meanwhile: autovacuum elsewhere, a client in a writing transaction), dead tuples of the jobs table
after the run and the share of reaped leases. --handler is noop, completetx (no work, completed with CompleteTx in a transaction of its own),
steps:N (N checkpointed no-op steps, skiplock.Step), steps:N:D (N steps sleeping D each) or
sleep:MIN-MAX (uniform).

--latency instead enqueues --samples jobs one at a time into an idle queue and times enqueue →
handler start with the client's default settings: enqueued by the client whose pool runs them (its
Enqueue claims each for the idle pool in the same round trip), then as many enqueued by another
client (LISTEN/NOTIFY wake-up, then the pool's claim), then as many again, each timed from the
handler's return to the return of a Wait for it by another client (as a web server waits for jobs
its workers run). Behind a
transaction-mode pooler, --listen-url gives LISTEN a direct connection (without it the
client polls and the figure is about the poll interval).

--workflow fanout:N instead runs many workflows at once, each a root task, N leaves that depend
on it and a join that depends on every leaf, all no-op tasks: about --jobs tasks in all (24,000
by default). It reports tasks_per_s, workflows_per_s, statements_per_task and
wal_bytes_per_task beside jobs_per_s and the claim figures.

Progress goes to stderr, the summary (or --json) to stdout. The benchmark deletes its jobs,
dead letters and worker row when it ends. The schema must be migrated.

--pressure clean|idle-tx|rr-readers|overload|all runs the pressure suite instead: a fixed
offered rate (--rate jobs/s through EnqueueMany, --payload-bytes each), --workers workers with a
--handler-time sleep, and four phases per scenario: --warmup, --clean, --stress, --recovery.
Only the stress phase differs: idle-tx holds BEGIN; SELECT txid_current(); open on one
connection (for --pin-duration if set), rr-readers holds --readers REPEATABLE READ
transactions that scan the jobs table every 100 ms, overload offers --overload-factor × the
rate. Per phase it reports completions against offers, pickup p50/p99 (enqueue → handler
start), backlog max, the jobs table's dead tuples and size, then the backlog's drain time
after the stress and whether every offered job finished. --pressure-timeline FILE writes one
JSON line per second. --clean 0 or --recovery 0 skips that phase. --tenants N and --tenant-cap C
put the offered jobs on N tenants and run the pool with that cap (the pressure on a tenant-capped
pool).`,
		Example: `  skiplock bench
  skiplock bench --handler noop --workers 64 --batch 200 --json
  skiplock bench --latency --samples 2000
  skiplock bench --workflow fanout:10 --json
  skiplock bench --pressure all --json > pressure.json
  skiplock bench --pressure idle-tx --pin-duration 10m --pressure-timeline pin.ndjson`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return g.runBench(cmd, f) },
	}
	fl := cmd.Flags()
	fl.IntVar(&f.jobs, "jobs", bench.DefaultJobs, "jobs to seed and drain")
	fl.IntVar(&f.workers, "workers", bench.DefaultWorkers, "worker pool concurrency")
	fl.IntVar(&f.batch, "batch", bench.DefaultBatch, "jobs per claim: the pool's batch (a pool bound by its claims takes five batches a claim)")
	fl.StringVar(&f.handler, "handler", bench.DefaultHandler, "handler: noop, completetx (CompleteTx in its own transaction), steps:N[:D] (N checkpointed steps, each sleeping D), or sleep:MIN-MAX (uniform random, e.g. sleep:2ms-5ms)")
	fl.BoolVar(&f.latency, "latency", false, "measure enqueue → handler start on an idle queue instead")
	fl.IntVar(&f.samples, "samples", bench.DefaultSamples, "jobs timed by --latency")
	fl.IntVar(&f.tenants, "tenants", 0, "spread the seeded jobs (--pressure: the offered jobs) round-robin over N tenants, and report when every tenant had a job started")
	fl.IntVar(&f.burst, "burst", 0, "with --tenants: seed N jobs of one more tenant first, ahead in claim order (the carrier replay)")
	fl.IntVar(&f.tenantCap, "tenant-cap", 0, "run the pool with this tenant cap (round-robin fair share; 0: none); with --pressure too")
	fl.IntVar(&f.limit, "limit", 0, "put a concurrency limit of N running jobs on the bench queue (above --workers + --batch it never binds: the limit's overhead; 0: none)")
	fl.BoolVar(&f.deleteCompleted, "delete-completed", false, "delete finished jobs instead of keeping them in the jobs_done history (the default), to measure the history's cost")
	fl.StringVar(&f.cpuProfile, "cpuprofile", "", "write a pprof CPU profile of the drain to this file")
	fl.IntVar(&f.repeat, "repeat", 1, "run the drain N times, each in a fresh schema (migrated, then dropped), and report min / median / max and the spread")
	fl.DurationVar(&f.reference, "reference", 0, "before each drain, run the plain-SQL reference (8 clients, a job's life cycle as INSERT, UPDATE and DELETE) this long at 10 and at 50 jobs a statement, and report the drain as a ratio to each (e.g. 15s; 0: none)")
	fl.StringVar(&f.workflow, "workflow", "", "run workflows of this shape instead: fanout:N (a root, N leaves, a join)")
	fl.StringVar(&f.pressure, "pressure", "", "run the pressure suite: clean, idle-tx, rr-readers, overload or all")
	fl.IntVar(&f.rate, "rate", bench.DefaultPressureRate, "--pressure: offered jobs/s")
	fl.IntVar(&f.payloadBytes, "payload-bytes", bench.DefaultPayloadBytes, "--pressure: payload size in bytes")
	fl.DurationVar(&f.handlerTime, "handler-time", bench.DefaultPressureHandler, "--pressure: how long the handler sleeps")
	fl.DurationVar(&f.warmup, "warmup", bench.DefaultWarmup, "--pressure: warm-up phase")
	fl.DurationVar(&f.clean, "clean", bench.DefaultCleanPhase, "--pressure: clean phase (0 skips it)")
	fl.DurationVar(&f.stress, "stress", bench.DefaultStressPhase, "--pressure: stress phase")
	fl.DurationVar(&f.recovery, "recovery", bench.DefaultRecoveryPhase, "--pressure: recovery phase (0 skips it)")
	fl.DurationVar(&f.pinDuration, "pin-duration", 0, "--pressure: how long idle-tx and rr-readers hold the horizon (their stress phase; default --stress)")
	fl.Float64Var(&f.overloadFactor, "overload-factor", bench.DefaultOverloadFactor, "--pressure: offered rate multiplier of the overload scenario")
	fl.IntVar(&f.readers, "readers", bench.DefaultReaders, "--pressure: REPEATABLE READ readers of the rr-readers scenario")
	fl.DurationVar(&f.drainCap, "drain-cap", bench.DefaultPressureDrainCap, "--pressure: longest wait after recovery for the last jobs")
	fl.StringVar(&f.timeline, "pressure-timeline", "", "--pressure: write one JSON line per second to this file")
	listenURLFlag(cmd, &f.listenURL)
	g.addJSON(cmd)
	return cmd
}

// pressureFlags are the flags only --pressure reads.
var pressureFlags = []string{"rate", "payload-bytes", "handler-time", "warmup", "clean", "stress", "recovery",
	"pin-duration", "overload-factor", "readers", "drain-cap", "pressure-timeline"}

func (g *globals) runPressure(cmd *cobra.Command, f benchFlags) error {
	fl := cmd.Flags()
	for _, name := range []string{"jobs", "handler", "latency", "samples", "cpuprofile", "workflow", "limit", "burst", "repeat", "reference"} {
		if fl.Changed(name) {
			return usageError("--%s: not used with --pressure", name)
		}
	}
	o := bench.PressureOptions{Scenario: f.pressure, Rate: f.rate, PayloadBytes: f.payloadBytes, Workers: f.workers,
		Batch: f.batch, HandlerTime: f.handlerTime, Warmup: f.warmup, Clean: f.clean, Stress: f.stress,
		Recovery: f.recovery, PinDuration: f.pinDuration, OverloadFactor: f.overloadFactor, Readers: f.readers,
		DrainCap: f.drainCap, DeleteCompleted: f.deleteCompleted, Tenants: f.tenants, TenantCap: f.tenantCap,
		Schema: g.schema, Progress: cmd.ErrOrStderr(),
		Logger: g.loggerAt(cmd.ErrOrStderr(), slog.LevelWarn), ListenURL: g.listenURL(f.listenURL)}
	// Zero means "the default" in the options; on the command line it is
	// what the user typed, so it is refused (or, for --clean and
	// --recovery, skips the phase) before the options see it.
	for name, v := range map[string]int{"rate": f.rate, "payload-bytes": f.payloadBytes, "workers": f.workers,
		"batch": f.batch, "readers": f.readers} {
		if v < 1 {
			return usageError("--%s: must be positive, got %d", name, v)
		}
	}
	if f.overloadFactor <= 0 {
		return usageError("--overload-factor: must be positive, got %g", f.overloadFactor)
	}
	for name, d := range map[string]*time.Duration{"clean": &o.Clean, "recovery": &o.Recovery} {
		if *d == 0 {
			*d = -1
		} else if *d < 0 {
			return usageError("--%s: must not be negative, got %s", name, *d)
		}
	}
	for name, v := range map[string]time.Duration{"warmup": f.warmup, "stress": f.stress, "handler-time": f.handlerTime} {
		if v <= 0 && !(name == "handler-time" && v == 0) {
			return usageError("--%s: must be positive, got %s", name, v)
		}
	}
	if f.handlerTime == 0 {
		o.HandlerTime = time.Nanosecond // the options' zero is the default; 1 ns is no sleep
	}
	if f.drainCap <= 0 {
		return usageError("--drain-cap: must be positive, got %s", f.drainCap)
	}
	if err := o.Validate(); err != nil {
		return benchUsage(err)
	}
	if f.timeline != "" {
		tf, err := os.Create(f.timeline)
		if err != nil {
			return usageError("--pressure-timeline: %v", err)
		}
		defer tf.Close()
		o.Timeline = tf
	}
	pool, err := g.connect(cmd.Context(), 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	rep, err := bench.RunPressure(cmd.Context(), pool, o)
	if err != nil {
		return benchUsage(err)
	}
	if g.jsonOut {
		return printJSON(cmd.OutOrStdout(), rep)
	}
	printPressure(cmd.OutOrStdout(), rep)
	return nil
}

func printPressure(w io.Writer, r bench.PressureReport) {
	fmt.Fprintf(w, "skiplock bench --pressure: %d jobs/s offered, %d-byte payloads, %d workers, batch %d, handler %.1f ms\n",
		r.Rate, r.PayloadBytes, r.Workers, r.Batch, r.HandlerMS)
	fmt.Fprintf(w, "  phases: warm-up %gs, clean %gs, stress %gs, recovery %gs", r.WarmupSeconds, r.CleanSeconds,
		r.StressSeconds, r.RecoverySeconds)
	if r.PinSeconds > 0 {
		fmt.Fprintf(w, ", pin %gs", r.PinSeconds)
	}
	fmt.Fprintf(w, "; overload ×%g; %d RR readers\n\n", r.OverloadFactor, r.Readers)
	fmt.Fprintf(w, "%-11s %-8s %9s %9s %6s %10s %10s %8s %8s %10s %9s %4s\n", "scenario", "phase", "offered/s",
		"done/s", "%", "pickup p50", "pickup p99", "backlog", "stall s", "dead tup", "size MiB", "av")
	for _, s := range r.Scenarios {
		for _, p := range s.Phases {
			fmt.Fprintf(w, "%-11s %-8s %9.0f %9.0f %6.1f %8.1fms %8.1fms %8d %8.1f %10d %9.0f %4d\n", s.Scenario, p.Phase,
				p.OfferedPerS, p.CompletedPerS, p.PctOfOffered, p.PickupP50MS, p.PickupP99MS, p.BacklogMax,
				p.LongestStallSeconds, p.DeadTuplesMax, float64(p.TotalBytesMax)/(1<<20), p.Autovacuums)
			if p.OtherXactMaxSeconds >= 5 {
				fmt.Fprintf(w, "%-11s %-8s warning: another session held an xid for %.0f s during this phase (its figures include that pin)\n",
					s.Scenario, p.Phase, p.OtherXactMaxSeconds)
			}
		}
		drain := "not within recovery"
		if s.DrainSeconds != nil {
			drain = fmt.Sprintf("%.1f s", *s.DrainSeconds)
		}
		fmt.Fprintf(w, "%-11s drain after stress: %s (to backlog ≤ %d); offered %d, completed %d, dead-lettered %d, lost %d (tail %.1f s)\n\n",
			s.Scenario, drain, s.DrainThreshold, s.Offered, s.Completed, s.DeadLettered, s.Lost, s.TailSeconds)
	}
}

func (g *globals) runBench(cmd *cobra.Command, f benchFlags) error {
	fl := cmd.Flags()
	if f.pressure != "" {
		return g.runPressure(cmd, f)
	}
	for _, name := range pressureFlags {
		if fl.Changed(name) {
			return usageError("--%s: only used with --pressure", name)
		}
	}
	if f.latency {
		for _, name := range []string{"jobs", "workers", "batch", "handler", "cpuprofile", "delete-completed", "tenants", "burst", "tenant-cap", "limit", "workflow", "repeat", "reference"} {
			if fl.Changed(name) {
				return usageError("--%s: not used with --latency", name)
			}
		}
		o := bench.LatencyOptions{Samples: f.samples, Schema: g.schema, Progress: cmd.ErrOrStderr(),
			Logger: g.loggerAt(cmd.ErrOrStderr(), slog.LevelWarn), ListenURL: g.listenURL(f.listenURL)}
		if err := o.Validate(); err != nil {
			return benchUsage(err)
		}
		pool, err := g.connect(cmd.Context(), 2)
		if err != nil {
			return err
		}
		defer pool.Close()
		res, err := bench.RunLatency(cmd.Context(), pool, o)
		if err != nil {
			return benchUsage(err)
		}
		if g.jsonOut {
			return printJSON(cmd.OutOrStdout(), res)
		}
		printLatency(cmd.OutOrStdout(), res)
		return nil
	}
	if fl.Changed("samples") {
		return usageError("--samples: only used with --latency")
	}
	if fl.Changed("workflow") {
		return g.runWorkflowBench(cmd, f)
	}
	o := bench.Options{Jobs: f.jobs, Workers: f.workers, Batch: f.batch, Handler: f.handler, Schema: g.schema,
		DeleteCompleted: f.deleteCompleted, Progress: cmd.ErrOrStderr(),
		Logger: g.loggerAt(cmd.ErrOrStderr(), slog.LevelWarn), ListenURL: g.listenURL(f.listenURL),
		Tenants: f.tenants, Burst: f.burst, TenantCap: f.tenantCap, Limit: f.limit, Reference: f.reference}
	if err := o.Validate(); err != nil {
		return benchUsage(err)
	}
	if f.cpuProfile != "" && fl.Changed("repeat") {
		return usageError("--cpuprofile: not used with --repeat (profile one run)")
	}
	if f.cpuProfile != "" {
		pf, err := os.Create(f.cpuProfile)
		if err != nil {
			return usageError("--cpuprofile: %v", err)
		}
		defer pf.Close()
		o.CPUProfile = pf
	}
	if fl.Changed("repeat") {
		return g.runRepeated(cmd, o, f.repeat)
	}
	pool, err := g.connect(cmd.Context(), 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	res, err := bench.Run(cmd.Context(), pool, o)
	if err != nil {
		return benchUsage(err)
	}
	if g.jsonOut {
		return printJSON(cmd.OutOrStdout(), res)
	}
	printBench(cmd.OutOrStdout(), res)
	return nil
}

// runRepeated is `bench --repeat N`: the drain N times, a fresh schema
// each, and the spread of its figures.
func (g *globals) runRepeated(cmd *cobra.Command, o bench.Options, n int) error {
	pool, err := g.connect(cmd.Context(), 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	rep, err := bench.RunRepeated(cmd.Context(), pool, o, n)
	if err != nil {
		return benchUsage(err)
	}
	if g.jsonOut {
		return printJSON(cmd.OutOrStdout(), rep)
	}
	w := cmd.OutOrStdout()
	r0 := rep.Runs[0]
	fmt.Fprintf(w, "skiplock bench --repeat %d: %d jobs, %d workers, batch %d, handler %s, a fresh schema each run\n",
		n, r0.Jobs, r0.Workers, r0.Batch, r0.Handler)
	fmt.Fprintf(w, "  %-4s %10s %11s %11s %9s %11s %11s\n", "run", "jobs/s", "claim p50", "claim p99", "WAL/job", "autovacuums",
		"checkpoints")
	for i, r := range rep.Runs {
		fmt.Fprintf(w, "  %-4d %10.0f %9.2fms %9.2fms %8.0fB %11d %11d\n", i+1, r.JobsPerS, r.ClaimP50MS, r.ClaimP99MS,
			r.WALBytesPerJob, r.AutovacuumsDuring, r.CheckpointsDuring)
	}
	line := func(name, unit string, s bench.Spread, format string) {
		fmt.Fprintf(w, "  %-12s min "+format+"  median "+format+"  max "+format+"  (max/min %.2f)\n",
			name, s.Min, unit, s.Median, unit, s.Max, unit, s.Ratio)
	}
	line("jobs/s", "", rep.JobsPerS, "%.0f%s")
	line("claim p50", " ms", rep.ClaimP50MS, "%.2f%s")
	line("claim p99", " ms", rep.ClaimP99MS, "%.2f%s")
	line("WAL per job", " B", rep.WALBytesPerJob, "%.0f%s")
	if rep.VsRefB10 != nil {
		fmt.Fprintf(w, "  against the plain-SQL reference run just before each drain (%d clients, %s each):\n", bench.ReferenceClients, o.Reference)
		fmt.Fprintf(w, "  %-4s %12s %12s %10s %10s\n", "run", "ref 10/stmt", "ref 50/stmt", "÷ ref 10", "÷ ref 50")
		for i, r := range rep.Runs {
			fmt.Fprintf(w, "  %-4d %12.0f %12.0f %9.2f× %9.3f×\n", i+1, r.Reference.B10.JobsPerS, r.Reference.B50.JobsPerS,
				r.Reference.VsB10, r.Reference.VsB50)
		}
		line("÷ ref 10", "×", *rep.VsRefB10, "%.2f%s")
		line("÷ ref 50", "×", *rep.VsRefB50, "%.3f%s")
		line("ref 50 ÷ 10", "×", *rep.RefB50OverB10, "%.3f%s")
	}
	for i, r := range rep.Runs {
		if len(r.OtherWriters) > 0 {
			fmt.Fprintf(w, "  run %d's WAL counts other writers seen during it too: %s\n", i+1,
				termSafe(strings.Join(r.OtherWriters, ", ")))
		}
	}
	return nil
}

// benchUsage turns an invalid option into exit 2 naming its flag.
func benchUsage(err error) error {
	var oe *bench.OptionError
	if errors.As(err, &oe) {
		return usageError("--%s: %s", oe.Option, oe.Message)
	}
	var fe *skiplock.FieldError
	if errors.As(err, &fe) && fe.Field == "Config.ListenURL" {
		return usageError("--listen-url: %s", fe.Message)
	}
	return err
}

func printBench(w io.Writer, r bench.Result) {
	fmt.Fprintf(w, "skiplock bench: %d jobs, %d workers, batch %d, handler %s (queue %s)\n",
		r.Jobs, r.Workers, r.Batch, r.Handler, r.Queue)
	fmt.Fprintf(w, "  seed            %.0f jobs/s (COPY, %d per transaction)\n", r.SeedJobsPerS, bench.SeedChunk)
	if r.IdealJobsPerS != nil {
		fmt.Fprintf(w, "  throughput      %.0f jobs/s in %.2f s: %.1f %% of the ideal %.0f jobs/s (mean handler %.2f ms)\n",
			r.JobsPerS, r.Seconds, *r.PctOfIdeal, *r.IdealJobsPerS, r.HandlerMeanMS)
	} else {
		fmt.Fprintf(w, "  throughput      %.0f jobs/s in %.2f s (no-op handler: no ideal rate)\n", r.JobsPerS, r.Seconds)
	}
	fmt.Fprintf(w, "  wait            p50 %.1f ms  p99 %.1f ms  max %.1f ms\n", r.WaitP50MS, r.WaitP99MS, r.WaitMaxMS)
	fmt.Fprintf(w, "  claim           p50 %.2f ms  p99 %.2f ms  (%d claims)\n", r.ClaimP50MS, r.ClaimP99MS, r.Claims)
	fmt.Fprintf(w, "  WAL per job     %.0f bytes (seed %.0f + drain %.0f; server-wide)\n",
		r.WALBytesPerJob, r.SeedWALBytesPerJob, r.DrainWALBytesPerJob)
	if len(r.OtherWriters) > 0 {
		fmt.Fprintf(w, "                  counts other writers seen during the run too: %s\n", termSafe(strings.Join(r.OtherWriters, ", ")))
	}
	fmt.Fprintf(w, "  round trips     %.3f per job during the drain\n", r.StatementsPerJob)
	if ref := r.Reference; ref != nil {
		fmt.Fprintf(w, "  plain SQL       %.0f jobs/s at 10 a statement, %.0f at 50 (%d clients, %.0f s each, just before): this drain %.2f × and %.3f × them\n",
			ref.B10.JobsPerS, ref.B50.JobsPerS, ref.B10.Clients, ref.B10.Seconds, ref.VsB10, ref.VsB50)
	}
	if strings.HasPrefix(r.Handler, "steps:") {
		fmt.Fprintf(w, "  checkpoints     %.2f written per job (those still queued when a job completes are withdrawn)\n", r.CheckpointsPerJob)
	}
	fmt.Fprintf(w, "  dead tuples     %d after (%d before; %d autovacuums and %d checkpoints during)\n",
		r.DeadTuplesAfter, r.DeadTuplesBefore, r.AutovacuumsDuring, r.CheckpointsDuring)
	fmt.Fprintf(w, "  reaped leases   %.2f %%  (lease lost %d, failed %d)\n", r.ReapedLeasesPct, r.LeaseLost, r.Failed)
	fmt.Fprintf(w, "  memory          peak RSS %.1f MB during the drain, %.1f MB high-water\n",
		float64(r.DrainPeakRSSBytes)/(1<<20), float64(r.MaxRSSBytes)/(1<<20))
	if r.Limit > 0 {
		fmt.Fprintf(w, "  limit           %d running jobs on the queue\n", r.Limit)
	}
	if r.Tenants > 0 {
		fmt.Fprintf(w, "  tenants         %d behind a burst of %d, tenant cap %d", r.Tenants, r.Burst, r.TenantCap)
		if r.AllTenantsStartedS != nil {
			fmt.Fprintf(w, ": every tenant had a job started %.2f s into the drain, after %d burst jobs", *r.AllTenantsStartedS, *r.BurstStartedBeforeAll)
		}
		fmt.Fprintln(w)
	}
}

func printLatency(w io.Writer, r bench.LatencyResult) {
	fmt.Fprintf(w, "skiplock bench --latency: %d samples, idle queue %s, default settings (listener up: %t)\n",
		r.Samples, r.Queue, r.ListenerUp)
	fmt.Fprintf(w, "  enqueued by the worker's client (%d of %d handed off to its idle pool)\n", r.HandedOff, r.Samples)
	fmt.Fprintf(w, "    enqueue → handler start p50 %.2f ms  p99 %.2f ms  max %.2f ms  mean %.2f ms\n",
		r.LatencyP50MS, r.LatencyP99MS, r.LatencyMaxMS, r.LatencyMeanMS)
	fmt.Fprintf(w, "    enqueue call alone      p50 %.2f ms  p99 %.2f ms\n", r.EnqueueP50MS, r.EnqueueP99MS)
	fmt.Fprintln(w, "  enqueued by another client (NOTIFY, then the pool's claim)")
	fmt.Fprintf(w, "    enqueue → handler start p50 %.2f ms  p99 %.2f ms  max %.2f ms\n", r.RemoteP50MS, r.RemoteP99MS, r.RemoteMaxMS)
	fmt.Fprintf(w, "    enqueue call alone      p50 %.2f ms  p99 %.2f ms\n", r.RemoteEnqueueP50MS, r.RemoteEnqueueP99MS)
	fmt.Fprintf(w, "  handler return → Wait     p50 %.2f ms  p99 %.2f ms  max %.2f ms\n", r.WakeUpP50MS, r.WakeUpP99MS, r.WakeUpMaxMS)
}

func (g *globals) runWorkflowBench(cmd *cobra.Command, f benchFlags) error {
	fl := cmd.Flags()
	for _, name := range []string{"handler", "cpuprofile", "limit", "repeat", "reference"} {
		if fl.Changed(name) {
			return usageError("--%s: not used with --workflow (its tasks are no-ops)", name)
		}
	}
	o := bench.WorkflowOptions{Shape: f.workflow, Workers: f.workers, Batch: f.batch, Schema: g.schema,
		DeleteCompleted: f.deleteCompleted, Progress: cmd.ErrOrStderr(), ListenURL: g.listenURL(f.listenURL)}
	if fl.Changed("jobs") {
		o.Tasks = f.jobs
	}
	if err := o.Validate(); err != nil {
		return benchUsage(err)
	}
	pool, err := g.connect(cmd.Context(), 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	res, err := bench.RunWorkflow(cmd.Context(), pool, o)
	if err != nil {
		return benchUsage(err)
	}
	if g.jsonOut {
		return printJSON(cmd.OutOrStdout(), res)
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "skiplock bench --workflow %s: %d workflows, %d tasks, %d workers, batch %d (queue %s)\n",
		res.Workflow, res.Workflows, res.Tasks, res.Workers, res.Batch, res.Queue)
	fmt.Fprintf(w, "  enqueue         %.0f workflows/s (one round trip each)\n", res.SeedWorkflowsPerS)
	fmt.Fprintf(w, "  throughput      %.0f tasks/s, %.1f workflows/s in %.2f s\n", res.TasksPerS, res.WorkflowsPerS, res.Seconds)
	fmt.Fprintf(w, "  claim           p50 %.2f ms  p99 %.2f ms  (%d claims)\n", res.ClaimP50MS, res.ClaimP99MS, res.Claims)
	fmt.Fprintf(w, "  WAL per task    %.0f bytes (enqueue to completion; server-wide)\n", res.WALBytesPerTask)
	fmt.Fprintf(w, "  round trips     %.3f per task during the drain (+ %.3f to enqueue)\n", res.StatementsPerTask, res.SeedStatementsPerTask)
	fmt.Fprintf(w, "  dead tuples     %d after; failed %d\n", res.DeadTuplesAfter, res.Failed)
	return nil
}
