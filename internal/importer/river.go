package importer

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/sqlfile"
)

// RiverStates are the River states an import moves by default: jobs
// waiting to run. "running" is added by RiverOptions.IncludeRunning.
var RiverStates = []string{"available", "scheduled", "retryable"}

// ErrRiverAlive is returned when running jobs were asked for but a River
// client still holds the leadership: it may be working them.
var ErrRiverAlive = errors.New("a River client is alive (an unexpired row in river_leader): its running jobs may be in progress")

// RiverOptions configure a River import.
type RiverOptions struct {
	// Source is River's database, Dest skiplock's. They are the same pool
	// (or SameDatabase is set) for the one-transaction move; otherwise each
	// batch commits in skiplock first, then deletes from River.
	Source, Dest *pgxpool.Pool
	SameDatabase bool
	// Client enqueues into skiplock; it must be a client on Dest.
	Client *skiplock.Client
	// Schema is River's schema; empty means "public".
	Schema string
	// Kinds and Queues, when not empty, restrict the import to them.
	Kinds, Queues []string
	// IncludeRunning moves running jobs too, and only when no River client
	// holds the leadership (ErrRiverAlive otherwise).
	IncludeRunning bool
	// BatchSize is the jobs per transaction; 0 means DefaultBatchSize.
	BatchSize int
	// DryRun counts what would move, by state and kind, and writes nothing.
	DryRun bool
	// Progress, when set, is called after each batch with the jobs it moved.
	Progress func(moved int)
}

// RiverCount is how many jobs the import would move (or would leave).
type RiverCount struct {
	State, Kind string
	N           int64
}

// riverJob is one locked river_job row.
type riverJob struct {
	id                   int64
	state, kind, queue   string
	priority             int16
	args                 string
	attempt, maxAttempts int16
	scheduledAt, created time.Time
	errors, tags         []string
	metadata             string
	uniqueKey            []byte
	uniqueStates         *string
}

// riverImport is one run: its statements and options.
type riverImport struct {
	o      RiverOptions
	q      map[string]string
	states []string
}

// River moves River's waiting jobs into skiplock (see the package comment
// for how each batch commits).
func River(ctx context.Context, o RiverOptions) (Summary, error) {
	if o.Schema == "" {
		o.Schema = "public"
	}
	if o.BatchSize <= 0 {
		o.BatchSize = DefaultBatchSize
	}
	if o.Source == o.Dest {
		o.SameDatabase = true
	}
	r := &riverImport{o: o, q: sqlfile.Render(rawSQL, o.Schema, nil), states: RiverStates}
	sum := newSummary("river", o.DryRun)
	start := time.Now()
	if o.IncludeRunning {
		live, err := r.liveLeaders(ctx)
		if err != nil {
			return sum, err
		}
		if live > 0 {
			return sum, ErrRiverAlive
		}
		r.states = append(append([]string(nil), RiverStates...), "running")
	}
	if o.DryRun {
		counts, err := r.counts(ctx)
		if err != nil {
			return sum, err
		}
		for _, c := range counts {
			if r.movable(c.State) {
				sum.moved(c.State, c.Kind, c.N)
			} else {
				sum.Left[c.State] += c.N
			}
		}
		sum.finish(start, lockTimer{})
		return sum, nil
	}
	var lt lockTimer
	var after int64
	kept := int64(0) // rows left in a movable state on purpose (invalid, unique key held)
	for {
		b, err := r.batch(ctx, after)
		if err != nil {
			sum.finish(start, lt)
			return sum, err
		}
		if b.seen == 0 {
			break
		}
		after = b.last
		lt.add(b.held)
		for _, m := range b.moved {
			sum.moved(m.State, m.Kind, m.N)
		}
		for reason, n := range b.left {
			sum.Left[reason] += n
			kept += n
		}
		if o.Progress != nil {
			o.Progress(int(b.total))
		}
	}
	counts, err := r.counts(ctx)
	if err != nil {
		sum.finish(start, lt)
		return sum, err
	}
	waiting := -kept
	for _, c := range counts {
		if r.movable(c.State) {
			waiting += c.N
		} else {
			sum.Left[c.State] += c.N
		}
	}
	if waiting > 0 {
		sum.Left["waiting (locked by River or inserted during the import)"] = waiting
	}
	sum.finish(start, lt)
	return sum, nil
}

func (r *riverImport) movable(state string) bool {
	for _, s := range r.states {
		if s == state {
			return true
		}
	}
	return false
}

