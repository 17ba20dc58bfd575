package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

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
// whether someone asked to cancel it. Jobs of ls absent from it lost their
// lease. inTx are leases a handler's own transaction ended (CompleteTx):
// their rows are not waited for while that transaction holds them, and are
// absent from the result then, as when it committed (heartbeat in
// lease.sql).
func (s *Store) Heartbeat(ctx context.Context, db DBTX, ls, inTx []Lease, lease time.Duration, worker string) (map[int64]bool, error) {
	ids, tokens := split(ls)
	txIDs, txTokens := split(inTx)
	out := make(map[int64]bool, len(ls)+len(inTx))
	var id int64
	var cancel bool
	err := s.fencedQuery(ctx, db, "heartbeat", []any{ids, tokens, Micros(lease), worker, txIDs, txTokens}, func(rows pgx.Rows) error {
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
// With archive and announce, the statement tells waiters which jobs it
// completed (complete_archive); without history the runtime's notify_done
// does.
func (s *Store) CompleteQuery(ls []Lease, worker string, archive, announce bool) Query {
	ids, tokens := split(ls)
	if archive {
		return Query{s.SQL("complete_archive"), []any{ids, tokens, worker, announce}}
	}
	return Query{s.SQL("complete_delete"), []any{ids, tokens, worker}}
}

// Finish is the success of a run that returned a result or reported
// progress (issue 39): what it leaves with its job in jobs_done. Either may
// be nil: a nil Progress keeps the job's last coalesced progress.
type Finish struct {
	Lease
	Result   []byte // JSON, at most the bound the root package states (MaxResultBytes)
	Progress []byte // JSON
}

// CompleteResultQuery archives the jobs of fs with their results and last
// progress (complete_archive_result); it returns the ids whose lease was
// still held. Only runs with a result or progress take it: the others'
// completion writes no more than before. With announce, it tells waiters
// which jobs it completed and their results.
func (s *Store) CompleteResultQuery(fs []Finish, worker string, announce bool) Query {
	n := len(fs)
	ids, tokens, results, progress := make([]int64, n), make([]int64, n), make([]*string, n), make([]*string, n)
	for i, f := range fs {
		ids[i], tokens[i] = f.ID, f.Token
		if f.Result != nil {
			r := string(f.Result)
			results[i] = &r
		}
		if f.Progress != nil {
			p := string(f.Progress)
			progress[i] = &p
		}
	}
	return Query{s.SQL("complete_archive_result"), []any{ids, tokens, worker, results, progress, announce}}
}

// Progress is a running job's latest progress, as JSON, for its lease.
type Progress struct {
	Lease
	JSON []byte
}

// WriteProgress writes the coalesced progress of running jobs in one
// statement, fenced by each lease (progress_write); it returns the ids
// still held.
func (s *Store) WriteProgress(ctx context.Context, db DBTX, ps []Progress, worker string) (map[int64]bool, error) {
	n := len(ps)
	ids, tokens, docs := make([]int64, n), make([]int64, n), make([]string, n)
	for i, p := range ps {
		ids[i], tokens[i], docs[i] = p.ID, p.Token, string(p.JSON)
	}
	out := make(map[int64]bool, n)
	var id int64
	err := s.fencedQuery(ctx, db, "progress_write", []any{ids, tokens, docs, worker}, func(rows pgx.Rows) error {
		_, err := pgx.ForEachRow(rows, []any{&id}, func() error {
			out[id] = true
			return nil
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// WriteBatch sends statements that each return the ids they matched
// (CompleteQuery, RescheduleQuery, DeadLetterQuery) in one round trip, as
// one pipeline and therefore one implicit transaction: all of them commit
// or none does, and no transaction stays open waiting on this process.
// write_batch_settings goes first in the same pipeline (no sequential scan
// of jobs, whatever plan the connection cached, and the generic plan: see
// lease.sql).
//
// after are statements whose rows are not read (notify_done), sent last in
// the same pipeline, so that they take effect when the writes commit.
func (s *Store) WriteBatch(ctx context.Context, db DBTX, qs []Query, after ...Query) (map[int64]bool, error) {
	out := map[int64]bool{}
	b := &pgx.Batch{}
	b.Queue(s.SQL("write_batch_settings"))
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
	for _, q := range after {
		b.Queue(q.SQL, q.Args...)
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
	// MaxAttempts, when positive and below the job's, becomes its
	// max_attempts: the handler's cap (WithMaxAttempts) that decided.
	MaxAttempts int
	// Ended: the handler's own transaction ended the lease (CompleteTx) and
	// this is the fallback should it not have committed; a row that
	// transaction still holds is not waited for, and left as it is
	// (reschedule in lease.sql).
	Ended bool
}

// RescheduleQuery returns jobs to ready; it returns the ids whose lease
// was still held.
func (s *Store) RescheduleQuery(rs []Reschedule, worker string) Query {
	n := len(rs)
	ids, tokens, delays := make([]int64, n), make([]int64, n), make([]int64, n)
	refunds, errs, caps, ended := make([]int32, n), make([]*string, n), make([]int32, n), make([]bool, n)
	for i, r := range rs {
		ids[i], tokens[i], delays[i], errs[i], caps[i], ended[i] = r.ID, r.Token, Micros(r.Delay), r.Error, int32(r.MaxAttempts), r.Ended
		if r.Refund {
			refunds[i] = 1
		}
	}
	return Query{s.SQL("reschedule"), []any{ids, tokens, delays, refunds, errs, worker, caps, ended}}
}

// Dead is one job going to the dead-letter table.
type Dead struct {
	Lease
	Reason string
	Error  string
	// MaxAttempts: as Reschedule.MaxAttempts, stored with the dead letter.
	MaxAttempts int
	// Ended: as Reschedule.Ended.
	Ended bool
}

// DeadLetterQuery moves jobs to jobs_dead; it returns the ids whose lease
// was still held.
func (s *Store) DeadLetterQuery(ds []Dead, worker string) Query {
	n := len(ds)
	ids, tokens, reasons, errs := make([]int64, n), make([]int64, n), make([]string, n), make([]string, n)
	caps, ended := make([]int32, n), make([]bool, n)
	for i, d := range ds {
		ids[i], tokens[i], reasons[i], errs[i], caps[i], ended[i] = d.ID, d.Token, d.Reason, d.Error, int32(d.MaxAttempts), d.Ended
	}
	return Query{s.SQL("dead_letter"), []any{ids, tokens, reasons, errs, worker, caps, ended}}
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
// stored in workers.handles, and its tenant cap (0: none; `job explain`
// reads it).
type PoolHandles struct {
	Queues    []string `json:"queues"`
	Kinds     []string `json:"kinds"`
	TenantCap int      `json:"tenant_cap,omitempty"`
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
	Queue   string
	Kind    string
	Payload string // JSON object text
	// Sealed is a sealed payload's nonce, ciphertext and tag; Payload then
	// holds its key id, {"skiplock_encrypted": "v1.KEYID"} (migration 24).
	Sealed      []byte
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
	// Uniqueness and modes (enqueue_unique, migration 019).
	UniqueBy     *string       // "args"; nil: by UniqueKey
	UniqueFields []string      // with UniqueBy "args": the payload fields of the key; nil: all
	UniquePeriod time.Duration // 0: in flight only
	Mode         *string       // "supersede", "debounce", "throttle"; nil: none
	ModeWindow   time.Duration // debounce's and throttle's window
}

// Keyed reports whether the job needs a key decision (a unique key, a
// derived one, a period or a mode): such a job goes through enqueue_job,
// never EnqueueMany's COPY.
func (a EnqueueArgs) Keyed() bool {
	return a.UniqueKey != nil || a.UniqueBy != nil || a.UniquePeriod > 0 || a.Mode != nil
}

// microsOrNil is d in microseconds, or NULL when it is zero.
func microsOrNil(d time.Duration) *int64 {
	if d == 0 {
		return nil
	}
	m := Micros(d)
	return &m
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

// EnqueueClaimed is Enqueue followed, in the same round trip and
// transaction, by claim_enqueued: the job it inserted, claimed for worker
// (its kinds filter and lease as a claim of theirs would have them) and
// returned, running, when the claim's conditions hold; claimed is nil when
// they do not (the job stays ready for any claimer). For a plain job only
// (no unique key or mode, no entity): those may insert nothing, and
// claim_enqueued finds the job by the session's last jobs_id_seq value.
// db must not be in a transaction of the caller's: the pipeline holds back
// the enqueue's wake-up (handoff_quiet) for the rest of its transaction, and
// sends it itself when the claim finds nothing.
func (s *Store) EnqueueClaimed(ctx context.Context, db DBTX, a EnqueueArgs, kinds []string, worker string,
	lease time.Duration) (id int64, inserted bool, claimed *ClaimedJob, err error) {
	if a.Keyed() || a.Entity != nil {
		return 0, false, nil, errors.New("skiplock: EnqueueClaimed: a job with a unique key, mode or entity")
	}
	var res ClaimResult
	batch := &pgx.Batch{}
	batch.Queue(s.SQL("handoff_quiet"))
	batch.Queue(s.SQL("enqueue"), a.Args()...).QueryRow(func(row pgx.Row) error { return row.Scan(&id, &inserted) })
	batch.Queue(s.SQL("claim_settings"))
	batch.Queue(s.SQL("claim_enqueued"), a.Queue, kindsArg(kinds), 1, worker, Micros(lease)).Query(res.scan(1))
	if err := db.SendBatch(ctx, batch).Close(); err != nil {
		return 0, false, nil, err
	}
	if len(res.Jobs) == 1 { // the job inserted: claim_enqueued's id is the sequence's value
		return id, inserted, &res.Jobs[0], nil
	}
	if inserted {
		// Not claimed (its queue paused, say): the wake-up handoff_quiet
		// held back, sent now so that the job waits for no poll. The job
		// is committed: a failed wake-up is not the enqueue's error (a
		// caller would enqueue it again); the pools' next poll finds it.
		_ = s.NotifyQueues(ctx, db, []string{a.Queue})
	}
	return id, inserted, nil, nil
}

// Args returns the positional arguments of the "enqueue" statement.
func (a EnqueueArgs) Args() []any {
	return []any{a.Queue, a.Kind, a.Payload, a.Priority, a.RunAt, a.MaxAttempts, a.UniqueKey,
		a.Tenant, a.Entity, a.Bump, Micros(a.Delay), a.Metadata, a.LimitWeight,
		a.UniqueBy, a.UniqueFields, microsOrNil(a.UniquePeriod), a.Mode, microsOrNil(a.ModeWindow), a.Sealed}
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
		{"heartbeat", Query{s.SQL("heartbeat"), []any{[]int64{1}, []int64{1}, Micros(time.Minute), worker, []int64{2}, []int64{2}}}},
		{"complete_delete", s.CompleteQuery(l, worker, false, false)},
		{"complete_archive", s.CompleteQuery(l, worker, true, false)},
		{"complete_archive_result", s.CompleteResultQuery([]Finish{{Lease: l[0], Result: []byte("{}")}}, worker, false)},
		{"progress_write", Query{s.SQL("progress_write"), []any{[]int64{1}, []int64{1}, []string{"{}"}, worker}}},
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

// kindsArg is a kinds filter as a statement's text[] argument: NULL (any
// kind) for nil, the array otherwise, an empty one included.
func kindsArg(kinds []string) any {
	if kinds == nil {
		return nil
	}
	return kinds
}

// CoveringLimit is a limit that covers a claimer's work (LimitsCovering).
type CoveringLimit struct {
	Name string
	Rate bool // a rate limit (else a concurrency limit)
}

// LimitsCovering returns the limits that cover work a claimer of queues
// and kinds (nil: any kind) may take, by name.
func (s *Store) LimitsCovering(ctx context.Context, db DBTX, queues, kinds []string) ([]CoveringLimit, error) {
	rows, err := db.Query(ctx, s.SQL("limits_covering"), queues, kindsArg(kinds))
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
