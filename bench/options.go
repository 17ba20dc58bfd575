package bench

import (
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/skiplock/skiplock/internal/migrations"
)

// Defaults of the articles' harness: seed 100k jobs, 32 workers, batch 50,
// a handler that sleeps 2–5 ms.
const (
	DefaultJobs    = 100_000
	DefaultWorkers = 32
	DefaultBatch   = 50
	DefaultHandler = "sleep:2ms-5ms"
	DefaultSamples = 1000

	// MaxJobs bounds Options.Jobs.
	MaxJobs = 100_000_000
	// MaxSleep bounds the handler's sleep.
	MaxSleep = time.Minute
)

// OptionError names the option (as a lower-case flag name: "jobs",
// "workers", "batch", "handler", "schema", "samples") that is invalid.
type OptionError struct {
	Option  string
	Message string
}

func (e *OptionError) Error() string { return e.Option + ": " + e.Message }

func optErr(opt, format string, args ...any) error {
	return &OptionError{Option: opt, Message: fmt.Sprintf(format, args...)}
}

// Handler is a parsed Options.Handler: a no-op, or a sleep drawn uniformly
// from [Min, Max].
type Handler struct {
	Noop bool
	// Tx (with Noop) completes each job with CompleteTx in a transaction of
	// its own, as a handler doing exactly-once database work would, instead
	// of returning nil for the batched completer.
	Tx bool
	// Steps runs that many checkpointed steps (skiplock.Step) in each job:
	// the cost of durable steps. With Noop they return at once; otherwise
	// each sleeps StepSleep (Min and Max are their sum, for the ideal rate).
	Steps     int
	StepSleep time.Duration
	Min, Max  time.Duration
}

// Mean is the handler's nominal mean duration (0 for a no-op).
func (h Handler) Mean() time.Duration { return (h.Min + h.Max) / 2 }

// String renders h in the syntax ParseHandler accepts.
func (h Handler) String() string {
	switch {
	case h.Noop && h.Steps > 0:
		return "steps:" + strconv.Itoa(h.Steps)
	case h.Steps > 0:
		return "steps:" + strconv.Itoa(h.Steps) + ":" + h.StepSleep.String()
	case h.Noop && h.Tx:
		return "completetx"
	case h.Noop:
		return "noop"
	case h.Min == h.Max:
		return "sleep:" + h.Min.String()
	default:
		return "sleep:" + h.Min.String() + "-" + h.Max.String()
	}
}

// ParseHandler parses "noop", "sleep:D" or "sleep:MIN-MAX" (Go durations,
// e.g. "sleep:2ms-5ms").
func ParseHandler(s string) (Handler, error) {
	s = strings.TrimSpace(s)
	if s == "noop" {
		return Handler{Noop: true}, nil
	}
	if s == "completetx" {
		return Handler{Noop: true, Tx: true}, nil
	}
	if spec, ok := strings.CutPrefix(s, "steps:"); ok {
		n, each, slept := strings.Cut(spec, ":")
		k, err := strconv.Atoi(n)
		if err != nil || k < 1 || k > 100 {
			return Handler{}, optErr("handler", "steps must be between 1 and 100, got %q", n)
		}
		if !slept {
			return Handler{Noop: true, Steps: k}, nil
		}
		d, err := time.ParseDuration(strings.TrimSpace(each))
		switch {
		case err != nil:
			return Handler{}, optErr("handler", "bad step duration %q", each)
		case d <= 0:
			return Handler{}, optErr("handler", "a step's sleep must be positive, got %s", d)
		case time.Duration(k)*d > MaxSleep:
			return Handler{}, optErr("handler", "steps must sleep at most %s in all, got %s", MaxSleep, time.Duration(k)*d)
		}
		return Handler{Steps: k, StepSleep: d, Min: time.Duration(k) * d, Max: time.Duration(k) * d}, nil
	}
	spec, ok := strings.CutPrefix(s, "sleep:")
	if !ok {
		return Handler{}, optErr("handler", `must be "noop", "completetx", "steps:N[:D]" or "sleep:MIN-MAX" (e.g. sleep:2ms-5ms), got %q`, s)
	}
	lo, hi, ranged := strings.Cut(spec, "-")
	if !ranged {
		hi = lo
	}
	dlo, err := time.ParseDuration(strings.TrimSpace(lo))
	if err != nil {
		return Handler{}, optErr("handler", "bad sleep duration %q", lo)
	}
	dhi, err := time.ParseDuration(strings.TrimSpace(hi))
	if err != nil {
		return Handler{}, optErr("handler", "bad sleep duration %q", hi)
	}
	switch {
	case dlo <= 0:
		return Handler{}, optErr("handler", "sleep must be positive, got %s", dlo)
	case dhi < dlo:
		return Handler{}, optErr("handler", "sleep range %s-%s is empty (MIN > MAX)", dlo, dhi)
	case dhi > MaxSleep:
		return Handler{}, optErr("handler", "sleep must be at most %s, got %s", MaxSleep, dhi)
	}
	return Handler{Min: dlo, Max: dhi}, nil
}

