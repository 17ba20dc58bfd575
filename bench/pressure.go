package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/bench/measure"
	"github.com/skiplock/skiplock/internal/health"
	"github.com/skiplock/skiplock/internal/store"
)

// The pressure suite (`skiplock bench --pressure`) measures the queue under
// the production pathologies that pin PostgreSQL's xmin horizon or overload
// it, at a fixed offered rate: a producer enqueues Rate jobs/s through
// EnqueueMany (open loop: it never waits for the workers), one client with
// Workers workers runs a handler that sleeps HandlerTime, and each scenario
// goes through four phases — warm-up, clean, stress, recovery. Only the
// stress phase differs between scenarios:
//
//   - clean: nothing (the control);
//   - idle-tx: one connection runs BEGIN; SELECT txid_current(); and stays
//     idle in transaction through the stress phase;
//   - rr-readers: Readers REPEATABLE READ transactions, held through the
//     stress phase, each scanning the jobs table every ReaderInterval;
//   - overload: the offered rate is OverloadFactor × Rate.
//
// Each phase reports completions against offers, pickup latency (enqueue →
// handler start), the backlog, the jobs table's dead tuples and size; the
// scenario reports how long the backlog took to drain once the stress ended
// and whether every job offered finished.

// Pressure scenarios, in the order "all" runs them.
const (
	ScenarioClean     = "clean"
	ScenarioIdleTx    = "idle-tx"
	ScenarioRRReaders = "rr-readers"
	ScenarioOverload  = "overload"
	ScenarioAll       = "all"
)

// Scenarios lists the pressure scenarios "all" runs, in order.
var Scenarios = []string{ScenarioClean, ScenarioIdleTx, ScenarioRRReaders, ScenarioOverload}

// Pressure defaults: the public pressure harness's shape (issue 15).
const (
	DefaultPressureRate     = 2000
	DefaultPayloadBytes     = 256
	DefaultPressureHandler  = time.Millisecond
	DefaultWarmup           = 30 * time.Second
	DefaultCleanPhase       = 60 * time.Second
	DefaultStressPhase      = 120 * time.Second
	DefaultRecoveryPhase    = 90 * time.Second
	DefaultOverloadFactor   = 1.5
	DefaultReaders          = 4
	DefaultReaderInterval   = 100 * time.Millisecond
	DefaultPressureDrainCap = 5 * time.Minute

	// MaxPressureRate bounds PressureOptions.Rate (jobs/s).
	MaxPressureRate = 1_000_000
	// MinPayloadBytes is the smallest payload that holds the enqueue time.
	MinPayloadBytes = 40
	// MaxPayloadBytes bounds PressureOptions.PayloadBytes.
	MaxPayloadBytes = 1 << 20
)

// PressureOptions configures RunPressure. Zero values take the defaults.
type PressureOptions struct {
	// Scenario is clean, idle-tx, rr-readers, overload or all. Default all.
	Scenario string
	// Rate is the offered load in jobs/s during warm-up, clean, stress
	// (except overload) and recovery. Default 2,000.
	Rate int
	// PayloadBytes is each job's JSON payload size. Default 256.
	PayloadBytes int
	// Workers is the worker pool's concurrency. Default 32.
	Workers int
	// Batch is the pool's BatchSize: a claim's batch (five in one claim
	// while the pool is bound by its claims). Default 50.
	Batch int
	// HandlerTime is how long the handler sleeps. Default 1 ms.
	HandlerTime time.Duration
	// Warmup, Clean, Stress and Recovery are the phases' durations.
	// Defaults 30 s, 60 s, 120 s, 90 s; Clean or Recovery may be
	// negative to skip the phase.
	Warmup, Clean, Stress, Recovery time.Duration
	// PinDuration, when set, is how long the idle-tx and rr-readers
	// stressors hold the horizon; their stress phase lasts that long (the
	// 10-minute pin: 10m). Zero: the Stress duration.
	PinDuration time.Duration
	// OverloadFactor multiplies Rate during the overload scenario's stress
	// phase. Default 1.5.
	OverloadFactor float64
	// Readers and ReaderInterval shape the rr-readers stressor. Defaults 4
	// and 100 ms.
	Readers        int
	ReaderInterval time.Duration
	// DrainCap bounds the wait, after recovery, for every offered job to
	// finish. Default 5 minutes.
	DrainCap time.Duration
	// DeleteCompleted runs the client with Config.DeleteCompleted.
	DeleteCompleted bool
	// Tenants spreads the offered jobs round-robin over this many tenants
	// (0: no tenant); TenantCap runs the pool with that cap (round-robin
	// fair share; 0: none): the pressure on a tenant-capped pool.
	Tenants, TenantCap int
	// Schema holds skiplock's tables (already migrated). Default "skiplock".
	Schema string
	// Progress receives a progress line every second; nil discards them.
	Progress io.Writer
	// Timeline, when set, receives one JSON object per second and scenario
	// (a TimelinePoint per line).
	Timeline io.Writer
	// Logger receives the client's logs; default warnings and errors as
	// text on Progress.
	Logger *slog.Logger
	// ListenURL is passed to the client's Config.ListenURL.
	ListenURL string
}

