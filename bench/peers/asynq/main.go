// Command asynq-bench is the asynq (github.com/hibiken/asynq, Redis) side of
// skiplock's head-to-head comparison. It reproduces the two scenarios of
// `skiplock bench` with the same measurement method:
//
//   - drain (default): enqueue --jobs tasks of one type into a queue of its
//     own (asynq has no bulk enqueue: Client.Enqueue from --seed-conns
//     goroutines), then start an asynq.Server with Concurrency = --workers
//     serving only that queue and time Start → every task's outcome written
//     (the last handler returned and the queue's pending and active lists are
//     empty, i.e. every Done script has run). Reports jobs/s against the
//     ideal rate (workers ÷ mean handler time), wait p50/p99 (handler start −
//     enqueue time carried in the payload) and the process's peak RSS.
//   - --latency: an idle queue served by a server with default settings;
//     --samples tasks enqueued one at a time, each waited for, timing the
//     Enqueue call's start → handler start.
//
// It is a module of its own so that skiplock never depends on asynq. The
// queue (bench_<random>) is deleted with the inspector when the run ends,
// however it ends, and the queue's leftover statistics keys with it.
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
	mrand "math/rand/v2"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/skiplock/skiplock/bench"
	"github.com/skiplock/skiplock/bench/measure"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// Defaults, the same as `skiplock bench`.
const (
	defaultJobs      = 100_000
	defaultWorkers   = 32
	defaultHandler   = "sleep:2ms-5ms"
	defaultSamples   = 1000
	defaultSeedConns = 8
	maxJobs          = 100_000_000
	latencyWarmup    = 20
	benchType        = "bench"
	latencyType      = "bench_latency"
)

// Result is what the drain measured. Names follow skiplock's bench.Result
// where the quantity is the same.
type Result struct {
	Queue   string `json:"queue"`
	Jobs    int    `json:"jobs"`
	Workers int    `json:"workers"`
	Handler string `json:"handler"`

	AsynqVersion string    `json:"asynq_version"`
	Redis        RedisInfo `json:"redis"`
	// TaskCheckIntervalMS is the server's TaskCheckInterval (how long the
	// fetcher sleeps, ±50 % jitter, after finding every queue empty); 1000
	// is asynq's default.
	TaskCheckIntervalMS float64 `json:"task_check_interval_ms"`

	// Seeding: Client.Enqueue (one Lua script per task) from SeedConns
	// goroutines; asynq has no bulk enqueue.
	SeedMethod   string  `json:"seed_method"`
	SeedConns    int     `json:"seed_conns"`
	SeedSeconds  float64 `json:"seed_seconds"`
	SeedJobsPerS float64 `json:"seed_jobs_per_s"`
	// RedisBytesPerJob is Redis's used_memory after seeding minus before,
	// per task (the pending list entry plus the task hash).
	RedisBytesPerJob float64 `json:"redis_bytes_per_job"`

	// Seconds is the drain: from Server.Start until every task's outcome is
	// written in Redis (last handler returned and the queue's pending and
	// active lists empty: every Done script has run).
	Seconds  float64 `json:"seconds"`
	JobsPerS float64 `json:"jobs_per_s"`
	// HandlersSeconds is Start → the N-th handler return, before the last
	// Done scripts ran.
	HandlersSeconds float64 `json:"handlers_seconds"`
	// IdealJobsPerS is workers ÷ the handler's nominal mean time; nil for
	// the no-op handler.
	IdealJobsPerS *float64 `json:"ideal_jobs_per_s"`
	PctOfIdeal    *float64 `json:"pct_of_ideal"`
	// HandlerMeanMS is the measured mean handler time (sleep overshoot
	// included); 0 for noop.
	HandlerMeanMS float64 `json:"handler_mean_ms"`
	// PctOfMeasuredIdeal is 100 × JobsPerS ÷ (workers ÷ HandlerMeanMS).
	PctOfMeasuredIdeal *float64 `json:"pct_of_measured_ideal"`

	// Wait is handler start − the time the task's Enqueue call started
	// (carried in the payload; every task is enqueued due).
	WaitP50MS float64 `json:"wait_p50_ms"`
	WaitP99MS float64 `json:"wait_p99_ms"`
	WaitMaxMS float64 `json:"wait_max_ms"`

	// Runs counts handler invocations (more than Jobs if a task ran twice);
	// Retried counts those with a retry count > 0 (a lease expired or a
	// previous attempt failed), the analogue of skiplock's reaped leases.
	Runs       int64   `json:"runs"`
	Retried    int64   `json:"retried"`
	RetriedPct float64 `json:"retried_pct"`
	Failed     int64   `json:"failed"`

	// Memory of this process: the peak resident set sampled during the drain
	// and the lifetime high-water mark (VmHWM, seeding included).
	DrainPeakRSSBytes int64 `json:"drain_peak_rss_bytes"`
	MaxRSSBytes       int64 `json:"max_rss_bytes"`
}