// Options configures Run. Zero values take the harness defaults.
type Options struct {
	// Jobs is how many jobs are seeded and drained. Default 100,000.
	Jobs int
	// Workers is the worker pool's concurrency. Default 32.
	Workers int
	// Batch is the pool's BatchSize: a claim's batch (five in one claim
	// while the pool is bound by its claims). Default 50.
	Batch int
	// Handler is "noop" or "sleep:MIN-MAX" (uniform random). Default
	// "sleep:2ms-5ms".
	Handler string
	// Schema holds skiplock's tables (already migrated). Default "skiplock".
	Schema string
	// Progress receives a progress line every second; nil discards them.
	Progress io.Writer
	// DeleteCompleted runs the drain with Config.DeleteCompleted: finished
	// jobs are deleted instead of kept in the jobs_done history (the
	// default), to measure what the history costs.
	DeleteCompleted bool
	// Logger receives the client's logs; default warnings and errors as
	// text on Progress.
	Logger *slog.Logger
	// CPUProfile, when set, receives a pprof CPU profile of the drain phase
	// (seeding excluded).
	CPUProfile io.Writer
	// ListenURL is passed to the client's Config.ListenURL: a direct
	// connection for LISTEN when the pool goes through a pooler.
	ListenURL string
	// Tenants spreads the seeded jobs round-robin over this many tenants
	// (0: no tenant); Burst seeds that many jobs of one more tenant first
	// ("a-burst", ahead in claim order), as in the carrier replay; TenantCap
	// runs the pool with that cap (round-robin fair share). Figures of
	// issue 18: claim p50/p99 and jobs/s with fairness on and off.
	Tenants, Burst, TenantCap int
	// Limit, when set, puts a concurrency limit of this many running jobs on
	// the bench queue for the drain (named after the queue, removed after):
	// with a limit above Workers + Batch it never binds, and the drain
	// measures what the limit machinery costs (issue 18).
	Limit int
	// Reference, when set, runs the plain-SQL reference (RunReference)
	// for this long at 10 and then at 50 jobs a statement just before the
	// run's seed, and Result.Reference gives the drain's rate as a ratio to
	// each: the figure issue 40 judges the drain by, as it takes out the
	// machine's drift from one day to the next. Between 1s and MaxReference; 0 runs
	// none.
	Reference time.Duration
}

func (o Options) withDefaults() Options {
	if o.Jobs == 0 {
		o.Jobs = DefaultJobs
	}
	if o.Workers == 0 {
		o.Workers = DefaultWorkers
	}
	if o.Batch == 0 {
		o.Batch = DefaultBatch
	}
	if o.Handler == "" {
		o.Handler = DefaultHandler
	}
	if o.Schema == "" {
		o.Schema = "skiplock"
	}
	return o
}

// Validate checks o (after defaults) and returns an *OptionError naming the
// first invalid option.
func (o Options) Validate() error {
	o = o.withDefaults()
	_, err := o.validate()
	return err
}

func (o Options) validate() (Handler, error) {
	switch {
	case o.Jobs < 1 || o.Jobs > MaxJobs:
		return Handler{}, optErr("jobs", "must be between 1 and %d, got %d", MaxJobs, o.Jobs)
	case o.Workers < 1 || o.Workers > 10000:
		return Handler{}, optErr("workers", "must be between 1 and 10000, got %d", o.Workers)
	case o.Batch < 1 || o.Batch > 1000:
		return Handler{}, optErr("batch", "must be between 1 and 1000, got %d", o.Batch)
	case o.Tenants < 0 || o.Tenants > 10_000_000:
		return Handler{}, optErr("tenants", "must be between 0 and 10000000, got %d", o.Tenants)
	case o.Burst < 0 || o.Burst > MaxJobs:
		return Handler{}, optErr("burst", "must be between 0 and %d, got %d", MaxJobs, o.Burst)
	case o.TenantCap < 0 || o.TenantCap > 1000:
		return Handler{}, optErr("tenant-cap", "must be between 0 and 1000, got %d", o.TenantCap)
	case o.Limit < 0 || o.Limit > 1_000_000:
		return Handler{}, optErr("limit", "must be between 0 and 1000000, got %d", o.Limit)
	}
	if o.Reference != 0 {
		if err := checkReference(o.Reference); err != nil {
			return Handler{}, err
		}
	}
	if err := validateSchema(o.Schema); err != nil {
		return Handler{}, err
	}
	return ParseHandler(o.Handler)
}

func validateSchema(s string) error {
	if err := migrations.ValidateSchema(s); err != nil {
		return optErr("schema", "%s", strings.TrimPrefix(err.Error(), "schema: "))
	}
	return nil
}

// LatencyOptions configures RunLatency.
type LatencyOptions struct {
	// Samples is how many jobs are timed (after a short warm-up). Default 1000.
	Samples int
	// Schema holds skiplock's tables (already migrated). Default "skiplock".
	Schema string
	// Progress receives a progress line every second; nil discards them.
	Progress io.Writer
	// Logger receives the client's logs; default warnings and errors as
	// text on Progress.
	Logger *slog.Logger
	// ListenURL is passed to the client's Config.ListenURL: a direct
	// connection for LISTEN when the pool goes through a pooler.
	ListenURL string
}

func (o LatencyOptions) withDefaults() LatencyOptions {
	if o.Samples == 0 {
		o.Samples = DefaultSamples
	}
	if o.Schema == "" {
		o.Schema = "skiplock"
	}
	return o
}

// Validate checks o (after defaults) and returns an *OptionError naming the
// first invalid option.
func (o LatencyOptions) Validate() error {
	o = o.withDefaults()
	if o.Samples < 1 || o.Samples > 1_000_000 {
		return optErr("samples", "must be between 1 and 1000000, got %d", o.Samples)
	}
	return validateSchema(o.Schema)
}
