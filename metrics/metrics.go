// Package metrics exports skiplock's health as Prometheus metrics.
//
// The collector reads the SQL health pack (the views of migration 002) when
// Prometheus scrapes it, so any process with a connection pool can serve
// the queue's metrics, whether or not it runs workers. Reads are bounded by
// a short timeout and cached for about a second, so concurrent scrapes (two
// Prometheus replicas, a dashboard) cost one round of queries.
//
// Two kinds of metrics, from two kinds of collector, so that sum() over
// every scrape of a fleet is right:
//
//   - fleet metrics (NewCollector): what the database says about the whole
//     queue (backlog, lag, dead letters, vacuum state, workers, limits), the
//     same from whichever process reads them. Serve them from exactly one
//     place: skiplock serve's /metrics, skiplock work --fleet-metrics on one
//     process, or Handler in one service of yours.
//   - process metrics (NewClientCollector, names starting with
//     skiplock_process_): what this process did (claims, handler runs and
//     outcomes by queue and kind, their durations), served by every worker
//     (ProcessHandler); sum them over the fleet.
//
// NewReplicaCollector exports a standby's state. Every metric (its name
// starting with skiplock_), with its type, labels and the collector that
// exports it, is in one table: docs/reference/metrics.md in the repository,
// which a test keeps equal to what these collectors describe. Labels carry
// queue names, kinds, states, outcomes and limit names only (a process
// keeps at most skiplock.MaxKindSeries kinds apart), never job ids, worker
// ids or payload values, plus the database's name under
// HandlerForDatabases.
package metrics

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/skiplock/skiplock/internal/health"
)

// Collector defaults.
const (
	// DefaultTimeout bounds one read of the health views.
	DefaultTimeout = 3 * time.Second
	// DefaultCacheFor is how long one read answers further scrapes.
	DefaultCacheFor = time.Second
)

// NewCollector returns a Prometheus collector over the health views of the
// skiplock installation in schema (default "skiplock" when empty), read
// through pool. Register it with your own registry, or use Handler. A read
// that fails (the database is down, or the schema is not migrated) sets
// skiplock_up to 0 and reports the error to the registry, which keeps
// serving the other collectors' metrics.
func NewCollector(pool *pgxpool.Pool, schema string) prometheus.Collector {
	if schema == "" {
		schema = "skiplock"
	}
	return newCollector(pool, schema, DefaultTimeout, DefaultCacheFor)
}

// Handler serves the skiplock collector together with the Go runtime and
// process collectors (and any extra ones, such as NewClientCollector in a
// worker process) from a private registry, in the Prometheus exposition
// format: mount it at /metrics. A failed read of the health views is
// reported in skiplock_up and the other metrics are still served.
func Handler(pool *pgxpool.Pool, schema string, extra ...prometheus.Collector) http.Handler {
	reg := registry(pool, schema, extra...)
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, Registry: reg})
}

// ProcessHandler serves a worker process's own metrics: extra (such as
// NewClientCollector) with the Go runtime and process collectors, from a
// private registry, without the fleet metrics of NewCollector. Every worker
// can serve it: summed over the fleet, its counters are the fleet's.
func ProcessHandler(extra ...prometheus.Collector) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(extra...)
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, Registry: reg})
}

// registry is what Handler serves: the skiplock collector, the Go runtime
// and process collectors, and extra.
func registry(pool *pgxpool.Pool, schema string, extra ...prometheus.Collector) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		NewCollector(pool, schema),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	reg.MustRegister(extra...)
	return reg
}

// Queue states of skiplock_queue_jobs.
const (
	stateReady     = "ready"
	stateScheduled = "scheduled"
	stateRunning   = "running"
	stateDead      = "dead"
)

type descs struct {
	up, queueJobs, queueLag, queuePaused, unhandled                 *prometheus.Desc
	dead, dead24h, deadPrev24h                                      *prometheus.Desc
	liveTuples, deadTuples, avThreshold, lastAutovacuum, xmin       *prometheus.Desc
	workers, collectErr                                             *prometheus.Desc
	limitConcurrency, limitRate, limitUsed, limitMaxUsed, limitFull *prometheus.Desc
}