// batchResult is what one batch did.
type batchResult struct {
	seen  int   // rows locked
	last  int64 // the last id locked: the next batch starts after it
	total int64
	moved []RiverCount
	left  map[string]int64
	held  time.Duration // from the lock to the source's commit
}

// batch moves the next batch after id after.
func (r *riverImport) batch(ctx context.Context, after int64) (batchResult, error) {
	var b batchResult
	if r.o.SameDatabase {
		var start time.Time
		err := pgx.BeginFunc(ctx, r.o.Dest, func(tx pgx.Tx) error {
			start = time.Now()
			var err error
			b, err = r.move(ctx, tx, tx, after, false)
			return err
		})
		b.held = time.Since(start)
		return b, err
	}
	// Two databases: skiplock's transaction commits inside River's, whose
	// locks keep River's workers off the rows until they are deleted. A
	// crash between the two commits leaves the rows in River and the jobs
	// in skiplock, each with the unique key "river:<id>" (or River's own
	// key), so a re-run while they are still in flight enqueues nothing new.
	src, err := r.o.Source.Begin(ctx)
	if err != nil {
		return b, err
	}
	defer func() { _ = src.Rollback(ctx) }()
	start := time.Now()
	err = pgx.BeginFunc(ctx, r.o.Dest, func(tx pgx.Tx) error {
		b, err = r.move(ctx, src, tx, after, true)
		return err
	})
	if err != nil {
		return b, err
	}
	if err := src.Commit(ctx); err != nil {
		return b, fmt.Errorf("river: commit the deletion (the batch is in skiplock; a re-run removes it from River): %w", err)
	}
	b.held = time.Since(start)
	return b, nil
}

// move locks a batch in src, enqueues it in dst and deletes the rows it
// enqueued from src. keyEvery gives every job a unique key (two databases).
func (r *riverImport) move(ctx context.Context, src, dst pgx.Tx, after int64, keyEvery bool) (batchResult, error) {
	b := batchResult{left: map[string]int64{}}
	jobs, err := r.lock(ctx, src, after)
	if err != nil {
		return b, err
	}
	b.seen = len(jobs)
	if len(jobs) == 0 {
		return b, nil
	}
	b.last = jobs[len(jobs)-1].id
	var plain []skiplock.EnqueueParams
	var plainJobs, done []riverJob
	var keyed []struct {
		job riverJob
		p   skiplock.EnqueueParams
	}
	for _, j := range jobs {
		p := riverParams(j)
		if keyEvery && p.UniqueKey == "" {
			p.UniqueKey = fmt.Sprintf("river:%d", j.id)
		}
		if err := r.o.Client.Validate(p); err != nil {
			b.left[invalidReason(err)]++
			continue
		}
		if p.UniqueKey == "" {
			plain = append(plain, p)
			plainJobs = append(plainJobs, j)
		} else {
			keyed = append(keyed, struct {
				job riverJob
				p   skiplock.EnqueueParams
			}{j, p})
		}
	}
	if len(plain) > 0 {
		n, err := r.o.Client.EnqueueManyTx(ctx, dst, plain)
		if err != nil {
			return b, err
		}
		if n != int64(len(plain)) {
			return b, fmt.Errorf("river: enqueued %d of %d jobs", n, len(plain))
		}
		done = append(done, plainJobs...)
	}
	for _, k := range keyed {
		res, err := r.o.Client.EnqueueTx(ctx, dst, k.p)
		if err != nil {
			return b, err
		}
		if !res.Inserted && !keyEvery {
			// A job with this unique key is in flight in skiplock already:
			// River's row stays, for River's workers (or a later import).
			b.left["unique key held"]++
			continue
		}
		done = append(done, k.job)
	}
	ids := make([]int64, len(done))
	counts := map[[2]string]int64{}
	for i, j := range done {
		ids[i] = j.id
		counts[[2]string{j.state, j.kind}]++
	}
	if len(ids) > 0 {
		if _, err := src.Exec(ctx, r.q["river_delete"], ids); err != nil {
			return b, fmt.Errorf("river: delete moved rows: %w", err)
		}
	}
	for k, n := range counts {
		b.moved = append(b.moved, RiverCount{State: k[0], Kind: k[1], N: n})
		b.total += n
	}
	return b, nil
}

