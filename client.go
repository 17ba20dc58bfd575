package skiplock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/migrations"
	"github.com/skiplock/skiplock/internal/notify"
	"github.com/skiplock/skiplock/internal/service"
	"github.com/skiplock/skiplock/internal/store"
	"github.com/skiplock/skiplock/internal/worker"
)

// Client enqueues jobs and, once started, runs their handlers. A Client that
// is never started is a pure producer.
type Client struct {
	pool  *pgxpool.Pool
	cfg   Config
	store *store.Store

	mu       sync.Mutex // guards handlers and fallback, and orders Start with Handle
	handlers map[string]*handlerEntry
	fallback *handlerEntry
	// runner is set by Start (under mu, which orders it with Handle);
	// read without mu by Stop, Stats and Enqueue's hand-off.
	runner   atomic.Pointer[worker.Runner]
	services []service.Service // maintenance: retention, partitions, scheduler, vacuum guard, priority aging

	runHook worker.RunHook // called around each handler run: the workflow engine (workflow.go)

	// listener is the process's one LISTEN connection to this database
	// (Config.ListenURL's when set), shared by the worker runtime (ready
	// jobs, cancellations) and the waiters (finished jobs): it connects
	// while either subscribes.
	listener *notify.Listener

	waitOnce sync.Once
	waiters  *waiters // Wait's awaited jobs and look-up loop (wait.go), made on first use
}