func newDescs() descs {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("skiplock_"+name, help, labels, nil)
	}
	return descs{
		up:               d("up", "1 when the last read of skiplock's health views succeeded, else 0."),
		queueJobs:        d("queue_jobs", "Jobs per queue and state: ready (due now), scheduled (due later), running, dead (dead letters).", "queue", "state"),
		queueLag:         d("queue_oldest_ready_age_seconds", "Queue lag: how long the queue's oldest due job has waited (0 when none is due).", "queue"),
		queuePaused:      d("queue_paused", "1 when the queue is paused.", "queue"),
		unhandled:        d("unhandled_ready_jobs", "Due ready jobs whose kind no live worker of the queue handles: they wait forever (a mistyped kind, or a handler not deployed). Sampled up to 10,000 per queue.", "queue", "kind"),
		dead:             d("dead_letters", "Dead letters kept (the dead-letter table's size)."),
		dead24h:          d("dead_letters_last_24h", "Jobs that moved to the dead-letter table in the last 24 hours."),
		deadPrev24h:      d("dead_letters_previous_24h", "Jobs that moved to the dead-letter table in the 24 hours before the last 24."),
		liveTuples:       d("jobs_table_live_tuples", "Live tuples in the hot jobs table (pg_stat_user_tables.n_live_tup)."),
		deadTuples:       d("jobs_table_dead_tuples", "Dead tuples in the hot jobs table (pg_stat_user_tables.n_dead_tup): vacuum debt."),
		avThreshold:      d("jobs_table_autovacuum_threshold_tuples", "Dead tuples at which autovacuum should start on the hot jobs table."),
		lastAutovacuum:   d("last_autovacuum_age_seconds", "Seconds since autovacuum last finished on the hot jobs table (absent when it never ran since statistics were reset)."),
		xmin:             d("xmin_horizon_age_seconds", "Age of the oldest transaction of this database holding back the xmin horizon (0 when none)."),
		workers:          d("workers", "Worker processes in the workers table by state: live, stale (not stopped, no beat within 5m), stopped.", "state"),
		collectErr:       d("collector_error", "Never exported: carries a failed read's error to the registry."),
		limitConcurrency: d("limit_concurrency", "A concurrency limit's most running jobs (per partition value when it has a partition).", "limit"),
		limitRate:        d("limit_rate_per_second", "A rate limit's most job starts per second, averaged over its window (per partition value when it has a partition).", "limit"),
		limitUsed:        d("limit_used", "What a limit counts over all its partition values: running jobs (concurrency limit) or starts within its window (rate limit).", "limit"),
		limitMaxUsed:     d("limit_max_used", "What a limit counts in its fullest partition value (of all, without a partition).", "limit"),
		limitFull:        d("limit_values_at_limit", "Partition values of a concurrency limit at the limit (0 or 1 without a partition): their ready jobs wait.", "limit"),
	}
}

// collector reads the health views on scrape and caches the result.
type collector struct {
	pool     *pgxpool.Pool
	schema   string
	timeout  time.Duration
	cacheFor time.Duration
	d        descs

	// mu guards cached and readAt, and serializes reads: a scrape that
	// arrives during a read waits for it and shares its result.
	mu     sync.Mutex
	cached []prometheus.Metric
	readAt time.Time
}

func newCollector(pool *pgxpool.Pool, schema string, timeout, cacheFor time.Duration) *collector {
	return &collector{pool: pool, schema: schema, timeout: timeout, cacheFor: cacheFor, d: newDescs()}
}

// Describe sends every metric's descriptor.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.d.up, c.d.queueJobs, c.d.queueLag, c.d.queuePaused, c.d.unhandled, c.d.dead, c.d.dead24h, c.d.deadPrev24h,
		c.d.liveTuples, c.d.deadTuples, c.d.avThreshold, c.d.lastAutovacuum, c.d.xmin,
		c.d.workers, c.d.collectErr,
		c.d.limitConcurrency, c.d.limitRate, c.d.limitUsed, c.d.limitMaxUsed, c.d.limitFull,
	} {
		ch <- d
	}
}

