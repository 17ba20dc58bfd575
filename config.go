package skiplock

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/internal/history"
	"github.com/skiplock/skiplock/internal/migrations"
)

// Config configures a Client. The zero value of every field means its
// documented default; NewClient validates it once and names the field of
// any error.
type Config struct {
	// Schema holds skiplock's tables; default "skiplock". Its name is part of
	// every NOTIFY channel and advisory-lock key, so two installations in one
	// database never interfere.
	Schema string
	// Logger receives lifecycle and failure logs (job id, queue, kind,
	// attempt; never payloads). Default slog.Default().
	Logger *slog.Logger
	// WorkerID names this process in locked_by and the workers table.
	// Default hostname:pid:random.
	WorkerID string
	// Pools are the worker pools Start runs. Default: one pool named
	// "default" over the "default" queue, concurrency 10.
	Pools []WorkerPool
	// LeaseDuration is how long a claim is valid without a heartbeat.
	// Default 30s.
	LeaseDuration time.Duration
	// HeartbeatInterval is how often leases are extended; it must be below
	// LeaseDuration/2. Default LeaseDuration/3.
	HeartbeatInterval time.Duration
	// PollInterval is the backstop poll when no NOTIFY arrives. Default 1s.
	PollInterval time.Duration
	// ReaperInterval is how often expired leases are returned; default
	// LeaseDuration/6, at least 1s. Negative disables the reaper, and with
	// it this process's turns of the jobs table's ring of generations
	// (migration 016; any other worker process turns it for the fleet).
	ReaperInterval time.Duration
	// MaxAttempts is the default for jobs enqueued without one. Default 20.
	MaxAttempts int
	// MaxPayloadBytes limits payload size. Default 1 MiB.
	MaxPayloadBytes int
	// Backoff returns the delay before retry number attempt (1-based). Default
	// capped exponential with jitter: 1s·2^(attempt-1)·[0.5,1), at most 1h.
	Backoff func(attempt int) time.Duration
	// DeleteCompleted deletes a job the moment it succeeds instead of keeping
	// it in the partitioned jobs_done history for CompletedRetention. It
	// saves the history's write (see docs/operations.md for the measured
	// cost), but a finished job can then no longer be looked up (JobGet,
	// JobList, `skiplock job get`) or retried. Default false: history kept.
	DeleteCompleted bool
	// ArchiveCompleted keeps finished jobs in the partitioned jobs_done
	// table. That is the default now; the field stays for configurations
	// that set it and must not be combined with DeleteCompleted.
	ArchiveCompleted bool
	// CompletedRetention is how long finished jobs stay in jobs_done, where
	// JobGet and JobList find them: a started client drops each daily
	// partition (a catalog operation, never a row-by-row DELETE) once its
	// UTC day ended longer ago than this, so a job is kept between this and
	// this plus one day. Default 24 hours; at least 1 hour; negative keeps
	// the history forever.
	CompletedRetention time.Duration
	// HistoryExportDir, when set, is where each jobs_done day is exported
	// (compressed NDJSON, one file a day, with a manifest of row counts, id
	// ranges and checksums; see HistoryExport) before retention drops its
	// partition, and each UTC day of dead letters before retention purges
	// it (jobs_dead_YYYYMMDD.ndjson.gz, same manifest; with an export, dead
	// letters leave a whole day at a time, once the day's end is
	// DeadLetterRetention old). It is a directory or a gocloud.dev/blob
	// bucket URL (file://, mem://, or s3://, gs://, azblob://… when the
	// program links the driver in: HistoryExportParams.Dir says more); the
	// name says Dir because a directory is what it first took. A day whose
	// export fails is not dropped or purged (the error is logged and the
	// next pass retries), and a day is dropped or purged only if the table
	// still holds exactly the rows exported. Every process that may run the
	// retention pass must see the same destination (a bucket, a shared
	// volume), or set it on one process only. Default "": no export.
	HistoryExportDir string
	// DeadLetterRetention is how long dead letters are kept: a started
	// client purges older ones in small batches. Default 30 days; at least
	// 1 hour; negative keeps them forever.
	DeadLetterRetention time.Duration
	// WorkflowRetention is how long a finished workflow or batch (completed,
	// failed or cancelled) is kept with its tasks, outputs and signals, for
	// WorkflowGet, `skiplock workflow get` and WorkflowRetry: a started client
	// deletes older ones in small batches. Default 7 days; at least 1 hour;
	// negative keeps them forever. Running workflows are never deleted.
	WorkflowRetention time.Duration
	// PollOnly disables LISTEN; jobs are found by polling every
	// PollInterval. Not needed behind a pooler: a started client notices
	// one by itself (and then polls, saying so once at warn level).
	PollOnly bool
	// NoHandOff turns the hand-off off: Enqueue then never claims a job for
	// one of this client's idle pools in its own transaction (see
	// Client.Enqueue), and every job waits for a pool's claim, this
	// process's or another's. For a fleet that wants each job to go to
	// whichever process claims first, not to the one that enqueued it.
	NoHandOff bool
	// ListenURL, when set, is a connection string used only for the one
	// LISTEN connection of a started client. Set it to a direct connection
	// to PostgreSQL when the pool goes through a transaction-mode pooler
	// (PgBouncer): LISTEN needs a session of its own, and with it pickup
	// stays in milliseconds instead of one PollInterval. Default: the
	// pool's own connection settings.
	ListenURL string
	// ShutdownTimeout bounds how long Stop lets running jobs finish when its
	// context has no deadline. Default 25s.
	ShutdownTimeout time.Duration
	// ScheduleCatchUp is how many fires of a recurring schedule missed while
	// no scheduler ran (downtime) are enqueued when one starts again: the
	// most recent ones, so downtime never turns into a storm. 0 means 1;
	// negative enqueues none and resumes at the next fire time.
	ScheduleCatchUp int
	// VacuumDeadTuples is the vacuum guard's threshold: when the jobs table
	// holds more dead tuples than this and no vacuum (manual or automatic)
	// finished in the last 30 s, a started client runs VACUUM on it (one
	// process at a time, under an advisory lock). It covers autovacuum being
	// off, throttled or too slow for the queue's churn; with autovacuum
	// keeping up it never fires. Default 100,000; negative disables it.
	VacuumDeadTuples int64
	// EnqueueMiddleware wraps every enqueue of this client (Enqueue,
	// EnqueueTx, EnqueueMany, EnqueueManyTx), the first outermost. See
	// EnqueueMiddleware.
	EnqueueMiddleware []EnqueueMiddleware
	// WorkMiddleware wraps every handler run of this client, the first
	// outermost, outside each handler's own (WithMiddleware). See
	// WorkMiddleware.
	WorkMiddleware []WorkMiddleware
	// Encryption, when set, seals the payload of every job this client
	// enqueues (AES-256-GCM, under the job's tenant key or the keyring's
	// current key) and opens sealed payloads before the middleware and the
	// handler see them; a payload sealed under a key the keyring does not
	// hold is dead-lettered (reason "discarded", the error naming the key).
	// Plain payloads are enqueued and run as before without it, and
	// coexist with sealed ones. Its handlers' task outputs and step results
	// are sealed the same way, and the signals it sends under the current
	// key; its handlers get them opened. See LoadKeyring and
	// docs/security.md.
	Encryption *Keyring
}

