package skiplock

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/skiplock/skiplock/internal/store"
	"github.com/skiplock/skiplock/internal/worker"
)

// DefaultQueue is the queue a job goes to when EnqueueParams.Queue is empty.
const DefaultQueue = "default"

// EnqueueParams describes one job to enqueue. Only Kind is required.
type EnqueueParams struct {
	// Queue routes the job to the worker pools that claim it. Default "default".
	Queue string
	// Kind selects the handler. It may be left empty when Payload is a
	// JobArgs, whose Kind() names it; when both are set they must agree.
	Kind string
	// Payload is the job's arguments: a value marshalled to a JSON object, or
	// raw JSON as json.RawMessage or []byte. nil means {}.
	Payload any
	// Priority orders ready jobs: larger runs earlier (MinPriority..MaxPriority).
	Priority int
	// RunAt schedules the job; zero means now (by the database clock).
	RunAt time.Time
	// Delay schedules the job this long after now, by the database clock.
	// Ignored when RunAt is set.
	Delay time.Duration
	// MaxAttempts bounds how many times the job is claimed before it moves to
	// the dead-letter table; 0 uses the client's default.
	MaxAttempts int
	// UniqueKey makes the enqueue idempotent: while a job with the same queue
	// and key is in flight (ready or running), enqueueing returns its id and
	// inserts nothing.
	UniqueKey string
	// BumpSchedule, with UniqueKey, moves the in-flight job's run_at to the
	// later of its current and the new one instead of doing nothing: a
	// debounce.
	BumpSchedule bool
	// Tenant is the fairness key: a pool with a tenant cap never gives one
	// tenant more than its share of a claim batch.
	Tenant string
	// Entity serializes jobs: at most one job per entity key runs at a time.
	Entity string
	// Metadata is a small JSON object (at most MaxMetadataBytes) that travels
	// with the job: trace context, request ids, tags. Handlers see it as
	// Job.Metadata; the dashboard shows it. nil or empty stores nothing.
	Metadata Metadata
	// Unique widens uniqueness beyond UniqueKey: a key derived from the
	// payload (ByArgs), held for a period whether its job is in flight or
	// finished (Period). See UniqueOpts.
	Unique UniqueOpts
	// Supersede, with a key (UniqueKey or Unique.ByArgs): a waiting job
	// with the key takes this payload (and priority, metadata, run time);
	// a running one is cancelled (its context is cancelled with
	// ErrCancelled, it is moved to the dead-letter table as cancelled,
	// error "superseded", and its late writes are refused by the lease
	// fence) and this job is inserted to run next. The key never has two
	// leases at once.
	Supersede bool
	// Debounce, with a key: a waiting job with the key takes this payload
	// and runs Debounce after this enqueue (each enqueue pushes it back);
	// while one runs, a new job is inserted to run Debounce from now.
	Debounce time.Duration
	// Throttle, with a key: at most one run of the key starts per window;
	// an enqueue while a job waits folds into it (its payload replaced,
	// its run time kept), otherwise the new job runs no earlier than
	// Throttle after the previous one's run time and start.
	Throttle time.Duration
	// LimitWeight is how many starts the job counts as in every rate limit
	// that covers it (a call that costs 5 units of a partner's quota
	// counts 5): 1 to MaxLimitWeight; 0 means 1. A rate limit starts the job
	// only when its weight fits in the window's room; lighter jobs behind
	// it that fit start meanwhile, and a job heavier than the limit's rate
	// never starts (LimitList reports it as TooHeavy). Concurrency limits
	// count every running job as one, whatever its weight.
	LimitWeight int
}

// EnqueueResult is the outcome of one enqueue.
type EnqueueResult struct {
	ID int64 `json:"id"`
	// Inserted is false when the job holding the key was returned: in
	// flight, or (UniqueOpts.Period) enqueued in the same period; with a
	// mode, the waiting job that took the new payload.
	Inserted bool `json:"inserted"`
}