// Collect sends the metrics of the last read, reading again when it is
// older than the cache period.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	if c.cached == nil || time.Since(c.readAt) >= c.cacheFor {
		c.cached = c.read()
		c.readAt = time.Now()
	}
	ms := c.cached
	c.mu.Unlock()
	for _, m := range ms {
		ch <- m
	}
}

// read queries the health views once and builds the metrics. A section that
// fails is left out; the error is reported and skiplock_up is 0.
func (c *collector) read() []prometheus.Metric {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	var ms []prometheus.Metric
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ms = append(ms, prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...))
	}
	var firstErr error
	fail := func(err error) {
		if firstErr == nil {
			firstErr = err
		}
	}

	if stats, err := health.QueueStats(ctx, c.pool, c.schema); err != nil {
		fail(err)
	} else {
		for _, s := range stats {
			gauge(c.d.queueJobs, float64(s.Ready), s.Queue, stateReady)
			gauge(c.d.queueJobs, float64(s.Scheduled), s.Queue, stateScheduled)
			gauge(c.d.queueJobs, float64(s.Running), s.Queue, stateRunning)
			gauge(c.d.queueJobs, float64(s.Dead), s.Queue, stateDead)
			gauge(c.d.queueLag, s.OldestReadyAgeSeconds, s.Queue)
			gauge(c.d.queuePaused, boolFloat(s.Paused), s.Queue)
		}
	}
	if us, err := health.UnhandledKinds(ctx, c.pool, c.schema); err != nil {
		fail(err)
	} else {
		for _, u := range us {
			gauge(c.d.unhandled, float64(u.Ready), u.Queue, u.Kind)
		}
	}
	if size, err := health.DeadLetterSizeOf(ctx, c.pool, c.schema); err != nil {
		fail(err)
	} else {
		gauge(c.d.dead, float64(size.Total))
		gauge(c.d.dead24h, float64(size.Last24h))
		gauge(c.d.deadPrev24h, float64(size.Prev24h))
	}
	if v, err := health.Vacuum(ctx, c.pool, c.schema); err != nil {
		fail(err)
	} else {
		gauge(c.d.liveTuples, float64(v.LiveTuples))
		gauge(c.d.deadTuples, float64(v.DeadTuples))
		gauge(c.d.avThreshold, v.AutovacuumThreshold)
		if v.LastAutovacuum != nil {
			gauge(c.d.lastAutovacuum, max(time.Since(*v.LastAutovacuum).Seconds(), 0))
		}
		gauge(c.d.xmin, v.OldestXminAgeSeconds)
	}
	if t, err := health.WorkerTotalsOf(ctx, c.pool, c.schema); err != nil {
		fail(err)
	} else {
		gauge(c.d.workers, float64(t.Live), "live")
		gauge(c.d.workers, float64(t.Stale), "stale")
		gauge(c.d.workers, float64(t.Stopped), "stopped")
	}
	if ls, err := health.Limits(ctx, c.pool, c.schema, false); err != nil {
		fail(err)
	} else {
		for _, l := range ls {
			if l.Rate > 0 {
				gauge(c.d.limitRate, float64(l.Rate)/l.Per.Seconds(), l.Name)
			} else {
				gauge(c.d.limitConcurrency, float64(l.Concurrency), l.Name)
			}
			gauge(c.d.limitUsed, float64(l.Used), l.Name)
			gauge(c.d.limitMaxUsed, float64(l.MaxUsed), l.Name)
			gauge(c.d.limitFull, float64(l.FullValues), l.Name)
		}
	}
	if firstErr != nil {
		gauge(c.d.up, 0)
		ms = append(ms, prometheus.NewInvalidMetric(c.d.collectErr, firstErr))
	} else {
		gauge(c.d.up, 1)
	}
	return ms
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
