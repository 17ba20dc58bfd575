package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"
)

// ClaimedRow is a claimed job's row as its handler sees it, whatever the
// type its payload decodes into: the root package's skiplock.JobRow,
// embedded in skiplock.Job[T]. The claim (claim.sql's RETURNING) fills it.
type ClaimedRow struct {
	ID       int64
	Queue    string
	Kind     string
	Priority int
	// Attempt is 1 on the first run; counted at claim time.
	Attempt     int
	MaxAttempts int
	// Payload is the job's payload as stored (a JSON object).
	Payload     json.RawMessage
	RunAt       time.Time
	CreatedAt   time.Time
	AttemptedAt time.Time
	Tenant      string
	Entity      string
	UniqueKey   string
	// LeaseToken is this claim's fencing token. Every claim takes a new one
	// from a database sequence, so the tokens of successive leases of the
	// same job strictly increase: a worker that lost its lease always holds a
	// smaller token than the job's current owner. External systems can fence
	// writes with it (accept a write only if its token is at least the
	// highest one seen for the job); the job's stable idempotency key is ID.
	// See docs/fencing.md.
	LeaseToken int64
}

// ClaimedJob is one row returned by a claim: everything a worker needs to run
// the job and to prove, later, that it still holds the lease.
type ClaimedJob struct {
	ClaimedRow
	Metadata []byte // the job's metadata object as stored; nil when it has none
	// Durable is false when the job can have no durable state: it is no
	// workflow task and no run of it ever recorded a checkpoint (task_id is
	// NULL; step_put marks a job when it records one), so a run need not
	// read its checkpoints.
	Durable bool
}

// ClaimParams selects what a pool claims.
type ClaimParams struct {
	Queues    []string
	Kinds     []string // nil: any kind
	Batch     int
	WorkerID  string
	Lease     time.Duration
	TenantCap int // 0: no per-tenant cap
	// After holds, per queue, the claim-order position to start after: the
	// last job this claimer took from that queue. A queue without one is
	// read from the front. Ignored by the tenant-capped claim (TenantAfter).
	After map[string]Bound
	// TenantAfter holds the tenant-capped claim's bounds: per queue, per
	// tenant ("" for the jobs without one), the last job this claimer took
	// of that tenant; the claim (claim_capped_after) reads each tenant after
	// its bound, and tenants without one from their front. nil: the whole
	// claim from the front (claim_capped).
	TenantAfter map[string]map[string]Bound
	// Limits names the concurrency limits that cover this claimer's work
	// (LimitsCovering): the claim then runs in a transaction holding their
	// locks and takes only what they allow. Limits come first: a pool they
	// cover claims this way even with a TenantCap (a limit is a guarantee,
	// the cap a preference).
	Limits []string
	// LimitRoom, with Limits, is the claimer's memory of whether its limits
	// had room for a whole batch: while they do (Tight false), the claim
	// checks it under their locks (limit_room) and then claims like an
	// unlimited claimer (after After's bounds); when they do not, Claim sets
	// Tight and claims with claim_limited, from the front, as it does from
	// then on while Tight stays set (the claimer clears it now and then to
	// look again). nil: always claim_limited.
	LimitRoom *LimitRoom
	// TenantCursor holds, per queue, the last tenant the tenant-capped
	// claim visited: the next capped claim starts after it (round robin).
	// Claim updates it in place; nil: from the first tenant, not kept.
	TenantCursor map[string]string
	// VisitCut, when not nil, is set by a tenant-capped claim whose visit
	// of some queue stopped at its step limit (4 × Batch tenants) before
	// it met Batch tenants with jobs: the tenants after the new cursor were
	// not visited, and may have jobs even if the claim came back short
	// (claim_capped_after steps through tenants with nothing after their
	// bounds).
	VisitCut *bool
}

// LimitRoom is a claimer's memory of whether its limits had room for a
// whole batch at its last look (see ClaimParams.LimitRoom).
type LimitRoom struct {
	// Tight: they had not; claim with claim_limited without looking.
	Tight bool
}

// Bound is a position in claim order: priority descending, then run_at,
// then id.
type Bound struct {
	Priority int
	RunAt    time.Time
	ID       int64
}