// prepared turns params into validated store arguments.
func (c *Client) prepare(p EnqueueParams) (store.EnqueueArgs, error) {
	var a store.EnqueueArgs
	p = withArgsDefaults(p)
	if p.Queue == "" {
		p.Queue = DefaultQueue
	}
	if err := validateName("queue", p.Queue); err != nil {
		return a, err
	}
	kind, err := kindOfPayload(p.Kind, p.Payload)
	if err != nil {
		return a, err
	}
	p.Kind = kind
	if err := validateName("kind", p.Kind); err != nil {
		return a, err
	}
	raw, err := marshalPayload(p.Payload)
	if err != nil {
		return a, err
	}
	if err := ValidatePayload(raw, c.cfg.MaxPayloadBytes); err != nil {
		return a, err
	}
	if p.Priority < MinPriority || p.Priority > MaxPriority {
		return a, invalidJob("priority", "must be between %d and %d, got %d", MinPriority, MaxPriority, p.Priority)
	}
	if !p.RunAt.IsZero() {
		if p.RunAt.Before(time.Unix(0, 0)) {
			return a, invalidJob("run_at", "%s is before 1970", p.RunAt.UTC().Format(time.RFC3339))
		}
		if time.Until(p.RunAt) > MaxScheduleAhead {
			return a, invalidJob("run_at", "%s is more than 5 years ahead", p.RunAt.UTC().Format(time.RFC3339))
		}
		t := p.RunAt
		a.RunAt = &t
	} else if p.Delay < 0 {
		return a, invalidJob("delay", "must not be negative, got %s", p.Delay)
	} else if p.Delay > MaxScheduleAhead {
		return a, invalidJob("delay", "%s is more than 5 years", p.Delay)
	}
	maxAttempts := p.MaxAttempts
	if maxAttempts == 0 {
		maxAttempts = c.cfg.MaxAttempts
	}
	if maxAttempts < 0 || maxAttempts > MaxAttemptsLimit {
		return a, invalidJob("max_attempts", "must be between 1 and %d, got %d", MaxAttemptsLimit, maxAttempts)
	}
	// A handler this client registered for the kind with WithMaxAttempts
	// caps the budget stored with the job, so that job get and the logs show
	// the budget that decides (a worker elsewhere writes its cap with the
	// first failure).
	if hc := c.handlerMaxAttempts(p.Kind); hc > 0 && hc < cmp.Or(maxAttempts, DefaultMaxAttempts) {
		maxAttempts = hc
	}
	if maxAttempts > 0 {
		a.MaxAttempts = &maxAttempts
	}
	for _, k := range []struct {
		field string
		v     string
		max   int
		dst   **string
	}{
		{"unique_key", p.UniqueKey, MaxUniqueKeyBytes, &a.UniqueKey},
		{"tenant", p.Tenant, MaxKeyBytes, &a.Tenant},
		{"entity", p.Entity, MaxKeyBytes, &a.Entity},
	} {
		if k.v == "" {
			continue
		}
		if err := validateKey(k.field, k.v, k.max); err != nil {
			return a, err
		}
		v := k.v
		*k.dst = &v
	}
	if a.Metadata, err = encodeMetadata(p.Metadata); err != nil {
		return a, err
	}
	if p.LimitWeight < 0 || p.LimitWeight > MaxLimitWeight {
		return a, invalidJob("limit_weight", "must be between 1 and %d, got %d", MaxLimitWeight, p.LimitWeight)
	}
	if p.LimitWeight > 1 { // weight 1 is stored as NULL, the default
		w := p.LimitWeight
		a.LimitWeight = &w
	}
	if p.BumpSchedule && p.UniqueKey == "" && !p.Unique.ByArgs {
		return a, invalidJob("bump_schedule", "needs a unique_key")
	}
	if err := prepareUnique(p, &a); err != nil {
		return a, err
	}
	if k := c.cfg.Encryption; k != nil {
		// With payloads sealed, the database cannot hash the arguments
		// (each envelope differs): the key is made here, keyed by the
		// tenant's key so it does not reveal a guessable payload.
		if a.UniqueBy != nil {
			key, err := k.argsKey(p.Kind, raw, a.UniqueFields, p.Tenant)
			if err != nil {
				return a, invalidJob("unique_by", "%v", err)
			}
			a.UniqueKey, a.UniqueBy, a.UniqueFields = &key, nil, nil
		}
		// Sealed last, once the plaintext is known good: the database
		// checks only the envelope's size (docs/security.md). Split, as
		// the row stores it: the key id as payload, the bytes beside it.
		id, sealed, err := k.sealParts(raw, p.Tenant)
		if err != nil {
			return a, invalidJob("payload", "%v", err)
		}
		raw, a.Sealed = []byte(keyIDPayload(id)), sealed
	}
	a.Queue, a.Kind, a.Payload, a.Priority, a.Delay, a.Bump = p.Queue, p.Kind, string(raw), p.Priority, p.Delay, p.BumpSchedule
	return a, nil
}