// LatencyResult is what --latency measured.
type LatencyResult struct {
	Queue               string    `json:"queue"`
	Samples             int       `json:"samples"`
	AsynqVersion        string    `json:"asynq_version"`
	Redis               RedisInfo `json:"redis"`
	Concurrency         int       `json:"concurrency"`
	TaskCheckIntervalMS float64   `json:"task_check_interval_ms"`
	// DefaultSettings is false when --task-check-interval changed asynq's
	// default.
	DefaultSettings bool `json:"default_settings"`
	// Latency is from just before Enqueue is called to the first line of the
	// handler.
	LatencyP50MS  float64 `json:"latency_p50_ms"`
	LatencyP99MS  float64 `json:"latency_p99_ms"`
	LatencyMaxMS  float64 `json:"latency_max_ms"`
	LatencyMeanMS float64 `json:"latency_mean_ms"`
	// Enqueue is the Enqueue call alone (one Lua script round trip).
	EnqueueP50MS float64 `json:"enqueue_p50_ms"`
	EnqueueP99MS float64 `json:"enqueue_p99_ms"`
}

// RedisInfo describes the Redis server and its durability settings.
type RedisInfo struct {
	Version     string `json:"version"`
	Appendonly  string `json:"appendonly"`
	Appendfsync string `json:"appendfsync"`
	Save        string `json:"save"`
	Durability  string `json:"durability"`
}

type options struct {
	redisURL          string
	jobs, workers     int
	handler           string
	seedConns         int
	latency           bool
	samples           int
	taskCheckInterval time.Duration
	jsonOut           bool
}

type usageErr struct{ msg string }

func (e usageErr) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageErr{fmt.Sprintf(format, args...)} }

func main() {
	var o options
	fs := flag.NewFlagSet("asynq-bench", flag.ContinueOnError)
	defURL := os.Getenv("REDIS_URL")
	if defURL == "" {
		defURL = "redis://127.0.0.1:6379/0"
	}
	fs.StringVar(&o.redisURL, "redis-url", defURL, "Redis to use (default $REDIS_URL or redis://127.0.0.1:6379/0)")
	fs.IntVar(&o.jobs, "jobs", defaultJobs, "tasks to seed and drain")
	fs.IntVar(&o.workers, "workers", defaultWorkers, "server Concurrency")
	fs.StringVar(&o.handler, "handler", defaultHandler, "handler: noop or sleep:MIN-MAX (uniform random, e.g. sleep:2ms-5ms)")
	fs.IntVar(&o.seedConns, "seed-conns", defaultSeedConns, "goroutines calling Client.Enqueue while seeding")
	fs.BoolVar(&o.latency, "latency", false, "measure enqueue → handler start on an idle queue instead")
	fs.IntVar(&o.samples, "samples", defaultSamples, "tasks timed by --latency")
	fs.DurationVar(&o.taskCheckInterval, "task-check-interval", 0, "server TaskCheckInterval (0: asynq's default, 1s)")
	fs.BoolVar(&o.jsonOut, "json", false, "print the result as JSON")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: asynq-bench [--redis-url URL] [--jobs N] [--workers N] [--handler noop|sleep:2ms-5ms] [--seed-conns N] [--json]\n"+
			"       asynq-bench --latency [--samples N] [--redis-url URL] [--json]\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, o, set)
	if err != nil {
		fmt.Fprintln(os.Stderr, "asynq-bench:", err)
		var ue usageErr
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, o options, set map[string]bool) error {
	if o.latency {
		for _, name := range []string{"jobs", "workers", "handler", "seed-conns"} {
			if set[name] {
				return usagef("--%s: not used with --latency", name)
			}
		}
		if o.samples < 1 || o.samples > 1_000_000 {
			return usagef("--samples: must be between 1 and 1000000, got %d", o.samples)
		}
	} else {
		if set["samples"] {
			return usagef("--samples: only used with --latency")
		}
		switch {
		case o.jobs < 1 || o.jobs > maxJobs:
			return usagef("--jobs: must be between 1 and %d, got %d", maxJobs, o.jobs)
		case o.workers < 1 || o.workers > 10000:
			return usagef("--workers: must be between 1 and 10000, got %d", o.workers)
		case o.seedConns < 1 || o.seedConns > 256:
			return usagef("--seed-conns: must be between 1 and 256, got %d", o.seedConns)
		}
	}
	if o.taskCheckInterval < 0 {
		return usagef("--task-check-interval: must not be negative")
	}
	h, err := parseHandler(o.handler)
	if err != nil {
		return err
	}
	opt, err := asynq.ParseRedisURI(o.redisURL)
	if err != nil {
		return usagef("--redis-url: %v", err)
	}
	rc, ok := opt.MakeRedisClient().(redis.UniversalClient)
	if !ok {
		return fmt.Errorf("unexpected Redis client type")
	}
	defer rc.Close()
	if err := rc.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis %s: %w", o.redisURL, err)
	}
	info := redisInfo(ctx, rc)
	out := os.Stdout
	if o.latency {
		res, err := runLatency(ctx, opt, rc, o, info)
		if err != nil {
			return err
		}
		if o.jsonOut {
			return printJSON(out, res)
		}
		printLatency(out, res)
		return nil
	}
	res, err := runDrain(ctx, opt, rc, o, h, info)
	if err != nil {
		return err
	}
	if o.jsonOut {
		return printJSON(out, res)
	}
	printDrain(out, res)
	return nil
}