// BoundOf is the claim-order position of a claimed job.
func BoundOf(j ClaimedJob) Bound { return Bound{Priority: j.Priority, RunAt: j.RunAt, ID: j.ID} }

// Before reports whether b comes before o in claim order.
func (b Bound) Before(o Bound) bool {
	if b.Priority != o.Priority {
		return b.Priority > o.Priority
	}
	if !b.RunAt.Equal(o.RunAt) {
		return b.RunAt.Before(o.RunAt)
	}
	return b.ID < o.ID
}

// Claim claims up to p.Batch ready jobs in one round trip: the claim
// statement (claim, claim_capped or claim_limited, with the limits' locks
// first) in one pipeline, one implicit transaction, after claim_settings. A
// limited claimer whose limits turn out to have no room for a whole batch
// (ClaimParams.LimitRoom) takes a second round trip, with claim_limited.
func (s *Store) Claim(ctx context.Context, db DBTX, p ClaimParams) ([]ClaimedJob, error) {
	var kinds any
	if p.Kinds != nil {
		kinds = p.Kinds
	}
	args := []any{p.Queues, kinds, p.Batch, p.WorkerID, Micros(p.Lease)}
	batch := &pgx.Batch{}
	batch.Queue(s.SQL("claim_settings"))
	var out []ClaimedJob
	scan := func(extra []any, each func(queue string)) func(pgx.Rows) error {
		return func(rows pgx.Rows) error {
			var err error
			out, err = scanClaimed(rows, p.Batch, extra, each)
			return err
		}
	}
	switch {
	case len(p.Limits) > 0 && p.LimitRoom != nil && !p.LimitRoom.Tight:
		// The limits' locks, then whether they have room for the whole
		// batch, then the plain claim, which takes nothing when they have
		// not (claim_gate); then, only in that case, a second round trip
		// with claim_limited.
		room := false
		batch.Queue(s.SQL("limit_locks"), p.Limits)
		batch.Queue(s.SQL("limit_room"), p.Limits, p.Batch).QueryRow(func(r pgx.Row) error { return r.Scan(&room) })
		batch.Queue(s.SQL("claim"), append(args, BoundArgs(p.Queues, p.After)...)...).Query(scan(nil, nil))
		if err := db.SendBatch(ctx, batch).Close(); err != nil {
			return nil, err
		}
		if room {
			return out, nil
		}
		p.LimitRoom.Tight = true
		return s.claimLimited(ctx, db, p, args)
	case len(p.Limits) > 0:
		return s.claimLimited(ctx, db, p, args)
	case p.TenantCap > 0:
		cursors := make([]*string, len(p.Queues))
		for i, q := range p.Queues {
			if c, ok := p.TenantCursor[q]; ok {
				cursors[i] = &c
			}
		}
		var cursor *string
		var cut bool
		batch.Queue(s.SQL("claim_generic_plan"))
		stmt := "claim_capped"
		args = append(args, p.TenantCap, cursors)
		if after := TenantBoundArgs(p.TenantAfter); after[0] != nil {
			stmt, args = "claim_capped_after", append(args, after...)
		}
		batch.Queue(s.SQL(stmt), args...).Query(scan([]any{&cursor, &cut}, func(queue string) {
			if cursor != nil && p.TenantCursor != nil {
				p.TenantCursor[queue] = *cursor
			}
			if cut && p.VisitCut != nil {
				*p.VisitCut = true
			}
		}))
	default:
		batch.Queue(s.SQL("claim"), append(args, BoundArgs(p.Queues, p.After)...)...).Query(scan(nil, nil))
	}
	if err := db.SendBatch(ctx, batch).Close(); err != nil {
		return nil, err
	}
	return out, nil
}

// claimLimited is Claim with claim_limited: the limits' locks before the
// claim, so its snapshot is taken after they are held and includes every
// job claimed by their previous holder, and no limit is exceeded by two
// claimers at once.
func (s *Store) claimLimited(ctx context.Context, db DBTX, p ClaimParams, args []any) ([]ClaimedJob, error) {
	batch := &pgx.Batch{}
	batch.Queue(s.SQL("claim_settings"))
	batch.Queue(s.SQL("limit_locks"), p.Limits)
	var out []ClaimedJob
	batch.Queue(s.SQL("claim_limited"), append(args, p.Limits)...).Query(func(rows pgx.Rows) error {
		var err error
		out, err = scanClaimed(rows, p.Batch, nil, nil)
		return err
	})
	if err := db.SendBatch(ctx, batch).Close(); err != nil {
		return nil, err
	}
	return out, nil
}