// NewClient returns a Client using pool, which the caller owns and closes
// after Stop. The pool should allow at least one connection per pool's
// claim loop plus the completer, heartbeat and reaper (and one LISTEN
// connection, which skiplock opens itself outside the pool).
func NewClient(pool *pgxpool.Pool, cfg Config) (*Client, error) {
	if pool == nil {
		return nil, invalidConfig("pool", "must not be nil")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	st := store.New(cfg.Schema)
	return &Client{pool: pool, cfg: cfg, store: st, handlers: map[string]*handlerEntry{},
		runHook: workflowHook(st, pool, cfg.WorkerID), listener: newListener(pool, cfg, st)}, nil
}

// newListener is the client's LISTEN connection: on Config.ListenURL when
// set (validated), else on the pool's server; through a pooler it finds
// out (DirectSession) and its subscribers poll.
func newListener(pool *pgxpool.Pool, cfg Config, st *store.Store) *notify.Listener {
	connCfg := pool.Config().ConnConfig
	if cfg.ListenURL != "" {
		if lc, err := pgx.ParseConfig(cfg.ListenURL); err == nil { // Config.validate parsed it
			connCfg = lc
		}
	}
	return notify.New(notify.Config{
		Connect: func(ctx context.Context) (*pgx.Conn, error) {
			cc := connCfg.Copy()
			cc.RuntimeParams["application_name"] = "skiplock-listener"
			return pgx.ConnectConfig(ctx, cc)
		},
		Direct: st.DirectSession,
		Logger: cfg.Logger,
	})
}

// Config returns the client's configuration with defaults filled in.
func (c *Client) Config() Config { return c.cfg }

// Pool returns the client's connection pool.
func (c *Client) Pool() *pgxpool.Pool { return c.pool }

// Start runs the worker pools and the maintenance services until Stop or
// StopAndCancel. It fails if no handler is registered.
//
// ctx bounds start-up only: the statements Start runs, and whether it
// starts at all (a ctx cancelled before Start returns makes it fail). Once
// Start has returned nil, the client runs whatever becomes of ctx, and
// stops only through Stop (which drains running jobs) or StopAndCancel
// (which cancels them). That is so the usual shutdown drains:
//
//	ctx, _ := signal.NotifyContext(ctx, syscall.SIGTERM)
//	client.Start(ctx)
//	<-ctx.Done()
//	client.Stop(context.Background()) // running jobs get ShutdownTimeout
//
// Handlers' contexts never derive from ctx. When Start fails it stops
// whatever it had started (worker pools, listener, maintenance) before it
// returns, so nothing keeps running, and Start may be called again.
func (c *Client) Start(ctx context.Context) error { return c.start(ctx) }

// start is Start; tests append services that fail after the real ones.
func (c *Client) start(ctx context.Context, extra ...service.Service) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runner.Load() != nil {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("skiplock: Start: %w", err)
	}
	if len(c.handlers) == 0 && c.fallback == nil {
		return errors.New("skiplock: Start: no handlers registered (use skiplock.Handle)")
	}
	var kinds []string
	if c.fallback == nil {
		for k := range c.handlers {
			kinds = append(kinds, k)
		}
		sort.Strings(kinds)
	}
	pools := make([]worker.PoolConfig, len(c.cfg.Pools))
	for i, p := range c.cfg.Pools {
		pk := p.Kinds
		if pk == nil {
			pk = kinds
		}
		pools[i] = worker.PoolConfig{Name: p.Name, Queues: p.Queues, Kinds: pk, Concurrency: p.Concurrency,
			BatchSize: p.BatchSize, TenantCap: p.TenantCap}
	}
	reaper := c.cfg.ReaperInterval
	if reaper < 0 {
		reaper = 0
	}
	if need := int32(len(pools) + 3); c.pool.Config().MaxConns < need {
		c.cfg.Logger.Warn("skiplock: the pool may be too small: each worker pool claims on its own connection, plus the completer, heartbeat and reaper",
			"max_conns", c.pool.Config().MaxConns, "recommended_min", need)
	}
	c.ensureHistoryPartitions(ctx)
	runner := worker.New(worker.Config{
		Pool: c.pool, Store: c.store, Logger: c.cfg.Logger, WorkerID: c.cfg.WorkerID, Pools: pools,
		Handler: c.runJob, Lease: c.cfg.LeaseDuration, HeartbeatInterval: c.cfg.HeartbeatInterval,
		PollInterval: c.cfg.PollInterval, ReaperInterval: reaper, Archive: c.cfg.keepCompleted(),
		PollOnly: c.cfg.PollOnly, ListenURLSet: c.cfg.ListenURL != "",
		PooledHint: pooledHint(c.pool.Config().ConnConfig.DefaultQueryExecMode),
		Listener:   c.listener,
	})
	services := append(c.retentionServices(), c.schedulerServices()...)
	services = append(services, c.vacuumServices()...)
	services = append(services, c.agingServices()...)
	services = append(services, extra...)
	started := 0
	err := runner.Start(ctx)
	for ; err == nil && started < len(services); started++ {
		err = services[started].Start(ctx)
	}
	if err == nil {
		err = ctx.Err() // cancelled while starting
	}
	if err != nil {
		// Stop what started, newest first, and the runner at once (it has
		// claimed nothing worth draining yet, and must not outlive Start).
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.ShutdownTimeout)
		defer cancel()
		for i := min(started, len(services)) - 1; i >= 0; i-- {
			_ = services[i].Stop(stopCtx)
		}
		_ = runner.StopAndCancel(stopCtx)
		return fmt.Errorf("skiplock: Start: %w", err)
	}
	c.services = services
	c.runner.Store(runner)
	return nil
}

// pooledHint is what a pooler detected at Start means for the pool's
// statement mode: pgx's default caches named prepared statements per
// connection, which a transaction-mode pooler without prepared-statement
// support (PgBouncer before 1.21, or max_prepared_statements = 0) breaks.
func pooledHint(mode pgx.QueryExecMode) string {
	switch mode {
	case pgx.QueryExecModeCacheStatement:
		return "the pool caches named prepared statements (pgx's default), which fail through a transaction-mode pooler without prepared-statement support; build the pool from skiplock.ParsePoolConfig, or set ConnConfig.DefaultQueryExecMode to pgx.QueryExecModeCacheDescribe"
	case pgx.QueryExecModeDescribeExec:
		return "the pool's describe_exec mode needs two round trips on one session, which a transaction-mode pooler does not promise; build the pool from skiplock.ParsePoolConfig, or set ConnConfig.DefaultQueryExecMode to pgx.QueryExecModeCacheDescribe"
	}
	return ""
}