func (o PressureOptions) withDefaults() PressureOptions {
	if o.Scenario == "" {
		o.Scenario = ScenarioAll
	}
	if o.Rate == 0 {
		o.Rate = DefaultPressureRate
	}
	if o.PayloadBytes == 0 {
		o.PayloadBytes = DefaultPayloadBytes
	}
	if o.Workers == 0 {
		o.Workers = DefaultWorkers
	}
	if o.Batch == 0 {
		o.Batch = DefaultBatch
	}
	if o.HandlerTime == 0 {
		o.HandlerTime = DefaultPressureHandler
	}
	if o.Warmup == 0 {
		o.Warmup = DefaultWarmup
	}
	if o.Clean == 0 {
		o.Clean = DefaultCleanPhase
	}
	if o.Stress == 0 {
		o.Stress = DefaultStressPhase
	}
	if o.Recovery == 0 {
		o.Recovery = DefaultRecoveryPhase
	}
	if o.OverloadFactor == 0 {
		o.OverloadFactor = DefaultOverloadFactor
	}
	if o.Readers == 0 {
		o.Readers = DefaultReaders
	}
	if o.ReaderInterval == 0 {
		o.ReaderInterval = DefaultReaderInterval
	}
	if o.DrainCap == 0 {
		o.DrainCap = DefaultPressureDrainCap
	}
	if o.Schema == "" {
		o.Schema = "skiplock"
	}
	return o
}

// Validate checks o (after defaults) and returns an *OptionError naming the
// first invalid option (as its flag name without the "pressure-" prefix
// where the CLI has one: "pressure", "rate", "payload-bytes", …).
func (o PressureOptions) Validate() error {
	o = o.withDefaults()
	_, err := o.scenarios()
	if err != nil {
		return err
	}
	switch {
	case o.Rate < 1 || o.Rate > MaxPressureRate:
		return optErr("rate", "must be between 1 and %d jobs/s, got %d", MaxPressureRate, o.Rate)
	case o.PayloadBytes < MinPayloadBytes || o.PayloadBytes > MaxPayloadBytes:
		return optErr("payload-bytes", "must be between %d and %d, got %d", MinPayloadBytes, MaxPayloadBytes, o.PayloadBytes)
	case o.Workers < 1 || o.Workers > 10000:
		return optErr("workers", "must be between 1 and 10000, got %d", o.Workers)
	case o.Batch < 1 || o.Batch > 1000:
		return optErr("batch", "must be between 1 and 1000, got %d", o.Batch)
	case o.HandlerTime < 0 || o.HandlerTime > MaxSleep:
		return optErr("handler-time", "must be between 0 and %s, got %s", MaxSleep, o.HandlerTime)
	case o.Warmup < 0:
		return optErr("warmup", "must not be negative, got %s", o.Warmup)
	case o.Stress < 0:
		return optErr("stress", "must not be negative, got %s", o.Stress)
	case o.PinDuration < 0:
		return optErr("pin-duration", "must not be negative, got %s", o.PinDuration)
	case o.OverloadFactor <= 0 || o.OverloadFactor > 100 || math.IsNaN(o.OverloadFactor):
		return optErr("overload-factor", "must be above 0 and at most 100, got %g", o.OverloadFactor)
	case o.Readers < 1 || o.Readers > 64:
		return optErr("readers", "must be between 1 and 64, got %d", o.Readers)
	case o.ReaderInterval < 0:
		return optErr("reader-interval", "must not be negative, got %s", o.ReaderInterval)
	case o.DrainCap < 0:
		return optErr("drain-cap", "must not be negative, got %s", o.DrainCap)
	case o.Tenants < 0 || o.Tenants > 10_000_000:
		return optErr("tenants", "must be between 0 and 10000000, got %d", o.Tenants)
	case o.TenantCap < 0 || o.TenantCap > 1000:
		return optErr("tenant-cap", "must be between 0 and 1000, got %d", o.TenantCap)
	}
	return validateSchema(o.Schema)
}