// runDrain seeds o.jobs tasks and drains them; see the package comment.
func runDrain(ctx context.Context, opt asynq.RedisConnOpt, rc redis.UniversalClient, o options, h bench.Handler, info RedisInfo) (Result, error) {
	progress := os.Stderr
	queue := queueName()
	res := Result{Queue: queue, Jobs: o.jobs, Workers: o.workers, Handler: h.String(), AsynqVersion: asynqVersion(),
		Redis: info, TaskCheckIntervalMS: msOf(orDefault(o.taskCheckInterval)), SeedConns: o.seedConns,
		SeedMethod: "Client.Enqueue (one Lua script round trip per task), concurrent goroutines; asynq has no bulk enqueue"}
	insp := asynq.NewInspector(opt)
	defer insp.Close()
	defer cleanup(rc, insp, queue)

	n := int64(o.jobs)
	var waits, handlerTimes measure.Hist
	var runs, done, retried, lastReturn atomic.Int64
	mux := asynq.NewServeMux()
	mux.HandleFunc(benchType, func(ctx context.Context, t *asynq.Task) error {
		start := time.Now()
		var p payload
		if err := json.Unmarshal(t.Payload(), &p); err != nil {
			return fmt.Errorf("bad payload: %w: %w", err, asynq.SkipRetry)
		}
		waits.Add(start.Sub(time.Unix(0, p.T)))
		runs.Add(1)
		if rt, _ := asynq.GetRetryCount(ctx); rt > 0 {
			retried.Add(1)
		}
		if !h.Noop {
			d := h.Min
			if h.Max > h.Min {
				d += mrand.N(h.Max - h.Min + 1)
			}
			if err := measure.Sleep(ctx, start.Add(d)); err != nil {
				return err
			}
			handlerTimes.Add(time.Since(start))
		}
		if done.Add(1) == n {
			lastReturn.Store(time.Now().UnixNano())
		}
		return nil
	})
	var failed atomic.Int64
	srv := asynq.NewServer(opt, asynq.Config{
		Concurrency:       o.workers,
		Queues:            map[string]int{queue: 1},
		TaskCheckInterval: o.taskCheckInterval,
		ShutdownTimeout:   30 * time.Second,
		LogLevel:          asynq.WarnLevel,
		ErrorHandler: asynq.ErrorHandlerFunc(func(context.Context, *asynq.Task, error) {
			failed.Add(1)
		}),
	})

	mem0 := usedMemory(ctx, rc)
	client := asynq.NewClient(opt)
	seedStart := time.Now()
	err := seed(ctx, client, queue, o.jobs, o.seedConns, progress)
	res.SeedSeconds = time.Since(seedStart).Seconds()
	client.Close()
	if err != nil {
		return res, err
	}
	res.SeedJobsPerS = float64(o.jobs) / res.SeedSeconds
	if mem1 := usedMemory(ctx, rc); mem0 > 0 && mem1 > 0 {
		res.RedisBytesPerJob = float64(mem1-mem0) / float64(o.jobs)
	}

	start := time.Now()
	if err := srv.Start(mux); err != nil {
		return res, fmt.Errorf("server start: %w", err)
	}
	peakRSS, err := waitDone(ctx, rc, queue, n, &runs, &done, start, progress)
	res.Seconds = time.Since(start).Seconds()
	srv.Shutdown()
	if err != nil {
		return res, err
	}
	res.HandlersSeconds = float64(lastReturn.Load()-start.UnixNano()) / 1e9
	res.JobsPerS = float64(n) / res.Seconds
	if !h.Noop {
		ideal := float64(o.workers) / h.Mean().Seconds()
		pct := 100 * res.JobsPerS / ideal
		res.IdealJobsPerS, res.PctOfIdeal = &ideal, &pct
		res.HandlerMeanMS = handlerTimes.MeanMS()
		if res.HandlerMeanMS > 0 {
			m := 100 * res.JobsPerS / (float64(o.workers) / (res.HandlerMeanMS / 1000))
			res.PctOfMeasuredIdeal = &m
		}
	}
	res.WaitP50MS, res.WaitP99MS, res.WaitMaxMS = waits.QuantileMS(0.50), waits.QuantileMS(0.99), waits.MaxMS()
	res.Runs, res.Retried, res.Failed = runs.Load(), retried.Load(), failed.Load()
	res.RetriedPct = 100 * float64(res.Retried) / float64(n)
	res.DrainPeakRSSBytes = peakRSS
	res.MaxRSSBytes = measure.ProcStatus("VmHWM")
	return res, nil
}