// handlerMaxAttempts is the WithMaxAttempts of the handler this client
// registered for kind, 0 when none caps it.
func (c *Client) handlerMaxAttempts(kind string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h := c.handlers[kind]; h != nil {
		return h.maxAttempts
	}
	return 0
}

// Validate checks p exactly as Enqueue would, without touching the database.
func (c *Client) Validate(p EnqueueParams) error {
	_, err := c.prepare(p)
	return err
}

func marshalPayload(v any) ([]byte, error) {
	switch p := v.(type) {
	case nil:
		return []byte("{}"), nil
	case json.RawMessage:
		return p, nil
	case []byte:
		return p, nil
	default:
		b, err := json.Marshal(v)
		if err != nil {
			// The marshal error names a Go type, not a value.
			return nil, invalidJob("payload", "cannot be marshalled to JSON: %v", err)
		}
		return b, nil
	}
}

// Enqueue inserts one job using the client's pool, in one round trip.
//
// When this client is started and one of its worker pools would claim the
// job and waits idle (its last claim found nothing; no limit covers it; a
// tenant-capped pool only for a job without a tenant), the same round trip
// and transaction also claim the job for that pool, as its next claim
// would, and the pool runs it at once: it starts without a claim's round
// trip after the commit (Stats.HandedOff counts these). Only a plain job
// due now is handed off: one with a UniqueKey, a mode or uniqueness option,
// an Entity or a later run time is enqueued for any claimer. A paused
// queue's job, or one whose kind the pool does not handle, stays ready.
// Config.NoHandOff turns this off.
func (c *Client) Enqueue(ctx context.Context, p EnqueueParams) (EnqueueResult, error) {
	return c.EnqueueTx(ctx, c.pool, p)
}

// EnqueueTx inserts one job inside the caller's transaction: the job exists
// if and only if that transaction commits, and its wake-up NOTIFY is
// delivered only then. tx is a pgx transaction (or a *pgxpool.Pool or *pgx.Conn), or
// a database/sql *sql.Tx wrapped with SQLTx. EnqueueTx never commits or rolls
// back.
//
// If the caller's COMMIT fails, whether the job exists is unknown: the
// connection may have died after the server committed, and pgx then
// reports the error as safe to retry (test/faults TestCommitReplyLost).
// Retry with a UniqueKey when a second job would hurt: while the first is
// still ready or running, the retry returns its id instead of inserting
// another.
func (c *Client) EnqueueTx(ctx context.Context, tx Tx, p EnqueueParams) (EnqueueResult, error) {
	if len(c.cfg.EnqueueMiddleware) > 0 {
		return c.enqueueTxWrapped(ctx, tx, p)
	}
	return c.enqueueTx(ctx, tx, p)
}

func (c *Client) enqueueTx(ctx context.Context, tx Tx, p EnqueueParams) (EnqueueResult, error) {
	a, err := c.prepare(p)
	if err != nil {
		return EnqueueResult{}, err
	}
	if o := c.offer(tx, a); o != nil {
		return c.enqueueHandedOff(ctx, o, a)
	}
	var r EnqueueResult
	if r.ID, r.Inserted, err = c.store.Enqueue(ctx, tx, a); err != nil {
		return r, enqueueError(err)
	}
	return r, nil
}