func (o PressureOptions) scenarios() ([]string, error) {
	if o.Scenario == ScenarioAll {
		return Scenarios, nil
	}
	for _, s := range Scenarios {
		if o.Scenario == s {
			return []string{s}, nil
		}
	}
	return nil, optErr("pressure", "must be one of %s or %s, got %q", strings.Join(Scenarios, ", "), ScenarioAll, o.Scenario)
}

// PressureReport is what RunPressure measured.
type PressureReport struct {
	Rate           int     `json:"rate"`
	PayloadBytes   int     `json:"payload_bytes"`
	Workers        int     `json:"workers"`
	Batch          int     `json:"batch"`
	HandlerMS      float64 `json:"handler_ms"`
	OverloadFactor float64 `json:"overload_factor"`
	Readers        int     `json:"readers"`
	// Phases' planned durations in seconds.
	WarmupSeconds   float64 `json:"warmup_seconds"`
	CleanSeconds    float64 `json:"clean_seconds"`
	StressSeconds   float64 `json:"stress_seconds"`
	RecoverySeconds float64 `json:"recovery_seconds"`
	PinSeconds      float64 `json:"pin_seconds"`
	DeleteCompleted bool    `json:"delete_completed"`
	Tenants         int     `json:"tenants,omitempty"`
	TenantCap       int     `json:"tenant_cap,omitempty"`

	Scenarios []ScenarioResult `json:"scenarios"`
}

// ScenarioResult is one scenario's run.
type ScenarioResult struct {
	Scenario string        `json:"scenario"`
	Queue    string        `json:"queue"`
	Phases   []PhaseResult `json:"phases"`
	// DrainSeconds is how long after the stress phase ended the backlog fell
	// back to DrainThreshold (the clean phase's backlog max); nil when it did
	// not within the recovery phase.
	DrainSeconds   *float64 `json:"drain_seconds"`
	DrainThreshold int64    `json:"drain_threshold"`
	// Offered counts every job enqueued (committed); Completed and
	// DeadLettered their outcomes once the run and its drain ended; Lost is
	// Offered − Completed − DeadLettered (0 when nothing is lost).
	Offered      int64 `json:"offered"`
	Completed    int64 `json:"completed"`
	DeadLettered int64 `json:"dead_lettered"`
	Lost         int64 `json:"lost"`
	// TailSeconds is how long, after recovery, the last jobs took to finish.
	TailSeconds float64 `json:"tail_seconds"`
	// PinnedXid is the transaction id the idle-tx stressor held; ReaderScans
	// counts the rr-readers stressor's scans.
	PinnedXid   int64 `json:"pinned_xid,omitempty"`
	ReaderScans int64 `json:"reader_scans,omitempty"`
}