// payload is the task's payload: its number, like skiplock's seed, and the
// time its Enqueue call started (Unix nanoseconds), since asynq does not
// hand the handler the task's enqueue time.
type payload struct {
	N int   `json:"n"`
	T int64 `json:"t"`
}

// seed enqueues n due tasks into queue from conns goroutines, each calling
// Client.Enqueue for one task at a time.
func seed(ctx context.Context, c *asynq.Client, queue string, n, conns int, progress io.Writer) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next, done atomic.Int64
	var wg sync.WaitGroup
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				t := time.Now()
				p := []byte(`{"n":` + strconv.FormatInt(i, 10) + `,"t":` + strconv.FormatInt(t.UnixNano(), 10) + `}`)
				if _, err := c.EnqueueContext(ctx, asynq.NewTask(benchType, p), asynq.Queue(queue)); err != nil {
					cancel(fmt.Errorf("seed: %w", err))
					return
				}
				done.Add(1)
			}
		}()
	}
	stopProgress := make(chan struct{})
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case <-tick.C:
				fmt.Fprintf(progress, "asynq-bench: seeded %d/%d tasks\n", done.Load(), n)
			}
		}
	}()
	wg.Wait()
	close(stopProgress)
	if err := context.Cause(ctx); err != nil {
		return err
	}
	fmt.Fprintf(progress, "asynq-bench: seeded %d/%d tasks\n", done.Load(), n)
	return nil
}

