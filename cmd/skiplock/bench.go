package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bench"
)

func init() { register(newBenchCmd) }

type benchFlags struct {
	jobs, workers, batch int
	handler              string
	latency              bool
	samples              int
	cpuProfile           string
	deleteCompleted      bool
	listenURL            string
	workflow             string
}

func newBenchCmd() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench [--jobs N] [--workers N] [--batch N] [--handler noop|sleep:2ms-5ms] | --latency [--samples N] | --workflow fanout:N",
		Short: "Run the articles' benchmark harness against the database",
		Long: `Seeds --jobs jobs into a queue of its own (bench_<random>), drains them with one pool of
--workers workers claiming batches of --batch, and reports throughput against the ideal rate
(workers ÷ mean handler time), wait p50/p99 (handler start − run_at), claim p99, WAL bytes per
job (pg_current_wal_insert_lsn before and after; server-wide), dead tuples of the jobs table
after the run and the share of reaped leases. --handler is noop, completetx (no work, completed with CompleteTx in a transaction of its own),
steps:N (N checkpointed no-op steps, skiplock.Step) or sleep:MIN-MAX (uniform).

--latency instead enqueues --samples jobs one at a time into an idle queue and times enqueue →
handler start with the client's default settings (LISTEN/NOTIFY wake-up). Behind a
transaction-mode pooler, --listen-url gives LISTEN a direct connection (without it the
client polls and the figure is about the poll interval).

--workflow fanout:N instead runs many workflows at once, each a root task, N leaves that depend
on it and a join that depends on every leaf, all no-op tasks: about --jobs tasks in all (24,000
by default). It reports tasks_per_s, workflows_per_s, statements_per_task and
wal_bytes_per_task beside jobs_per_s and the claim figures.

Progress goes to stderr, the summary (or --json) to stdout. The benchmark deletes its jobs,
dead letters and worker row when it ends. The schema must be migrated.`,
		Example: `  skiplock bench
  skiplock bench --handler noop --workers 64 --batch 200 --json
  skiplock bench --latency --samples 2000
  skiplock bench --workflow fanout:10 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runBench(cmd, f) },
	}
	fl := cmd.Flags()
	fl.IntVar(&f.jobs, "jobs", bench.DefaultJobs, "jobs to seed and drain")
	fl.IntVar(&f.workers, "workers", bench.DefaultWorkers, "worker pool concurrency")
	fl.IntVar(&f.batch, "batch", bench.DefaultBatch, "most jobs per claim")
	fl.StringVar(&f.handler, "handler", bench.DefaultHandler, "handler: noop, completetx (CompleteTx in its own transaction), steps:N (N checkpointed steps), or sleep:MIN-MAX (uniform random, e.g. sleep:2ms-5ms)")
	fl.BoolVar(&f.latency, "latency", false, "measure enqueue → handler start on an idle queue instead")
	fl.IntVar(&f.samples, "samples", bench.DefaultSamples, "jobs timed by --latency")
	fl.BoolVar(&f.deleteCompleted, "delete-completed", false, "delete finished jobs instead of keeping them in the jobs_done history (the default), to measure the history's cost")
	fl.StringVar(&f.cpuProfile, "cpuprofile", "", "write a pprof CPU profile of the drain to this file")
	fl.StringVar(&f.workflow, "workflow", "", "run workflows of this shape instead: fanout:N (a root, N leaves, a join)")
	listenURLFlag(cmd, &f.listenURL)
	addJSON(cmd)
	return cmd
}

func runBench(cmd *cobra.Command, f benchFlags) error {
	fl := cmd.Flags()
	if f.latency {
		for _, name := range []string{"jobs", "workers", "batch", "handler", "cpuprofile", "delete-completed", "workflow"} {
			if fl.Changed(name) {
				return usageError("--%s: not used with --latency", name)
			}
		}
		o := bench.LatencyOptions{Samples: f.samples, Schema: g.schema, Progress: cmd.ErrOrStderr(),
			Logger: loggerAt(cmd.ErrOrStderr(), slog.LevelWarn), ListenURL: listenURL(f.listenURL)}
		if err := o.Validate(); err != nil {
			return benchUsage(err)
		}
		pool, err := connect(cmd.Context(), 2)
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
		return runWorkflowBench(cmd, f)
	}
	o := bench.Options{Jobs: f.jobs, Workers: f.workers, Batch: f.batch, Handler: f.handler, Schema: g.schema,
		DeleteCompleted: f.deleteCompleted, Progress: cmd.ErrOrStderr(),
		Logger: loggerAt(cmd.ErrOrStderr(), slog.LevelWarn), ListenURL: listenURL(f.listenURL)}
	if err := o.Validate(); err != nil {
		return benchUsage(err)
	}
	if f.cpuProfile != "" {
		pf, err := os.Create(f.cpuProfile)
		if err != nil {
			return usageError("--cpuprofile: %v", err)
		}
		defer pf.Close()
		o.CPUProfile = pf
	}
	pool, err := connect(cmd.Context(), 2)
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
	fmt.Fprintf(w, "  round trips     %.3f per job during the drain\n", r.StatementsPerJob)
	fmt.Fprintf(w, "  dead tuples     %d after (%d before; %d autovacuums during)\n",
		r.DeadTuplesAfter, r.DeadTuplesBefore, r.AutovacuumsDuring)
	fmt.Fprintf(w, "  reaped leases   %.2f %%  (lease lost %d, failed %d)\n", r.ReapedLeasesPct, r.LeaseLost, r.Failed)
	fmt.Fprintf(w, "  memory          peak RSS %.1f MB during the drain, %.1f MB high-water\n",
		float64(r.DrainPeakRSSBytes)/(1<<20), float64(r.MaxRSSBytes)/(1<<20))
}

func printLatency(w io.Writer, r bench.LatencyResult) {
	fmt.Fprintf(w, "skiplock bench --latency: %d samples, idle queue %s, default settings (listener up: %t)\n",
		r.Samples, r.Queue, r.ListenerUp)
	fmt.Fprintf(w, "  enqueue → handler start   p50 %.2f ms  p99 %.2f ms  max %.2f ms  mean %.2f ms\n",
		r.LatencyP50MS, r.LatencyP99MS, r.LatencyMaxMS, r.LatencyMeanMS)
	fmt.Fprintf(w, "  enqueue call alone        p50 %.2f ms  p99 %.2f ms\n", r.EnqueueP50MS, r.EnqueueP99MS)
}

func runWorkflowBench(cmd *cobra.Command, f benchFlags) error {
	fl := cmd.Flags()
	for _, name := range []string{"handler", "cpuprofile"} {
		if fl.Changed(name) {
			return usageError("--%s: not used with --workflow (its tasks are no-ops)", name)
		}
	}
	o := bench.WorkflowOptions{Shape: f.workflow, Workers: f.workers, Batch: f.batch, Schema: g.schema,
		DeleteCompleted: f.deleteCompleted, Progress: cmd.ErrOrStderr(), ListenURL: listenURL(f.listenURL)}
	if fl.Changed("jobs") {
		o.Tasks = f.jobs
	}
	if err := o.Validate(); err != nil {
		return benchUsage(err)
	}
	pool, err := connect(cmd.Context(), 2)
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