// offer reserves an executor of one of this client's idle pools for the
// job a (worker.Runner.Offer) when it can be handed off (see Enqueue): it
// is enqueued on the client's own pool, so its commit is this call's; it
// is plain (store.EnqueueClaimed); and it is due now.
func (c *Client) offer(tx Tx, a store.EnqueueArgs) *worker.Offer {
	r := c.runner.Load()
	if r == nil || c.cfg.NoHandOff || tx != Tx(c.pool) || a.Keyed() || a.Entity != nil || a.Delay > 0 ||
		a.RunAt != nil && a.RunAt.After(time.Now()) {
		return nil
	}
	return r.Offer(a.Queue, a.Kind, a.Tenant != nil)
}

// enqueueHandedOff enqueues a and claims it for the pool that offered o,
// in one round trip and transaction, and gives the pool the job; when the
// claim found it not claimable (a paused queue, say), the job stays ready
// and the offer is released. An error means neither happened.
func (c *Client) enqueueHandedOff(ctx context.Context, o *worker.Offer, a store.EnqueueArgs) (EnqueueResult, error) {
	defer o.Release() // whatever happens: after Deliver, a no-op (an offer is answered once)
	id, inserted, j, err := c.store.EnqueueClaimed(ctx, c.pool, a, o.Kinds(), o.WorkerID(), o.Lease())
	if err != nil {
		return EnqueueResult{}, enqueueError(err)
	}
	if j != nil {
		o.Deliver(*j)
	}
	return EnqueueResult{ID: id, Inserted: inserted}, nil
}

// sqlArgs adapts pointer arguments for database/sql drivers, which want
// plain values or nil.
func sqlArgs(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case *string:
			if v == nil {
				out[i] = nil
			} else {
				out[i] = *v
			}
		case *int:
			if v == nil {
				out[i] = nil
			} else {
				out[i] = int64(*v)
			}
		case *time.Time:
			if v == nil {
				out[i] = nil
			} else {
				out[i] = *v
			}
		case int:
			out[i] = int64(v)
		default:
			out[i] = a
		}
	}
	return out
}

// enqueueError turns the SQL function's validation errors into FieldErrors
// and strips PostgreSQL's detail (which can echo row values).
func enqueueError(err error) error {
	if f, m, ok := store.InvalidField(err); ok {
		return &FieldError{Field: f, Message: m, base: ErrInvalidJob}
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return fmt.Errorf("skiplock: enqueue: %s (SQLSTATE %s)", pg.Message, pg.Code)
	}
	return fmt.Errorf("skiplock: enqueue: %w", err)
}

// copyColumns are the columns EnqueueMany's COPY fills.
var copyColumns = []string{"queue", "kind", "payload", "priority", "run_at", "max_attempts", "tenant", "entity", "metadata",
	"limit_weight", "gen", "sealed"}

// keyedGen is the generation of jobs_keyed (migration 016), where a job with
// an entity must go: its unique running index lives there.
const keyedGen int16 = -1

// EnqueueMany inserts many jobs in one transaction through COPY (tens of
// thousands per second) and returns how many it inserted. Every job is
// validated first; one bad job rejects the whole call, naming its index, and
// nothing is written. Jobs with a UniqueKey, Unique options or a mode go
// through the SQL function enqueue_job (pipelined in the same round trip),
// which decides their keys and modes as it does for Enqueue, so duplicates
// are skipped rather than failing the batch.
func (c *Client) EnqueueMany(ctx context.Context, ps []EnqueueParams) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		var err error
		n, err = c.EnqueueManyTx(ctx, tx, ps)
		return err
	})
	return n, err
}

// EnqueueManyTx is EnqueueMany inside the caller's transaction, a Tx as
// EnqueueTx takes. On a pgx transaction the jobs go through COPY; on a
// database/sql one (SQLTx), which has no COPY, one enqueue statement each.
// Either way the jobs exist if and only if tx commits.
func (c *Client) EnqueueManyTx(ctx context.Context, tx Tx, ps []EnqueueParams) (int64, error) {
	if len(c.cfg.EnqueueMiddleware) > 0 {
		return c.enqueueManyTxWrapped(ctx, tx, ps)
	}
	return c.enqueueManyTx(ctx, tx, ps)
}

// copyTx is what EnqueueManyTx's COPY path needs: a pgx transaction (or
// pool, or connection).
type copyTx interface {
	store.DBTX
	CopyFrom(ctx context.Context, tableName pgx.Identifier, columnNames []string, rowSrc pgx.CopyFromSource) (int64, error)
}