// waitDone waits until n handlers have returned and the queue's pending and
// active lists are empty (every Done script has run), printing a progress
// line every second, and returns the peak RSS sampled meanwhile. Like
// skiplock's waitDone it checks every 5 ms.
func waitDone(ctx context.Context, rc redis.UniversalClient, queue string, n int64, runs, done *atomic.Int64, start time.Time, progress io.Writer) (int64, error) {
	poll := time.NewTicker(5 * time.Millisecond)
	defer poll.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var prev, peak int64
	lastMove := time.Now()
	pending, active := "asynq:{"+queue+"}:pending", "asynq:{"+queue+"}:active"
	for {
		select {
		case <-ctx.Done():
			return peak, ctx.Err()
		case <-poll.C:
			if done.Load() < n {
				continue
			}
			var lp, la *redis.IntCmd
			_, err := rc.Pipelined(ctx, func(p redis.Pipeliner) error {
				lp, la = p.LLen(ctx, pending), p.LLen(ctx, active)
				return nil
			})
			if err != nil {
				return peak, fmt.Errorf("poll queue: %w", err)
			}
			if lp.Val() == 0 && la.Val() == 0 {
				return max(peak, measure.ProcStatus("VmRSS")), nil
			}
		case <-tick.C:
			d := done.Load()
			peak = max(peak, measure.ProcStatus("VmRSS"))
			el := time.Since(start).Seconds()
			fmt.Fprintf(progress, "asynq-bench: %d/%d done  %.0f jobs/s (last second %d)  running %d  rss %d MB\n",
				d, n, float64(d)/el, d-prev, runs.Load()-d, peak>>20)
			if d != prev {
				lastMove = time.Now()
			}
			prev = d
			if time.Since(lastMove) > 2*time.Minute {
				return peak, fmt.Errorf("no task finished for 2 minutes (%d/%d done)", d, n)
			}
		}
	}
}

// runLatency enqueues o.samples tasks one at a time into an idle queue
// served by a server with default settings (but for the queue, the log level
// and --task-check-interval) and times each from just before Enqueue to
// handler start. The next task is enqueued only after the previous one's
// Done script has run (the queue's processed counter), and a millisecond
// later, as skiplock's RunLatency does.
func runLatency(ctx context.Context, opt asynq.RedisConnOpt, rc redis.UniversalClient, o options, info RedisInfo) (LatencyResult, error) {
	progress := os.Stderr
	queue := queueName()
	res := LatencyResult{Queue: queue, Samples: o.samples, AsynqVersion: asynqVersion(), Redis: info,
		Concurrency: runtime.NumCPU(), TaskCheckIntervalMS: msOf(orDefault(o.taskCheckInterval)),
		DefaultSettings: o.taskCheckInterval == 0}
	insp := asynq.NewInspector(opt)
	defer insp.Close()
	defer cleanup(rc, insp, queue)

	started := make(chan time.Time, 1)
	mux := asynq.NewServeMux()
	mux.HandleFunc(latencyType, func(context.Context, *asynq.Task) error {
		select {
		case started <- time.Now():
		default:
		}
		return nil
	})
	srv := asynq.NewServer(opt, asynq.Config{
		Queues:            map[string]int{queue: 1},
		TaskCheckInterval: o.taskCheckInterval,
		LogLevel:          asynq.WarnLevel,
	})
	client := asynq.NewClient(opt)
	defer client.Close()
	if err := srv.Start(mux); err != nil {
		return res, fmt.Errorf("server start: %w", err)
	}
	defer srv.Shutdown()

	processed := "asynq:{" + queue + "}:processed"
	var lat, enq measure.Hist
	last := time.Now()
	for i := 0; i < latencyWarmup+o.samples; i++ {
		toStart, call, err := measure.TimeStart(ctx, started, 30*time.Second, func(ctx context.Context) error {
			_, err := client.EnqueueContext(ctx, asynq.NewTask(latencyType, nil), asynq.Queue(queue))
			return err
		})
		if err != nil {
			return res, fmt.Errorf("sample %d: %w", i, err)
		}
		if i >= latencyWarmup {
			lat.Add(toStart)
			enq.Add(call)
		}
		for want := int64(i + 1); ; {
			got, err := rc.Get(ctx, processed).Int64()
			if err != nil && !errors.Is(err, redis.Nil) {
				return res, fmt.Errorf("read processed counter: %w", err)
			}
			if got >= want {
				break
			}
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			time.Sleep(200 * time.Microsecond)
		}
		time.Sleep(time.Millisecond)
		if time.Since(last) >= time.Second {
			last = time.Now()
			fmt.Fprintf(progress, "asynq-bench: latency %d/%d samples  p50 %.2f ms  p99 %.2f ms\n",
				max(0, i+1-latencyWarmup), o.samples, lat.QuantileMS(0.5), lat.QuantileMS(0.99))
		}
	}
	res.LatencyP50MS, res.LatencyP99MS = lat.QuantileMS(0.50), lat.QuantileMS(0.99)
	res.LatencyMaxMS, res.LatencyMeanMS = lat.MaxMS(), lat.MeanMS()
	res.EnqueueP50MS, res.EnqueueP99MS = enq.QuantileMS(0.50), enq.QuantileMS(0.99)
	return res, nil
}