// PhaseResult is one phase of a scenario.
type PhaseResult struct {
	Phase   string  `json:"phase"`
	Seconds float64 `json:"seconds"`
	// TargetPerS is the rate the producer aimed at; OfferedPerS what it
	// enqueued (committed) during the phase.
	TargetPerS  float64 `json:"target_per_s"`
	Offered     int64   `json:"offered"`
	OfferedPerS float64 `json:"offered_per_s"`
	// Completed counts outcomes written during the phase (completions and
	// dead letters); PctOfOffered is 100 × CompletedPerS ÷ OfferedPerS.
	Completed     int64   `json:"completed"`
	CompletedPerS float64 `json:"completed_per_s"`
	PctOfOffered  float64 `json:"pct_of_offered"`
	// Pickup is handler start − the job's enqueue, over the jobs that
	// started during the phase.
	Pickups      int64   `json:"pickups"`
	PickupP50MS  float64 `json:"pickup_p50_ms"`
	PickupP99MS  float64 `json:"pickup_p99_ms"`
	PickupMaxMS  float64 `json:"pickup_max_ms"`
	BacklogMax   int64   `json:"backlog_max"`
	BacklogAtEnd int64   `json:"backlog_at_end"`
	// LongestStallSeconds is the longest time no outcome was written while
	// jobs were waiting (sampled every 100 ms).
	LongestStallSeconds float64 `json:"longest_stall_seconds"`
	// ClaimP99MaxMS is the highest claim p99 (over the last 1,024 claims)
	// sampled during the phase.
	ClaimP99MaxMS float64 `json:"claim_p99_max_ms"`
	// The jobs table, sampled once a second (server-wide statistics).
	DeadTuplesMax   int64 `json:"dead_tuples_max"`
	TableBytesMax   int64 `json:"table_bytes_max"`
	TotalBytesMax   int64 `json:"total_bytes_max"`
	Autovacuums     int64 `json:"autovacuums"`
	TableSamples    int64 `json:"table_samples"`
	StressorRunning bool  `json:"stressor_running"`
	// OtherXactMaxSeconds is the oldest transaction holding an xid on the
	// server that the suite did not start (another session's pin), sampled
	// once a second: above a few seconds, the phase was not what it says.
	OtherXactMaxSeconds float64 `json:"other_xact_max_seconds"`
}

// TimelinePoint is one line of the --pressure-timeline file: a second of one
// scenario.
type TimelinePoint struct {
	Scenario      string  `json:"scenario"`
	Phase         string  `json:"phase"`
	T             float64 `json:"t"`
	Offered       int64   `json:"offered"`
	Completed     int64   `json:"completed"`
	OfferedPerS   int64   `json:"offered_per_s"`
	CompletedPerS int64   `json:"completed_per_s"`
	Backlog       int64   `json:"backlog"`
	PickupP99MS   float64 `json:"pickup_p99_ms"`
	ClaimP99MS    float64 `json:"claim_p99_ms"`
	DeadTuples    int64   `json:"dead_tuples"`
	TableBytes    int64   `json:"table_bytes"`
	TotalBytes    int64   `json:"total_bytes"`
	OtherXactS    float64 `json:"other_xact_s"`
}

const pressureKind = "pressure"

// pressureArgs is the job's payload: the enqueue time (Unix nanoseconds, the
// producer's clock) and padding up to PayloadBytes.
type pressureArgs struct {
	T int64  `json:"t"`
	P string `json:"p"`
}

// phase is one phase's accumulators; the monitor and the handler write
// them concurrently.
type phase struct {
	name     string
	planned  time.Duration
	factor   float64 // offered rate = factor × Rate
	stressed bool

	start, end               time.Time
	offered0, offered1       int64
	done0, done1             int64
	av0, av1                 int64
	pickups                  measure.Hist
	backlogMax, backlogEnd   atomic.Int64
	stallMax                 atomic.Int64 // ns
	claimP99Max              atomic.Int64 // ns
	deadMax, heapMax, totMax atomic.Int64
	otherXactMax             atomic.Int64 // ms
	samples                  atomic.Int64
}

func maxInto(a *atomic.Int64, v int64) {
	for {
		m := a.Load()
		if v <= m || a.CompareAndSwap(m, v) {
			return
		}
	}
}

// RunPressure runs the chosen scenarios one after the other on pool's
// database, each on a queue of its own that it deletes afterwards, and
// returns their figures. ctx cancels the run.
func RunPressure(ctx context.Context, pool *pgxpool.Pool, o PressureOptions) (PressureReport, error) {
	o = o.withDefaults()
	if err := o.Validate(); err != nil {
		return PressureReport{}, err
	}
	scenarios, _ := o.scenarios()
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	// The phases, the sampler and the client's logger all write progress.
	o.Progress = &syncWriter{w: o.Progress}
	st := store.New(o.Schema)
	if err := checkSchema(ctx, pool, st); err != nil {
		return PressureReport{}, err
	}
	rep := PressureReport{Rate: o.Rate, PayloadBytes: o.PayloadBytes, Workers: o.Workers, Batch: o.Batch,
		HandlerMS: float64(o.HandlerTime) / 1e6, OverloadFactor: o.OverloadFactor, Readers: o.Readers,
		WarmupSeconds: o.Warmup.Seconds(), CleanSeconds: max(0, o.Clean.Seconds()), StressSeconds: o.Stress.Seconds(),
		RecoverySeconds: max(0, o.Recovery.Seconds()), PinSeconds: o.PinDuration.Seconds(), DeleteCompleted: o.DeleteCompleted,
		Tenants: o.Tenants, TenantCap: o.TenantCap}
	var tl *timeline
	if o.Timeline != nil {
		tl = &timeline{w: &syncWriter{w: o.Timeline}}
	}
	for _, s := range scenarios {
		res, err := runScenario(ctx, pool, st, o, s, tl)
		rep.Scenarios = append(rep.Scenarios, res)
		if err != nil {
			return rep, fmt.Errorf("bench: pressure %s: %w", s, err)
		}
	}
	return rep, nil
}