func (c *Client) enqueueManyTx(ctx context.Context, tx Tx, ps []EnqueueParams) (int64, error) {
	args := make([]store.EnqueueArgs, len(ps))
	for i, p := range ps {
		a, err := c.prepare(p)
		if err != nil {
			var fe *FieldError
			if errors.As(err, &fe) {
				return 0, &FieldError{Field: fmt.Sprintf("jobs[%d].%s", i, fe.Field), Message: fe.Message, base: ErrInvalidJob}
			}
			return 0, err
		}
		args[i] = a
	}
	if ct, ok := tx.(copyTx); ok {
		return c.enqueueCopy(ctx, ct, args)
	}
	// database/sql: no COPY, no pipeline; enqueue_job notifies per queue.
	var inserted int64
	for _, a := range args {
		_, ins, err := c.store.Enqueue(ctx, tx, a)
		if err != nil {
			return 0, enqueueError(err)
		}
		if ins {
			inserted++
		}
	}
	return inserted, nil
}

// enqueueCopy writes validated jobs through COPY, and those with a unique
// key (which must find an in-flight holder) through enqueue_job, pipelined.
func (c *Client) enqueueCopy(ctx context.Context, tx copyTx, args []store.EnqueueArgs) (int64, error) {
	rows := make([][]any, 0, len(args))
	var uniques []store.EnqueueArgs
	queues := map[string]bool{}
	for _, a := range args {
		if a.Keyed() {
			uniques = append(uniques, a)
			continue
		}
		var runAt any = a.Delay // relative to the database clock, resolved below
		if a.RunAt != nil {
			runAt = *a.RunAt
		} else if a.Delay == 0 {
			queues[a.Queue] = true
		}
		maxAttempts := any(int32(DefaultMaxAttempts))
		if a.MaxAttempts != nil {
			maxAttempts = int32(*a.MaxAttempts)
		}
		var weight any // NULL: weight 1
		if a.LimitWeight != nil {
			weight = int32(*a.LimitWeight)
		}
		var gen any // nil: the ring's current generation, resolved below
		if a.Entity != nil {
			gen = keyedGen
		}
		rows = append(rows, []any{a.Queue, a.Kind, a.Payload, int32(a.Priority), runAt, maxAttempts, a.Tenant, a.Entity, a.Metadata,
			weight, gen, a.Sealed})
	}
	var inserted int64
	if len(rows) > 0 {
		// COPY cannot call now() or ring_gen(); read them once instead.
		now, gen, err := c.store.CopyClock(ctx, tx)
		if err != nil {
			return 0, fmt.Errorf("skiplock: enqueue: %w", err)
		}
		n, err := tx.CopyFrom(ctx, pgx.Identifier{c.store.Schema, "jobs"}, copyColumns, &copySource{rows: rows, now: now, gen: gen})
		if err != nil {
			return 0, enqueueError(err)
		}
		inserted += n
	}
	if len(uniques) > 0 {
		n, err := c.store.EnqueueBatch(ctx, tx, uniques)
		if err != nil {
			return 0, enqueueError(err)
		}
		inserted += n
	}
	if len(queues) > 0 {
		names := make([]string, 0, len(queues))
		for q := range queues {
			names = append(names, q)
		}
		if err := c.store.NotifyQueues(ctx, tx, names); err != nil {
			return 0, fmt.Errorf("skiplock: enqueue notify: %w", err)
		}
	}
	return inserted, nil
}

// copySource feeds COPY; a run_at given as a duration is a delay from the
// database's now, and a job without a generation goes to the ring's current
// one.
type copySource struct {
	rows [][]any
	i    int
	now  time.Time
	gen  int16
}

func (s *copySource) Next() bool {
	s.i++
	return s.i <= len(s.rows)
}

func (s *copySource) Values() ([]any, error) {
	r := s.rows[s.i-1]
	if d, ok := r[4].(time.Duration); ok {
		r[4] = s.now.Add(d)
	}
	if r[10] == nil {
		r[10] = s.gen
	}
	return r, nil
}

func (s *copySource) Err() error { return nil }