func (r *riverImport) lock(ctx context.Context, tx pgx.Tx, after int64) ([]riverJob, error) {
	rows, err := tx.Query(ctx, r.q["river_lock_batch"], r.states, nilIfEmpty(r.o.Kinds), nilIfEmpty(r.o.Queues),
		after, r.o.BatchSize)
	if err != nil {
		return nil, fmt.Errorf("river: lock a batch: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (riverJob, error) {
		var j riverJob
		err := row.Scan(&j.id, &j.state, &j.kind, &j.queue, &j.priority, &j.args, &j.attempt, &j.maxAttempts,
			&j.scheduledAt, &j.created, &j.errors, &j.tags, &j.metadata, &j.uniqueKey, &j.uniqueStates)
		return j, err
	})
}

func (r *riverImport) counts(ctx context.Context) ([]RiverCount, error) {
	rows, err := r.o.Source.Query(ctx, r.q["river_counts"], nilIfEmpty(r.o.Kinds), nilIfEmpty(r.o.Queues))
	if err != nil {
		return nil, fmt.Errorf("river: count jobs: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (RiverCount, error) {
		var c RiverCount
		err := row.Scan(&c.State, &c.Kind, &c.N)
		return c, err
	})
}

func (r *riverImport) liveLeaders(ctx context.Context) (int64, error) {
	var n int64
	if err := r.o.Source.QueryRow(ctx, r.q["river_live_leaders"]).Scan(&n); err != nil {
		return 0, fmt.Errorf("river: read river_leader: %w", err)
	}
	return n, nil
}

// RiverPriority maps River's priority (1 the highest of 1..4, the default)
// to skiplock's (larger runs earlier, 0 the default): 1 → 0, 2 → -1,
// 3 → -2, 4 → -3. River's default stays skiplock's default, so imported
// jobs and new ones enqueued without a priority take turns as before.
func RiverPriority(p int) int { return 1 - p }

// riverParams maps one River row to the skiplock job that replaces it.
// River's attempt count does not carry into skiplock's (which counts its own
// claims): the job gets the attempts River had left, and River's count,
// errors, tags and metadata travel in the job's metadata under "river".
func riverParams(j riverJob) skiplock.EnqueueParams {
	p := skiplock.EnqueueParams{
		Queue:       j.queue,
		Kind:        j.kind,
		Payload:     json.RawMessage(j.args),
		Priority:    RiverPriority(int(j.priority)),
		RunAt:       j.scheduledAt,
		MaxAttempts: clampAttempts(int(j.maxAttempts) - int(j.attempt)),
	}
	meta := map[string]any{"id": j.id, "state": j.state, "attempt": j.attempt, "max_attempts": j.maxAttempts,
		"created_at": j.created.UTC().Format(time.RFC3339Nano)}
	if len(j.tags) > 0 {
		meta["tags"] = j.tags
	}
	if j.metadata != "" && j.metadata != "{}" {
		meta["metadata"] = json.RawMessage(j.metadata)
	}
	if len(j.errors) > 0 {
		errs := make([]map[string]any, 0, len(j.errors))
		for _, e := range j.errors {
			var m map[string]any
			if json.Unmarshal([]byte(e), &m) == nil {
				delete(m, "trace") // stack traces: too large to carry, the error text is kept
				errs = append(errs, m)
			}
		}
		meta["errors"] = errs
	}
	if len(j.uniqueKey) > 0 && riverUniqueActive(j.uniqueStates, j.state) {
		p.UniqueKey = "river:" + hex.EncodeToString(j.uniqueKey)
		meta["unique_key"] = hex.EncodeToString(j.uniqueKey)
		if j.uniqueStates != nil {
			meta["unique_states"] = *j.uniqueStates // River's bitmask, as river_job_state_in_bitmask reads it
		}
	}
	p.Metadata = fitMetadata(skiplock.Metadata{"river": meta}, "river", "errors", "metadata")
	return p
}

// riverBits is the position of each state in River's unique_states
// bitmask, as river_job_state_in_bitmask reads it (get_bit, leftmost 0).
var riverBits = map[string]int{"available": 7, "cancelled": 6, "completed": 5, "discarded": 4, "pending": 3,
	"retryable": 2, "running": 1, "scheduled": 0}

// riverUniqueActive reports whether a row's unique key binds in its state:
// River enforces it only in the states of unique_states (all of them when
// the row predates the bitmask).
func riverUniqueActive(states *string, state string) bool {
	if states == nil {
		return true
	}
	i, ok := riverBits[state]
	return ok && i < len(*states) && (*states)[i] == '1'
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}