// scanClaimed reads a claim's rows (the claim_update fragment's RETURNING
// order) and closes rows. A statement that returns more columns (the
// capped claim's cursor and whether its visit was cut short) gives their
// destinations in extra and sees each row's queue in each, after extra is
// read; its rows without a job (a NULL id: a queue whose visit claimed
// nothing) carry only the queue and extra.
func scanClaimed(rows pgx.Rows, batch int, extra []any, each func(queue string)) ([]ClaimedJob, error) {
	defer rows.Close()
	out := make([]ClaimedJob, 0, batch)
	for rows.Next() {
		var j ClaimedJob
		if extra != nil && rows.RawValues()[0] == nil {
			skip := make([]any, len(rows.FieldDescriptions()))
			skip[1] = &j.Queue
			copy(skip[len(skip)-len(extra):], extra)
			if err := rows.Scan(skip...); err != nil {
				return nil, err
			}
			each(j.Queue)
			continue
		}
		var tenant, entity, unique *string
		dest := []any{&j.ID, &j.Queue, &j.Kind, (*[]byte)(&j.Payload), &j.Priority, &j.Attempt, &j.MaxAttempts,
			&j.RunAt, &j.CreatedAt, &j.AttemptedAt, &j.LeaseToken, &tenant, &entity, &unique, &j.Metadata, &j.Durable}
		dest = append(dest, extra...)
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		j.Tenant, j.Entity, j.UniqueKey = deref(tenant), deref(entity), deref(unique)
		if each != nil {
			each(j.Queue)
		}
		out = append(out, j)
	}
	return out, rows.Err()
}

// BoundArgs spreads per-queue bounds into the claim's three arrays, one
// element per queue in order; a queue without a bound gets NULLs.
func BoundArgs(queues []string, after map[string]Bound) []any {
	if len(after) == 0 {
		return []any{nil, nil, nil}
	}
	prio := make([]*int32, len(queues))
	runAt := make([]*time.Time, len(queues))
	ids := make([]*int64, len(queues))
	for i, q := range queues {
		if b, ok := after[q]; ok {
			pr, ra, id := int32(b.Priority), b.RunAt, b.ID
			prio[i], runAt[i], ids[i] = &pr, &ra, &id
		}
	}
	return []any{prio, runAt, ids}
}