// WorkerPool is one worker pool: the queues (and optionally kinds) it claims and
// how many jobs it runs at once. Pools are independent, so a bulk backfill
// in one never crowds out latency-sensitive work in another.
type WorkerPool struct {
	// Name labels the pool in logs and metrics. Default the first queue.
	Name string
	// Queues this pool claims from. Default ["default"].
	Queues []string
	// Kinds restricts the pool to these kinds. Default: every kind with a
	// registered handler (or any kind when a fallback handler is set).
	Kinds []string
	// Concurrency is the number of jobs run at once. Default 10.
	Concurrency int
	// BatchSize is a claim's batch: the most jobs one claim takes, but for
	// a pool bound by its claims (below). Default min(Concurrency, 50).
	// The pool keeps up to Concurrency + BatchSize jobs in hand (claimed,
	// running or about to), and more in a backlog. While executors wait for
	// work, a pool of more than one executor without limits or a tenant cap
	// has a second claim in flight beside its own (a batch more in hand).
	// When its executors run a batch in less than four claims' time (it is
	// bound by its claims: otherwise a claim that takes twice its usual
	// time leaves them idle), it has a third, and its own claim takes five
	// batches in one: four batches more in hand, and up to five more, as
	// many as its executors run in the time a claim takes, so that each
	// claim is full. A tenant-capped pool (whose claims go round the tenants
	// one after the other) has one claim in flight: two batches in one while
	// claims come back full, five under the same condition.
	BatchSize int
	// TenantCap, when positive, turns on round-robin fair share: each claim
	// visits the next BatchSize tenants with ready jobs after the pool's
	// last one (two or five times as many while claims come back full,
	// when the pool claims two or five batches in one: BatchSize), gives
	// every visited tenant a job before any gets a second, and no tenant
	// more than TenantCap jobs of the batch while other tenants have work;
	// so every tenant is served within ceil(tenants / BatchSize) claims of
	// the pool.
	TenantCap int
}