func (c *Client) stopServices(ctx context.Context) {
	for _, s := range c.services {
		_ = s.Stop(ctx)
	}
}

// Stop stops claiming, hands back jobs claimed but not started, and waits
// for running jobs until ctx is done (or ShutdownTimeout when ctx has no
// deadline). Jobs still running then are cancelled and handed back to ready
// at once. Safe to call more than once, and if Start never ran. The
// client's Wait calls still return; its wait loop, which lingers a few
// seconds after the last wait with its LISTEN connection, ends with the
// last awaited job (at once when none is).
func (c *Client) Stop(ctx context.Context) error {
	c.waits().endLinger()
	r := c.runner.Load()
	if r == nil {
		return nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.ShutdownTimeout)
		defer cancel()
	}
	c.stopServices(context.WithoutCancel(ctx))
	return r.Stop(ctx)
}

// StopAndCancel stops at once: running handlers' contexts are cancelled and
// their jobs handed back to ready. The wait loop ends as with Stop.
func (c *Client) StopAndCancel(ctx context.Context) error {
	c.waits().endLinger()
	r := c.runner.Load()
	if r == nil {
		return nil
	}
	c.stopServices(ctx)
	return r.StopAndCancel(ctx)
}

// Stats is a snapshot of this process's worker counters (Client.Stats).
type Stats struct {
	// Claimed, Completed, Failed, DeadLettered and LeaseLost count jobs
	// since Start: claimed by this process; completed; failed attempts
	// (see below); moved to the dead-letter table (by a handler's final
	// failure, or by this process's reaper: a lease expired at the last
	// attempt); and whose lease was found lost (their outcome was not
	// written by this process). Failed counts every failed attempt, retried
	// or dead-lettered.
	Claimed, Completed, Failed, DeadLettered, LeaseLost int64
	// HandedOff counts, of Claimed, the jobs this client's Enqueue claimed
	// in its own transaction for one of its idle worker pools, which ran
	// them without a claim of their own (see Client.Enqueue).
	HandedOff int64
	// Running is the number of handlers running now.
	Running int
	// ClaimP50 and ClaimP99 are over the last 1,024 claim statements.
	ClaimP50, ClaimP99 time.Duration
	// ListenerUp is whether the LISTEN connection is up (false in poll-only
	// mode).
	ListenerUp bool
	// Claims counts every claim statement since Start; ClaimCounts is the
	// cumulative count of those that took at most each ClaimBuckets bound;
	// ClaimSum is their total duration (a Prometheus histogram's parts).
	Claims      uint64
	ClaimCounts []uint64
	ClaimSum    time.Duration
	// Reaps counts the reaper turns this process took: each read the
	// running set for expired leases. The fleet takes about one turn per
	// reaper interval, whichever process takes it.
	Reaps int64
	// ProgressRows counts the progress writes to jobs rows: at most one per
	// job per second, however often handlers call SetProgress.
	ProgressRows int64
}

// ClaimBuckets are the upper bounds, in seconds, of the claim-latency
// histogram in Stats: 0.5 ms to 2.5 s. It is a copy of the runtime's: changing
// it changes nothing.
var ClaimBuckets = claimBuckets()

func claimBuckets() []float64 { return slices.Clone(worker.ClaimBuckets) }

// Stats returns this process's worker counters (zero before Start).
func (c *Client) Stats() Stats {
	r := c.runner.Load()
	if r == nil {
		return Stats{}
	}
	// The runtime's counters have Stats's fields in Stats's order: a copy.
	return Stats(r.Stats())
}