// TenantBoundArgs spreads the capped claim's bounds into claim_capped_after's
// five arrays (queue, tenant, priority, run_at, id), one element per tenant;
// nil or empty: five nils (claim_capped, from the front).
func TenantBoundArgs(after map[string]map[string]Bound) []any {
	n := 0
	for _, ts := range after {
		n += len(ts)
	}
	if n == 0 {
		return []any{nil, nil, nil, nil, nil}
	}
	queues, tenants := make([]string, 0, n), make([]string, 0, n)
	prio, runAt, ids := make([]int32, 0, n), make([]time.Time, 0, n), make([]int64, 0, n)
	for q, ts := range after {
		for t, b := range ts {
			queues, tenants = append(queues, q), append(tenants, t)
			prio, runAt, ids = append(prio, int32(b.Priority)), append(runAt, b.RunAt), append(ids, b.ID)
		}
	}
	return []any{queues, tenants, prio, runAt, ids}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Lease identifies one claim of one job: the fence every write carries.
type Lease struct {
	ID    int64
	Token int64
}

func split(ls []Lease) (ids, tokens []int64) {
	ids = make([]int64, len(ls))
	tokens = make([]int64, len(ls))
	for i, l := range ls {
		ids[i], tokens[i] = l.ID, l.Token
	}
	return ids, tokens
}

// Heartbeat extends the leases; the result maps each job still held to
// whether someone asked to cancel it. Jobs absent from it lost their lease.
func (s *Store) Heartbeat(ctx context.Context, db DBTX, ls []Lease, lease time.Duration, worker string) (map[int64]bool, error) {
	ids, tokens := split(ls)
	out := make(map[int64]bool, len(ls))
	var id int64
	var cancel bool
	err := s.fencedQuery(ctx, db, "heartbeat", []any{ids, tokens, Micros(lease), worker}, func(rows pgx.Rows) error {
		_, err := pgx.ForEachRow(rows, []any{&id, &cancel}, func() error {
			out[id] = cancel
			return nil
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Query is one statement with its arguments, for WriteBatch.
type Query struct {
	SQL  string
	Args []any
}

// CompleteQuery finishes jobs successfully (deleting them, or archiving
// them into jobs_done); it returns the ids whose lease was still held.
func (s *Store) CompleteQuery(ls []Lease, worker string, archive bool) Query {
	ids, tokens := split(ls)
	q := s.SQL("complete_delete")
	if archive {
		q = s.SQL("complete_archive")
	}
	return Query{q, []any{ids, tokens, worker}}
}

// WriteBatch sends statements that each return the ids they matched
// (CompleteQuery, RescheduleQuery, DeadLetterQuery) in one round trip, as
// one pipeline and therefore one implicit transaction: all of them commit
// or none does, and no transaction stays open waiting on this process.
// write_settings goes first in the same pipeline (no sequential scan of
// jobs, whatever plan the connection cached: see lease.sql).
func (s *Store) WriteBatch(ctx context.Context, db DBTX, qs []Query) (map[int64]bool, error) {
	out := map[int64]bool{}
	b := &pgx.Batch{}
	b.Queue(s.SQL("write_settings"))
	for _, q := range qs {
		b.Queue(q.SQL, q.Args...).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var id int64
				if err := rows.Scan(&id); err != nil {
					return err
				}
				out[id] = true
			}
			return rows.Err()
		})
	}
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	return out, nil
}

// Reschedule is one job going back to ready.
type Reschedule struct {
	Lease
	Delay  time.Duration
	Refund bool    // true: the attempt is not spent (snooze, never started)
	Error  *string // nil keeps the previous last_error
}

// RescheduleQuery returns jobs to ready; it returns the ids whose lease
// was still held.
func (s *Store) RescheduleQuery(rs []Reschedule, worker string) Query {
	n := len(rs)
	ids, tokens, delays := make([]int64, n), make([]int64, n), make([]int64, n)
	refunds, errs := make([]int32, n), make([]*string, n)
	for i, r := range rs {
		ids[i], tokens[i], delays[i], errs[i] = r.ID, r.Token, Micros(r.Delay), r.Error
		if r.Refund {
			refunds[i] = 1
		}
	}
	return Query{s.SQL("reschedule"), []any{ids, tokens, delays, refunds, errs, worker}}
}

// Dead is one job going to the dead-letter table.
type Dead struct {
	Lease
	Reason string
	Error  string
}

// DeadLetterQuery moves jobs to jobs_dead; it returns the ids whose lease
// was still held.
func (s *Store) DeadLetterQuery(ds []Dead, worker string) Query {
	n := len(ds)
	ids, tokens, reasons, errs := make([]int64, n), make([]int64, n), make([]string, n), make([]string, n)
	for i, d := range ds {
		ids[i], tokens[i], reasons[i], errs[i] = d.ID, d.Token, d.Reason, d.Error
	}
	return Query{s.SQL("dead_letter"), []any{ids, tokens, reasons, errs, worker}}
}

// Reap returns expired leases to ready (or to the dead-letter table) and
// reports how many went each way.
func (s *Store) Reap(ctx context.Context, db DBTX, batch int) (back, dead int, err error) {
	err = s.keyedRow(ctx, db, "reap", []any{batch}, &back, &dead)
	return back, dead, err
}

// ReapTurn takes the reaper's turn for worker when it is due, making the
// next one due gap from now, and reports whether this process should reap.
func (s *Store) ReapTurn(ctx context.Context, db DBTX, gap time.Duration, worker string) (bool, error) {
	var holder string
	err := db.QueryRow(ctx, s.SQL("reap_turn"), gap.Microseconds(), worker).Scan(&holder)
	if isNoRows(err) {
		return false, nil
	}
	return err == nil, err
}

// ReapDefer makes the next reaper's turn due no sooner than d from now.
func (s *Store) ReapDefer(ctx context.Context, db DBTX, d time.Duration) error {
	_, err := db.Exec(ctx, s.SQL("reap_defer"), d.Microseconds())
	return err
}

// RotateRing runs one turn of the ring of generations (migration 016): it
// reports the ready rows it moved to jobs_keyed and the
// generation it truncated (-1: none this turn).
func (s *Store) RotateRing(ctx context.Context, db DBTX, lockTimeout time.Duration) (moved int64, truncated int, err error) {
	err = db.QueryRow(ctx, s.SQL("rotate_ring"), lockTimeout.Milliseconds()).Scan(&moved, &truncated)
	return moved, truncated, err
}

// Cancel cancels a job by id and returns the state it was in ("ready",
// "running", or "" when no such job is in flight).
func (s *Store) Cancel(ctx context.Context, db DBTX, id int64) (string, error) {
	var state string
	err := db.QueryRow(ctx, s.SQL("cancel"), id).Scan(&state)
	return state, err
}

// WorkerBeat is the process row written with each heartbeat.
type WorkerBeat struct {
	ID          string
	Hostname    string
	PID         int
	Queues      []string
	Concurrency int
	Running     int
	Claimed     int64
	Completed   int64
	Failed      int64
	ClaimP99MS  *float64
	Stopped     bool
	// Handles is what each pool claims, for the unhandled-kinds check.
	Handles []PoolHandles
}

// PoolHandles is one pool's queues and kinds (nil Kinds: any kind), as
// stored in workers.handles.
type PoolHandles struct {
	Queues []string `json:"queues"`
	Kinds  []string `json:"kinds"`
}

// BeatWorker upserts the process row.
func (s *Store) BeatWorker(ctx context.Context, db DBTX, w WorkerBeat) error {
	handles, err := json.Marshal(w.Handles)
	if err != nil {
		return err
	}
	_, err = db.Exec(ctx, s.SQL("worker_beat"), w.ID, w.Hostname, w.PID, w.Queues, w.Concurrency, w.Running,
		w.Claimed, w.Completed, w.Failed, w.ClaimP99MS, w.Stopped, string(handles))
	return err
}

// EnqueueArgs are the parameters of one enqueue, already validated.
type EnqueueArgs struct {
	Queue       string
	Kind        string
	Payload     string // JSON object text
	Priority    int
	RunAt       *time.Time // nil: now + Delay, by the database clock
	Delay       time.Duration
	MaxAttempts *int
	UniqueKey   *string
	Tenant      *string
	Entity      *string
	Bump        bool
	Metadata    *string // JSON object text; nil: none
	LimitWeight *int    // weight in rate limits, 2..MaxLimitWeight; nil: 1
}

// Enqueue inserts one job through the enqueue_job function, or finds the
// in-flight job holding a's unique key: inserted says which.
func (s *Store) Enqueue(ctx context.Context, db Querier, a EnqueueArgs) (id int64, inserted bool, err error) {
	err = db.QueryRow(ctx, s.SQL("enqueue"), a.Args()...).Scan(&id, &inserted)
	return id, inserted, err
}

// CompleteOne completes the job of lease l inside the caller's transaction
// (CompleteTx), fenced like every lease holder's write; archive keeps it in
// jobs_done. pgx.ErrNoRows: the lease is gone.
func (s *Store) CompleteOne(ctx context.Context, db Querier, l Lease, worker string, archive bool) error {
	q := s.SQL("complete_one_delete")
	if archive {
		q = s.SQL("complete_one_archive")
	}
	// In the caller's transaction, with the caller's planner settings put
	// back after: see fencedRowInTx.
	var id int64
	return s.fencedRowInTx(ctx, db, q, []any{l.ID, l.Token, worker}, &id)
}

// Args returns the positional arguments of the "enqueue" statement.
func (a EnqueueArgs) Args() []any {
	return []any{a.Queue, a.Kind, a.Payload, a.Priority, a.RunAt, a.MaxAttempts, a.UniqueKey,
		a.Tenant, a.Entity, a.Bump, Micros(a.Delay), a.Metadata, a.LimitWeight}
}

// FencedWrite is one of the lease holder's fenced writes, named, with
// sample arguments (one made-up lease of worker) for EXPLAIN.
type FencedWrite struct {
	Name string
	Query
}

// FencedWrites returns every statement a lease holder writes with (the
// heartbeat, both completions, CompleteTx's two, the reschedule used for
// retries, snoozes and hand-backs, dead-lettering, and a handler's durable
// writes to its own job: step and timer checkpoints, a task's output, a
// signal wait's lock and its sleep) with arguments that
// name one lease of worker. They are meant to be EXPLAINed, never run: each
// must reach its rows through jobs_pkey alone (lease.sql explains why), which
// the tests and the doctor's fenced_writes check hold them to.
func (s *Store) FencedWrites(worker string) []FencedWrite {
	l := []Lease{{ID: 1, Token: 1}}
	msg := "explain"
	return []FencedWrite{
		{"heartbeat", Query{s.SQL("heartbeat"), []any{[]int64{1}, []int64{1}, Micros(time.Minute), worker}}},
		{"complete_delete", s.CompleteQuery(l, worker, false)},
		{"complete_archive", s.CompleteQuery(l, worker, true)},
		{"complete_one_delete", Query{s.SQL("complete_one_delete"), []any{int64(1), int64(1), worker}}},
		{"complete_one_archive", Query{s.SQL("complete_one_archive"), []any{int64(1), int64(1), worker}}},
		{"reschedule", s.RescheduleQuery([]Reschedule{{Lease: l[0], Error: &msg}}, worker)},
		{"dead_letter", s.DeadLetterQuery([]Dead{{Lease: l[0], Reason: "error", Error: msg}}, worker)},
		// A handler's durable writes to its own job (workflow.sql).
		{"step_put", Query{s.SQL("step_put"), []any{int64(1), int64(1), worker, "explain", "{}"}}},
		{"step_put_many", Query{s.SQL("step_put_many"), []any{[]int64{1}, []int64{1}, []string{"explain"}, []string{"{}"}, worker}}},
		{"timer_put", Query{s.SQL("timer_put"), []any{int64(1), int64(1), worker, "sleep:explain", Micros(time.Minute), nil}}},
		{"task_set_output", Query{s.SQL("task_set_output"), []any{int64(1), int64(1), worker, "{}"}}},
		{"wait_lock", Query{s.SQL("wait_lock"), []any{int64(1), int64(1), worker}}},
		{"wait_sleep", Query{s.SQL("wait_sleep"), []any{int64(1), int64(1), worker, time.Unix(0, 0)}}},
	}
}

// AdvanceLeaseTokens moves the lease-token sequence to the current time in
// microseconds, or a million past its own value when that is higher, and
// returns its new value: run
// once after a standby is promoted, so no token the old primary handed out
// is handed out again (see advance_lease_tokens in lease.sql).
func (s *Store) AdvanceLeaseTokens(ctx context.Context, db DBTX) (int64, error) {
	var v int64
	err := db.QueryRow(ctx, s.SQL("advance_lease_tokens")).Scan(&v)
	return v, err
}

// CoveringLimit is a limit that covers a claimer's work (LimitsCovering).
type CoveringLimit struct {
	Name string
	Rate bool // a rate limit (else a concurrency limit)
}

// LimitsCovering returns the limits that cover work a claimer of queues
// and kinds (nil: any kind) may take, by name.
func (s *Store) LimitsCovering(ctx context.Context, db DBTX, queues, kinds []string) ([]CoveringLimit, error) {
	var k any
	if kinds != nil {
		k = kinds
	}
	rows, err := db.Query(ctx, s.SQL("limits_covering"), queues, k)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[CoveringLimit])
}

// LimitNextStart returns how long until the first full rate window among
// limits has room again (by the database clock), and false when none of
// them is full.
func (s *Store) LimitNextStart(ctx context.Context, db DBTX, limits []string) (time.Duration, bool, error) {
	var secs *float64
	if err := db.QueryRow(ctx, s.SQL("limit_next_start"), limits).Scan(&secs); err != nil || secs == nil {
		return 0, false, err
	}
	return time.Duration(*secs * float64(time.Second)), true, nil
}