// cleanup deletes the queue with the inspector (force: pending, scheduled,
// retry, archived and completed tasks go with it), then the keys asynq
// leaves behind under the queue's prefix (processed/failed counters, daily
// statistics with a 90-day TTL). It runs however the run ended.
func cleanup(rc redis.UniversalClient, insp *asynq.Inspector, queue string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := insp.DeleteQueue(queue, true); err != nil && !errors.Is(err, asynq.ErrQueueNotFound) {
		fmt.Fprintf(os.Stderr, "asynq-bench: delete queue %s: %v (removing its keys directly)\n", queue, err)
	}
	var keys []string
	iter := rc.Scan(ctx, 0, "asynq:{"+queue+"}:*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
		if len(keys) == 1000 {
			_ = rc.Unlink(ctx, keys...).Err()
			keys = keys[:0]
		}
	}
	if len(keys) > 0 {
		_ = rc.Unlink(ctx, keys...).Err()
	}
	_ = rc.SRem(ctx, "asynq:queues", queue).Err()
}

func queueName() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "bench_" + hex.EncodeToString(b)
}

func orDefault(d time.Duration) time.Duration {
	if d <= 0 {
		return time.Second // asynq's defaultTaskCheckInterval
	}
	return d
}

func msOf(d time.Duration) float64 { return float64(d) / 1e6 }

func asynqVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == "github.com/hibiken/asynq" {
				if m.Replace != nil {
					return m.Replace.Version
				}
				return m.Version
			}
		}
	}
	return "unknown"
}

// redisInfo reads the server's version and durability settings (CONFIG GET,
// falling back to INFO persistence where CONFIG is disabled).
func redisInfo(ctx context.Context, rc redis.UniversalClient) RedisInfo {
	var ri RedisInfo
	server := infoFields(ctx, rc, "server")
	ri.Version = server["redis_version"]
	if m, err := rc.ConfigGet(ctx, "appendonly").Result(); err == nil {
		ri.Appendonly = m["appendonly"]
		if m, err := rc.ConfigGet(ctx, "appendfsync").Result(); err == nil {
			ri.Appendfsync = m["appendfsync"]
		}
		if m, err := rc.ConfigGet(ctx, "save").Result(); err == nil {
			ri.Save = m["save"]
		}
	} else {
		switch infoFields(ctx, rc, "persistence")["aof_enabled"] {
		case "1":
			ri.Appendonly = "yes"
		case "0":
			ri.Appendonly = "no"
		}
		ri.Appendfsync, ri.Save = "unknown", "unknown"
	}
	switch {
	case ri.Appendonly == "no" && ri.Save == "":
		ri.Durability = "no persistence at all: a restart loses every task"
	case ri.Appendonly == "no":
		ri.Durability = "no AOF, RDB snapshots only (save " + strconv.Quote(ri.Save) + "): a crash loses every write since the last snapshot"
	case ri.Appendonly == "yes" && ri.Appendfsync == "always":
		ri.Durability = "AOF, fsync before replying (appendfsync always): comparable to synchronous_commit = on"
	case ri.Appendonly == "yes" && ri.Appendfsync == "everysec":
		ri.Durability = "AOF, fsync once a second (appendfsync everysec): a machine crash can lose about the last second of acknowledged writes"
	case ri.Appendonly == "yes" && ri.Appendfsync == "no":
		ri.Durability = "AOF without fsync (appendfsync no): the OS flushes when it likes"
	default:
		ri.Durability = "unknown"
	}
	return ri
}

func infoFields(ctx context.Context, rc redis.UniversalClient, section string) map[string]string {
	m := map[string]string{}
	s, err := rc.Info(ctx, section).Result()
	if err != nil {
		return m
	}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m
}

func usedMemory(ctx context.Context, rc redis.UniversalClient) int64 {
	v, _ := strconv.ParseInt(infoFields(ctx, rc, "memory")["used_memory"], 10, 64)
	return v
}