// KindStats is one (queue, kind) pair's handler runs and outcomes in this
// process since Start (Client.KindStats): the counts behind the process
// metrics by queue and kind.
type KindStats struct {
	// Queue and Kind name the pair. A process keeps at most MaxKindSeries
	// pairs; the kinds seen after that are counted as OtherKind.
	Queue, Kind string
	// What became of the jobs: completed, retried after a failure,
	// snoozed, handed back (released), moved to the dead-letter table,
	// whose lease was lost, and whose outcome the database refused
	// (unwritten: the reaper returns them).
	Completed, Retried, Snoozed, Released, DeadLettered, LeaseLost, Unwritten int64
	// Runs counts the handler runs; RunCounts is the cumulative count of
	// those that took at most each RunBuckets bound; RunSum is their total
	// duration (a Prometheus histogram's parts).
	Runs      uint64
	RunCounts []uint64
	RunSum    time.Duration
}

// RunBuckets are the upper bounds, in seconds, of the handler-duration
// histogram in KindStats: 5 ms to 1 hour. A copy of the runtime's.
var RunBuckets = runBuckets()

func runBuckets() []float64 { return slices.Clone(worker.RunBuckets) }

// MaxKindSeries bounds the (queue, kind) pairs KindStats keeps apart, so
// that the metrics built on it have a bounded label set (a fallback
// handler runs any kind).
const MaxKindSeries = 200

// OtherKind is the kind KindStats counts the pairs beyond MaxKindSeries
// under.
const OtherKind = "_other"

// KindStats returns this process's handler runs and outcomes per (queue,
// kind) since Start, sorted by queue and kind (nil before Start).
func (c *Client) KindStats() []KindStats {
	r := c.runner.Load()
	if r == nil {
		return nil
	}
	ks := r.KindStats()
	out := make([]KindStats, len(ks))
	for i, k := range ks {
		out[i] = KindStats(k) // the runtime's fields, in this order
	}
	return out
}

// Reap returns expired leases now (the reaper also runs on its own).
func (c *Client) Reap(ctx context.Context) (backToReady, deadLettered int, err error) {
	return c.store.Reap(ctx, c.pool, 1000)
}

// ErrJobNotFound is returned by JobGet and the other Job* methods for an id
// that names no job in flight, dead or in the finished-job history.
var ErrJobNotFound = errors.New("skiplock: job not found")

// QueuePause stops every process from claiming from queue (within one
// statement: the claim checks the flag). Running jobs finish normally.
func (c *Client) QueuePause(ctx context.Context, queue string) error {
	return c.setPaused(ctx, queue, true)
}

// QueueResume lets processes claim from queue again.
func (c *Client) QueueResume(ctx context.Context, queue string) error {
	return c.setPaused(ctx, queue, false)
}

// QueueAgingSet turns on priority aging for queue: a ready job of the
// queue that has been due for longer than after is promoted to priority to
// (jobs already at or above it keep theirs), so a steady stream of
// higher-priority work cannot starve it forever. Every started client runs
// the aging pass every 10 seconds, promoting at most 1,000 jobs per queue
// per pass, the longest-waiting first. after 0 turns aging off. after must
// be at least a second and to a valid priority; otherwise a *FieldError
// names the field and nothing changes.
func (c *Client) QueueAgingSet(ctx context.Context, queue string, after time.Duration, to int) error {
	if err := validateName("queue", queue); err != nil {
		return err
	}
	if after != 0 && after < time.Second {
		return invalidJob("after", "must be 0 (off) or at least 1s")
	}
	if after != 0 && (to < MinPriority || to > MaxPriority) {
		return invalidJob("to", "must be between %d and %d", MinPriority, MaxPriority)
	}
	if err := c.store.SetQueueAging(ctx, c.pool, queue, after, to); err != nil {
		return fmt.Errorf("skiplock: queue aging: %w", err)
	}
	return nil
}

func (c *Client) setPaused(ctx context.Context, queue string, paused bool) error {
	if err := validateName("queue", queue); err != nil {
		return err
	}
	if err := c.store.SetQueuePaused(ctx, c.pool, queue, paused); err != nil {
		return fmt.Errorf("skiplock: pause: %w", err)
	}
	if !paused {
		_ = c.store.NotifyQueues(ctx, c.pool, []string{queue}) // a wake-up only: pollers find the jobs anyway
	}
	return nil
}