func (c Config) withDefaults() Config {
	if c.Schema == "" {
		c.Schema = "skiplock"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.WorkerID == "" {
		host, _ := os.Hostname()
		c.WorkerID = fmt.Sprintf("%s:%d:%04x", host, os.Getpid(), os.Getpid()^int(time.Now().UnixNano()&0xffff))
	}
	if len(c.Pools) == 0 {
		c.Pools = []WorkerPool{{}}
	}
	pools := make([]WorkerPool, len(c.Pools))
	for i, p := range c.Pools {
		if len(p.Queues) == 0 {
			p.Queues = []string{DefaultQueue}
		}
		if p.Name == "" {
			p.Name = p.Queues[0]
		}
		if p.Concurrency == 0 {
			p.Concurrency = 10
		}
		if p.BatchSize == 0 {
			p.BatchSize = min(p.Concurrency, 50)
		}
		pools[i] = p
	}
	c.Pools = pools
	if c.LeaseDuration == 0 {
		c.LeaseDuration = 30 * time.Second
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = c.LeaseDuration / 3
	}
	if c.PollInterval == 0 {
		c.PollInterval = time.Second
	}
	if c.ReaperInterval == 0 {
		c.ReaperInterval = max(c.LeaseDuration/6, time.Second)
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.MaxPayloadBytes == 0 {
		c.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	if c.Backoff == nil {
		c.Backoff = DefaultBackoff
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 25 * time.Second
	}
	if c.CompletedRetention == 0 {
		c.CompletedRetention = DefaultCompletedRetention
	}
	if c.DeadLetterRetention == 0 {
		c.DeadLetterRetention = DefaultDeadLetterRetention
	}
	if c.WorkflowRetention == 0 {
		c.WorkflowRetention = DefaultWorkflowRetention
	}
	return c
}

// Retention defaults (Config.CompletedRetention, Config.DeadLetterRetention,
// Config.WorkflowRetention).
const (
	DefaultCompletedRetention  = 24 * time.Hour
	DefaultDeadLetterRetention = 30 * 24 * time.Hour
	DefaultWorkflowRetention   = 7 * 24 * time.Hour
)

// keepCompleted reports whether finished jobs move to the jobs_done history
// (the default) rather than being deleted.
func (c Config) keepCompleted() bool { return !c.DeleteCompleted }

func (c Config) validate() error {
	if err := migrations.ValidateSchema(c.Schema); err != nil {
		return invalidConfig("Schema", "must match ^[a-z_][a-z0-9_]{0,47}$, got %q", c.Schema)
	}
	if c.LeaseDuration < 100*time.Millisecond {
		return invalidConfig("LeaseDuration", "must be at least 100ms, got %s", c.LeaseDuration)
	}
	if c.HeartbeatInterval <= 0 || c.HeartbeatInterval*2 > c.LeaseDuration {
		return invalidConfig("HeartbeatInterval", "(%s) must be positive and at most LeaseDuration/2 (%s)", c.HeartbeatInterval, c.LeaseDuration/2)
	}
	if c.PollInterval < 10*time.Millisecond {
		return invalidConfig("PollInterval", "must be at least 10ms, got %s", c.PollInterval)
	}
	if c.MaxAttempts < 1 || c.MaxAttempts > MaxAttemptsLimit {
		return invalidConfig("MaxAttempts", "must be between 1 and %d, got %d", MaxAttemptsLimit, c.MaxAttempts)
	}
	if c.MaxPayloadBytes < 2 || c.MaxPayloadBytes > 32<<20 {
		return invalidConfig("MaxPayloadBytes", "must be between 2 and 32 MiB, got %d", c.MaxPayloadBytes)
	}
	if c.ScheduleCatchUp > 1000 {
		return invalidConfig("ScheduleCatchUp", "must be at most 1000 (missed fires are a catch-up, not a replay), got %d", c.ScheduleCatchUp)
	}
	if c.CompletedRetention > 0 && c.CompletedRetention < time.Hour {
		return invalidConfig("CompletedRetention", "must be at least 1h (or negative to keep the history forever), got %s", c.CompletedRetention)
	}
	if c.DeadLetterRetention > 0 && c.DeadLetterRetention < time.Hour {
		return invalidConfig("DeadLetterRetention", "must be at least 1h (or negative to keep dead letters forever), got %s", c.DeadLetterRetention)
	}
	if c.WorkflowRetention > 0 && c.WorkflowRetention < time.Hour {
		return invalidConfig("WorkflowRetention", "must be at least 1h (or negative to keep finished workflows forever), got %s", c.WorkflowRetention)
	}
	if c.HistoryExportDir != "" {
		if err := history.CheckDestination(c.HistoryExportDir); err != nil {
			return invalidConfig("HistoryExportDir", "%s", err.Error())
		}
	}
	if c.DeleteCompleted && c.ArchiveCompleted {
		return invalidConfig("DeleteCompleted", "cannot be combined with ArchiveCompleted (history is kept unless DeleteCompleted is set)")
	}
	if c.ListenURL != "" {
		if _, err := pgx.ParseConfig(c.ListenURL); err != nil {
			// Never echo the URL: it may hold a password.
			return invalidConfig("ListenURL", "cannot parse the connection string")
		}
	}
	if len(c.WorkerID) > 200 {
		return invalidConfig("WorkerID", "longer than 200 bytes")
	}
	names := map[string]bool{}
	for i, p := range c.Pools {
		field := fmt.Sprintf("Pools[%d]", i)
		if names[p.Name] {
			return invalidConfig(field+".Name", "duplicate pool name %q", p.Name)
		}
		names[p.Name] = true
		for _, q := range p.Queues {
			if err := validateName("queue", q); err != nil {
				return invalidConfig(field+".Queues", "%v", err)
			}
		}
		for _, k := range p.Kinds {
			if err := validateName("kind", k); err != nil {
				return invalidConfig(field+".Kinds", "%v", err)
			}
		}
		if p.Concurrency < 1 || p.Concurrency > 10000 {
			return invalidConfig(field+".Concurrency", "must be between 1 and 10000, got %d", p.Concurrency)
		}
		if p.BatchSize < 1 || p.BatchSize > 1000 {
			return invalidConfig(field+".BatchSize", "must be between 1 and 1000, got %d", p.BatchSize)
		}
		if p.TenantCap < 0 {
			return invalidConfig(field+".TenantCap", "must not be negative, got %d", p.TenantCap)
		}
	}
	return nil
}