// parseHandler parses --handler with skiplock bench's own parser, so both
// sides accept the same syntax; completetx is skiplock's and has no asynq
// counterpart here.
func parseHandler(s string) (bench.Handler, error) {
	h, err := bench.ParseHandler(s)
	if err != nil {
		return h, usagef("--handler: %v", err)
	}
	if h.Tx {
		return h, usagef(`--handler: must be "noop" or "sleep:MIN-MAX" (e.g. sleep:2ms-5ms); completetx is skiplock's own`)
	}
	return h, nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printRedis(w io.Writer, ri RedisInfo, asynqV string, tciMS float64) {
	fmt.Fprintf(w, "  versions        asynq %s, redis %s\n", asynqV, ri.Version)
	fsync := ri.Appendfsync
	if ri.Appendonly == "no" {
		fsync += " (unused)"
	}
	fmt.Fprintf(w, "  redis           appendonly %s, appendfsync %s: %s\n", ri.Appendonly, fsync, ri.Durability)
	fmt.Fprintf(w, "  fetch           Lua RPOPLPUSH per task, one fetcher goroutine; empty queue: sleep %.0f ms ±50 %% (TaskCheckInterval)\n", tciMS)
}

func printDrain(w io.Writer, r Result) {
	fmt.Fprintf(w, "asynq bench: %d jobs, %d workers, handler %s (queue %s)\n", r.Jobs, r.Workers, r.Handler, r.Queue)
	printRedis(w, r.Redis, r.AsynqVersion, r.TaskCheckIntervalMS)
	fmt.Fprintf(w, "  seed            %.0f jobs/s (Client.Enqueue, one task per call, %d goroutines; no bulk enqueue)  %.0f bytes/task in Redis\n",
		r.SeedJobsPerS, r.SeedConns, r.RedisBytesPerJob)
	if r.IdealJobsPerS != nil {
		fmt.Fprintf(w, "  throughput      %.0f jobs/s in %.2f s: %.1f %% of the ideal %.0f jobs/s (mean handler %.2f ms", r.JobsPerS, r.Seconds, *r.PctOfIdeal, *r.IdealJobsPerS, r.HandlerMeanMS)
		if r.PctOfMeasuredIdeal != nil {
			fmt.Fprintf(w, "; %.1f %% of the measured ideal", *r.PctOfMeasuredIdeal)
		}
		fmt.Fprintf(w, ")\n")
	} else {
		fmt.Fprintf(w, "  throughput      %.0f jobs/s in %.2f s (no-op handler: no ideal rate)\n", r.JobsPerS, r.Seconds)
	}
	fmt.Fprintf(w, "  last handler    returned at %.3f s; every Done written at %.3f s\n", r.HandlersSeconds, r.Seconds)
	fmt.Fprintf(w, "  wait            p50 %.1f ms  p99 %.1f ms  max %.1f ms\n", r.WaitP50MS, r.WaitP99MS, r.WaitMaxMS)
	fmt.Fprintf(w, "  retried         %.2f %%  (%d handler runs, failed %d)\n", r.RetriedPct, r.Runs, r.Failed)
	fmt.Fprintf(w, "  memory          peak RSS %.1f MB during the drain, %.1f MB high-water\n",
		float64(r.DrainPeakRSSBytes)/(1<<20), float64(r.MaxRSSBytes)/(1<<20))
}

func printLatency(w io.Writer, r LatencyResult) {
	settings := "default settings"
	if !r.DefaultSettings {
		settings = fmt.Sprintf("default settings but TaskCheckInterval %g ms", r.TaskCheckIntervalMS)
	}
	fmt.Fprintf(w, "asynq bench --latency: %d samples, idle queue %s, %s (concurrency %d)\n",
		r.Samples, r.Queue, settings, r.Concurrency)
	printRedis(w, r.Redis, r.AsynqVersion, r.TaskCheckIntervalMS)
	fmt.Fprintf(w, "  enqueue → handler start   p50 %.2f ms  p99 %.2f ms  max %.2f ms  mean %.2f ms\n",
		r.LatencyP50MS, r.LatencyP99MS, r.LatencyMaxMS, r.LatencyMeanMS)
	fmt.Fprintf(w, "  enqueue call alone        p50 %.2f ms  p99 %.2f ms\n", r.EnqueueP50MS, r.EnqueueP99MS)
}