// CompleteTx completes job inside tx, the handler's own transaction, so the
// job's completion commits or rolls back with the handler's domain writes:
// together they happen exactly once.
//
// The completion is fenced inside tx by the job's id, lease token and worker:
// if this worker no longer holds the lease (it expired and the job may have
// been claimed again), CompleteTx returns an error matching ErrLeaseLost
// (errors.Is) and the caller must roll tx back, so its domain writes vanish
// with it; the handler should then return the error, and the worker writes
// nothing more for the job. After a nil return the handler commits tx and
// returns nil. If the handler returns an error instead (say, Commit failed),
// the attempt fails as usual: a retry that lands only if tx did not commit.
// A handler that returns nil without committing tx gets its job retried.
//
// Call CompleteTx as the last statement before Commit, and commit soon: from
// then until the commit the job's row is locked and its lease is no longer
// extended (the heartbeat skips a row its handler's transaction holds, and
// extends the process's other leases as before), so a transaction that rolls
// back after the lease ran out leaves the job to be run again.
// Call it once per transaction (a second call in the same transaction finds
// the job already gone and reports ErrLeaseLost), and only while the handler
// runs: job must be the one the client passed to the handler, and c that
// client; anything else reports ErrLeaseLost. tx is a pgx transaction, or a *sql.Tx
// wrapped with SQLTx.
func CompleteTx[T any](ctx context.Context, c *Client, tx Tx, job *Job[T]) error {
	if job == nil || job.run == nil {
		return fmt.Errorf("skiplock: CompleteTx: the job was not handed to a handler by a Client: %w", ErrLeaseLost)
	}
	run := job.run
	if run.client != c {
		return fmt.Errorf("skiplock: CompleteTx: job %d is run by another Client: %w", run.id, ErrLeaseLost)
	}
	if run.returned.Load() {
		return fmt.Errorf("skiplock: CompleteTx: job %d: its handler already returned: %w", run.id, ErrLeaseLost)
	}
	if err := run.hooked.BeforeCompleteTx(); err != nil { // the job's checkpoints before its end; err names the step and job
		return err
	}
	err := c.store.CompleteOne(ctx, tx, store.Lease{ID: run.id, Token: run.token}, run.worker, c.cfg.keepCompleted())
	switch {
	case isNoRows(err):
		run.leaseLost.Store(true)
		return fmt.Errorf("skiplock: CompleteTx: job %d: %w", run.id, ErrLeaseLost)
	case err != nil && errors.Is(context.Cause(ctx), ErrLeaseLost):
		// The heartbeat found the lease gone and cancelled ctx meanwhile.
		return fmt.Errorf("skiplock: CompleteTx: job %d: %w (%w)", run.id, ErrLeaseLost, err)
	case err != nil:
		return fmt.Errorf("skiplock: CompleteTx: job %d: %w", run.id, err)
	}
	run.completedTx.Store(true)
	// From here a heartbeat that finds the row gone finds tx committed, and
	// one that finds it held does not wait for it. Marked after the
	// statement, not before: a heartbeat that found the row before it would
	// take tx for rolled back. A heartbeat that began in between waits on
	// the row until its timeout (one interval); the next skips it.
	if r := c.runner.Load(); r != nil {
		r.EndedInTx(run.id, run.token)
	}
	return nil
}

// Migrate brings the schema to the latest version in one transaction, under
// an advisory lock (concurrent callers serialize; a second run does nothing).
// It returns the versions it applied.
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema string) ([]int, error) {
	var ran []int
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		ran, err = MigrateTx(ctx, tx, schema)
		return err
	})
	return ran, err
}

// MigrateTx applies pending migrations inside the caller's transaction, for
// teams that run skiplock's schema from their own migration tool. tx is a
// Tx: a pgx transaction, or a database/sql one wrapped with SQLTx.
func MigrateTx(ctx context.Context, tx Tx, schema string) ([]int, error) {
	if schema == "" {
		schema = "skiplock"
	}
	return migrations.UpTx(ctx, tx, schema, 0)
}