// syncWriter serializes writes to w.
type syncWriter struct {
	mu sync.Mutex // guards w
	w  io.Writer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

// timeline writes TimelinePoint lines.
type timeline struct{ w io.Writer }

func (t *timeline) write(p TimelinePoint) {
	if t == nil {
		return
	}
	b, _ := json.Marshal(p)
	_, _ = t.w.Write(append(b, '\n'))
}

func (o PressureOptions) phases(scenario string) []*phase {
	stress := o.Stress
	if o.PinDuration > 0 && (scenario == ScenarioIdleTx || scenario == ScenarioRRReaders) {
		stress = o.PinDuration
	}
	factor := 1.0
	if scenario == ScenarioOverload {
		factor = o.OverloadFactor
	}
	ps := []*phase{{name: "warmup", planned: o.Warmup, factor: 1}}
	if o.Clean > 0 {
		ps = append(ps, &phase{name: "clean", planned: o.Clean, factor: 1})
	}
	ps = append(ps, &phase{name: "stress", planned: stress, factor: factor, stressed: true})
	if o.Recovery > 0 {
		ps = append(ps, &phase{name: "recovery", planned: o.Recovery, factor: 1})
	}
	return ps
}

// scenarioRun is the shared state of one scenario's goroutines.
type scenarioRun struct {
	o        PressureOptions
	scenario string
	pool     *pgxpool.Pool
	c        *skiplock.Client
	start    time.Time

	offered   atomic.Int64
	drainedAt atomic.Int64 // Unix ns when the backlog first fell back to the clean level in recovery
	cur       atomic.Pointer[phase]
	second    atomic.Pointer[measure.Hist] // pickups of the current second (timeline)
	tenantSeq int64                        // the producer's: the next job's tenant (Tenants)
}

func (r *scenarioRun) finished() int64 {
	s := r.c.Stats()
	return s.Completed + s.DeadLettered
}

func runScenario(ctx context.Context, pool *pgxpool.Pool, st *store.Store, o PressureOptions, scenario string,
	tl *timeline) (ScenarioResult, error) {
	queue, workerID := names()
	res := ScenarioResult{Scenario: scenario, Queue: queue}
	bp, err := ownPool(ctx, pool, nil, int32(max(8, o.Workers/4+4)), queue)
	if err != nil {
		return res, err
	}
	defer bp.Close()
	c, err := skiplock.NewClient(bp, skiplock.Config{
		Schema: o.Schema, Logger: orQuiet(o.Logger, o.Progress), WorkerID: workerID, ShutdownTimeout: 30 * time.Second,
		DeleteCompleted: o.DeleteCompleted, ListenURL: o.ListenURL,
		Pools: []skiplock.WorkerPool{{Name: "pressure", Queues: []string{queue}, Concurrency: o.Workers, BatchSize: o.Batch,
			TenantCap: o.TenantCap}},
	})
	if err != nil {
		return res, err
	}
	r := &scenarioRun{o: o, scenario: scenario, pool: pool, c: c}
	r.second.Store(new(measure.Hist))
	err = skiplock.Handle(c, pressureKind, func(ctx context.Context, j *skiplock.Job[pressureArgs]) error {
		start := time.Now()
		wait := start.Sub(time.Unix(0, j.Args.T))
		if p := r.cur.Load(); p != nil {
			p.pickups.Add(wait)
		}
		r.second.Load().Add(wait)
		if o.HandlerTime > 0 {
			return measure.Sleep(ctx, start.Add(o.HandlerTime))
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	defer cleanup(pool, st, queue, workerID)

	phases := o.phases(scenario)
	r.cur.Store(phases[0])
	if err := c.Start(ctx); err != nil {
		return res, err
	}
	stopClient := func() error {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		return c.Stop(stopCtx)
	}
	runCtx, cancelRun := context.WithCancel(ctx)
	var wg sync.WaitGroup
	producerErr := make(chan error, 1)
	stopProducer := make(chan struct{})
	wg.Add(3)
	go func() { defer wg.Done(); producerErr <- r.produce(ctx, stopProducer, queue) }()
	go func() { defer wg.Done(); r.watchBacklog(runCtx) }()
	go func() { defer wg.Done(); r.sampleTable(runCtx, tl) }()
	var stopOnce sync.Once
	stopAll := func() {
		stopOnce.Do(func() { close(stopProducer) })
		cancelRun()
		wg.Wait()
	}

	fmt.Fprintf(o.Progress, "pressure %s: queue %s, %d jobs/s offered, %d workers\n", scenario, queue, o.Rate, o.Workers)
	r.start = time.Now()
	var stressEnd time.Time
	for i, p := range phases {
		p.start = time.Now()
		p.offered0, p.done0 = r.offered.Load(), r.finished()
		if s, err := health.JobsTable(ctx, pool, o.Schema); err == nil {
			p.av0 = s.Autovacuums
		}
		if i > 0 {
			r.cur.Store(p)
		}
		fmt.Fprintf(o.Progress, "pressure %s: %s phase (%s)\n", scenario, p.name, p.planned)
		var stop func() stressorResult
		if p.stressed {
			if stop, err = r.startStressor(runCtx); err != nil {
				stopAll()
				_ = stopClient()
				return res, err
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(p.start.Add(p.planned))):
		case err = <-producerErr:
			if err == nil {
				err = errors.New("producer stopped")
			}
		}
		if stop != nil {
			sr := stop()
			res.PinnedXid, res.ReaderScans = sr.xid, sr.scans
			if err == nil {
				err = sr.err
			}
			stressEnd = time.Now()
		}
		p.end = time.Now()
		p.offered1, p.done1 = r.offered.Load(), r.finished()
		p.backlogEnd.Store(p.offered1 - p.done1)
		maxInto(&p.backlogMax, p.offered1-p.done1)
		if s, err := health.JobsTable(ctx, pool, o.Schema); err == nil {
			p.av1 = s.Autovacuums
		}
		if err == nil {
			err = ctx.Err()
		}
		if err != nil {
			stopAll()
			_ = stopClient()
			res.Phases = phaseResults(o, phases[:i+1])
			return res, err
		}
	}
	// Stop offering, let the rest finish.
	stopAll()
	tailStart := time.Now()
	total := r.offered.Load()
	for r.finished() < total && time.Since(tailStart) < o.DrainCap && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	res.TailSeconds = time.Since(tailStart).Seconds()
	if err := stopClient(); err != nil {
		return res, err
	}
	s := c.Stats()
	res.Offered, res.Completed, res.DeadLettered = total, s.Completed, s.DeadLettered
	res.Lost = total - s.Completed - s.DeadLettered
	res.Phases = phaseResults(o, phases)
	res.DrainThreshold, res.DrainSeconds = drainTime(phases, stressEnd, r.drainedAt.Load())
	fmt.Fprintf(o.Progress, "pressure %s: done, %d offered, %d finished\n", scenario, total, s.Completed+s.DeadLettered)
	return res, ctx.Err()
}

func phaseResults(o PressureOptions, ps []*phase) []PhaseResult {
	out := make([]PhaseResult, 0, len(ps))
	for _, p := range ps {
		sec := p.end.Sub(p.start).Seconds()
		pr := PhaseResult{Phase: p.name, Seconds: sec, TargetPerS: p.factor * float64(o.Rate),
			Offered: p.offered1 - p.offered0, Completed: p.done1 - p.done0,
			Pickups: int64(p.pickups.Count()), PickupP50MS: p.pickups.QuantileMS(0.50),
			PickupP99MS: p.pickups.QuantileMS(0.99), PickupMaxMS: p.pickups.MaxMS(),
			BacklogMax: p.backlogMax.Load(), BacklogAtEnd: p.backlogEnd.Load(),
			LongestStallSeconds: time.Duration(p.stallMax.Load()).Seconds(),
			ClaimP99MaxMS:       float64(p.claimP99Max.Load()) / 1e6,
			DeadTuplesMax:       p.deadMax.Load(), TableBytesMax: p.heapMax.Load(), TotalBytesMax: p.totMax.Load(),
			Autovacuums: max(0, p.av1-p.av0), TableSamples: p.samples.Load(), StressorRunning: p.stressed,
			OtherXactMaxSeconds: float64(p.otherXactMax.Load()) / 1000}
		if sec > 0 {
			pr.OfferedPerS = float64(pr.Offered) / sec
			pr.CompletedPerS = float64(pr.Completed) / sec
		}
		if pr.Offered > 0 {
			pr.PctOfOffered = 100 * float64(pr.Completed) / float64(pr.Offered)
		}
		out = append(out, pr)
	}
	return out
}

// drainTime returns the clean phase's backlog max and how long after the
// stress ended the backlog first fell back to it (nil if it had not by the
// end of recovery; 0 if it never rose above it).
func drainTime(ps []*phase, stressEnd time.Time, drainedAt int64) (int64, *float64) {
	var threshold int64
	for _, p := range ps {
		if p.name == "clean" {
			threshold = p.backlogMax.Load()
		}
	}
	if threshold == 0 {
		threshold = ps[0].backlogMax.Load()
	}
	if stressEnd.IsZero() || drainedAt == 0 {
		return threshold, nil
	}
	d := max(0, time.Unix(0, drainedAt).Sub(stressEnd).Seconds())
	return threshold, &d
}

// produce enqueues at the current phase's rate until stop is closed: every
// 10 ms it enqueues what the schedule says is due (one EnqueueMany, at most
// 5,000 jobs each), so a slow enqueue is caught up, never skipped. stop is
// only looked at between enqueues, so an enqueue is never cut off after its
// commit and every committed job is counted.
func (r *scenarioRun) produce(ctx context.Context, stop <-chan struct{}, queue string) error {
	pad := strings.Repeat("x", max(0, r.o.PayloadBytes-len(`{"t":1700000000000000000,"p":""}`)))
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var due float64
	last := time.Now()
	ps := make([]skiplock.EnqueueParams, 0, 5000)
	for {
		select {
		case <-stop:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		now := time.Now()
		due += now.Sub(last).Seconds() * r.cur.Load().factor * float64(r.o.Rate)
		last = now
		for due >= 1 {
			select {
			case <-stop:
				return nil
			default:
			}
			n := min(int(due), 5000)
			payload := json.RawMessage(`{"t":` + strconv.FormatInt(time.Now().UnixNano(), 10) + `,"p":"` + pad + `"}`)
			ps = ps[:0]
			for range n {
				p := skiplock.EnqueueParams{Queue: queue, Kind: pressureKind, Payload: payload}
				if r.o.Tenants > 0 {
					p.Tenant = "t" + strconv.FormatInt(r.tenantSeq%int64(r.o.Tenants), 10)
					r.tenantSeq++
				}
				ps = append(ps, p)
			}
			// Counted before they are sent: once committed they may finish
			// before EnqueueMany returns, and completed must never read
			// above offered.
			r.offered.Add(int64(n))
			if _, err := r.c.EnqueueMany(ctx, ps); err != nil {
				r.offered.Add(-int64(n))
				return fmt.Errorf("enqueue: %w", err)
			}
			due -= float64(n)
		}
	}
}

// watchBacklog samples the backlog (offered − finished) every 100 ms into the
// current phase: its max, the longest stall, the claim p99, and the moment
// the backlog first returned to the clean level after the stress.
func (r *scenarioRun) watchBacklog(ctx context.Context) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var lastDone int64
	lastMove := time.Now()
	var cleanMax int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		p := r.cur.Load()
		s := r.c.Stats()
		done := s.Completed + s.DeadLettered
		backlog := r.offered.Load() - done
		now := time.Now()
		maxInto(&p.backlogMax, backlog)
		maxInto(&p.claimP99Max, int64(s.ClaimP99))
		if done != lastDone || backlog <= 0 {
			lastDone, lastMove = done, now
		} else {
			maxInto(&p.stallMax, int64(now.Sub(lastMove)))
		}
		switch p.name {
		case "clean":
			cleanMax = p.backlogMax.Load()
		case "warmup":
			if cleanMax == 0 {
				cleanMax = p.backlogMax.Load()
			}
		case "recovery":
			if r.drainedAt.Load() == 0 && backlog <= cleanMax {
				r.drainedAt.Store(now.UnixNano())
			}
		}
	}
}

// sampleTable reads the jobs table's statistics once a second into the
// current phase, writes a timeline line and a progress line.
func (r *scenarioRun) sampleTable(ctx context.Context, tl *timeline) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var prevOffered, prevDone int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		p := r.cur.Load()
		sec := r.second.Swap(new(measure.Hist))
		ts, err := health.JobsTable(ctx, r.pool, r.o.Schema)
		if err == nil {
			p.samples.Add(1)
			maxInto(&p.deadMax, ts.DeadTuples)
			maxInto(&p.heapMax, ts.HeapBytes)
			maxInto(&p.totMax, ts.TotalBytes)
			maxInto(&p.otherXactMax, int64(ts.OtherXactSeconds*1000))
		}
		s := r.c.Stats()
		offered, done := r.offered.Load(), s.Completed+s.DeadLettered
		pt := TimelinePoint{Scenario: r.scenario, Phase: p.name, T: time.Since(r.start).Seconds(),
			Offered: offered, Completed: done, OfferedPerS: offered - prevOffered, CompletedPerS: done - prevDone,
			Backlog: offered - done, PickupP99MS: sec.QuantileMS(0.99), ClaimP99MS: float64(s.ClaimP99) / 1e6,
			DeadTuples: ts.DeadTuples, TableBytes: ts.HeapBytes, TotalBytes: ts.TotalBytes, OtherXactS: ts.OtherXactSeconds}
		prevOffered, prevDone = offered, done
		tl.write(pt)
		fmt.Fprintf(r.o.Progress, "pressure %s %-8s t=%4.0fs  offered %5d/s  done %5d/s  backlog %7d  pickup p99 %8.1f ms  claim p99 %6.1f ms  dead %8d  table %4d MiB\n",
			r.scenario, p.name, pt.T, pt.OfferedPerS, pt.CompletedPerS, pt.Backlog, pt.PickupP99MS, pt.ClaimP99MS,
			pt.DeadTuples, pt.TableBytes>>20)
	}
}

type stressorResult struct {
	xid   int64
	scans int64
	err   error
}

// startStressor starts the scenario's stress and returns the function that
// ends it. Stressor connections are named skiplock-pressure-<scenario>, so
// doctor and pg_stat_activity show who pins the horizon.
func (r *scenarioRun) startStressor(ctx context.Context) (func() stressorResult, error) {
	switch r.scenario {
	case ScenarioIdleTx:
		conn, err := r.stressConn(ctx)
		if err != nil {
			return nil, err
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			_ = conn.Close(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("idle-tx stressor: %w", err)
		}
		xid, err := health.PinHorizon(ctx, tx, r.o.Schema)
		if err != nil {
			_ = conn.Close(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("idle-tx stressor: %w", err)
		}
		return func() stressorResult {
			c := context.WithoutCancel(ctx)
			err := tx.Rollback(c)
			_ = conn.Close(c)
			return stressorResult{xid: xid, err: err}
		}, nil
	case ScenarioRRReaders:
		rctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		var scans atomic.Int64
		errs := make(chan error, r.o.Readers)
		for range r.o.Readers {
			conn, err := r.stressConn(ctx)
			if err != nil {
				cancel()
				wg.Wait()
				return nil, err
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
				if err := r.read(rctx, conn, &scans); err != nil && rctx.Err() == nil {
					errs <- err
				}
			}()
		}
		return func() stressorResult {
			cancel()
			wg.Wait()
			close(errs)
			return stressorResult{scans: scans.Load(), err: <-errs}
		}, nil
	}
	return func() stressorResult { return stressorResult{} }, nil
}

// read holds one REPEATABLE READ transaction and scans the jobs table every
// ReaderInterval until ctx ends.
func (r *scenarioRun) read(ctx context.Context, conn *pgx.Conn, scans *atomic.Int64) error {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("rr-readers stressor: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	for {
		if _, err := health.ScanJobs(ctx, tx, r.o.Schema); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("rr-readers stressor: %w", err)
		}
		scans.Add(1)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(r.o.ReaderInterval):
		}
	}
}

func (r *scenarioRun) stressConn(ctx context.Context) (*pgx.Conn, error) {
	cfg := r.pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = "skiplock-pressure-" + r.scenario
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s stressor: connect: %w", r.scenario, err)
	}
	return conn, nil
}
