package store

import (
	"context"
	"encoding/json"
	"fmt"
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
	// Payload is the job's payload as stored (a JSON object). For a job
	// whose sealed payload is stored split (ClaimedJob.Sealed not nil) it
	// holds only the envelope's key id: {"skiplock_encrypted": "v1.KEYID"}.
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
	// Sealed is the nonce, ciphertext and tag of a sealed payload stored
	// as bytes (the jobs.sealed column, migration 24); nil otherwise.
	Sealed []byte
	// Durable is false when the job can have no durable state: it is no
	// workflow task and no run of it ever recorded a checkpoint (task_id is
	// NULL; step_put marks a job when it records one), so a run need not
	// read its checkpoints.
	Durable bool
}

// ClaimStrategy is which claim statement a claim runs. The worker chooses
// it for each claim (internal/worker, pool.plan) from what it knows: whether
// limits cover the pool and had room at its last look, whether it has a
// tenant cap, and whether its claims from the front got expensive; the store
// runs the strategy it is given and decides nothing. Each has its file in
// sql/.
type ClaimStrategy int

const (
	// ClaimPlain is claim (claim.sql): each queue read from the front, or
	// after its bound in ClaimRequest.After.
	ClaimPlain ClaimStrategy = iota
	// ClaimWithinRoom is the claim of a pool that concurrency limits cover
	// while they had room for a whole batch at its last look
	// (claim_limited.sql): under the limits' locks, limit_room looks whether
	// they still have it, and claim takes the batch as ClaimPlain does
	// (after After's bounds); when they have not, claim takes nothing and a
	// second round trip claims with ClaimLimited (ClaimResult.Tight).
	ClaimWithinRoom
	// ClaimLimited is claim_limited (claim_limited.sql): under the limits'
	// locks, from the front, only what every limit covering a job allows. A
	// rate limit always claims this way: only claim_limited records starts.
	ClaimLimited
	// ClaimCapped is claim_capped (claim_capped.sql): at most TenantCap jobs
	// per tenant, the tenants visited round-robin after TenantCursor, each
	// from its front.
	ClaimCapped
	// ClaimCappedAfter is claim_capped_after (claim_capped_after.sql):
	// ClaimCapped with each tenant read after its bound in TenantAfter.
	ClaimCappedAfter
)

// String names the strategy by its statement.
func (s ClaimStrategy) String() string {
	switch s {
	case ClaimPlain:
		return "claim"
	case ClaimWithinRoom:
		return "claim within the limits' room"
	case ClaimLimited:
		return "claim_limited"
	case ClaimCapped:
		return "claim_capped"
	case ClaimCappedAfter:
		return "claim_capped_after"
	}
	return fmt.Sprintf("ClaimStrategy(%d)", int(s))
}

// ClaimRequest is one claim: what to claim and how (Strategy). Claim only
// reads it.
type ClaimRequest struct {
	// Strategy is the claim statement to run; the zero value is ClaimPlain
	// from the front.
	Strategy ClaimStrategy
	Queues   []string
	Kinds    []string // nil: any kind
	Batch    int
	WorkerID string
	Lease    time.Duration
	// After holds, per queue, the claim-order position to start after: the
	// last job this claimer took from that queue. A queue without one is
	// read from the front. ClaimPlain and ClaimWithinRoom only.
	After map[string]Bound
	// Limits names the limits that cover this claimer's work
	// (LimitsCovering): the claim runs holding their locks and takes only
	// what they allow. ClaimWithinRoom and ClaimLimited only.
	Limits []string
	// TenantCap is the most jobs of one tenant a batch takes while others
	// have work. ClaimCapped and ClaimCappedAfter only, which require it.
	TenantCap int
	// TenantCursor holds, per queue, the last tenant the previous capped
	// claim visited: this one starts after it (round robin); a queue
	// without one starts at the first tenant. The claim's new cursors come
	// back in ClaimResult.Cursors.
	TenantCursor map[string]string
	// TenantAfter holds ClaimCappedAfter's bounds: per queue, per tenant (""
	// for the jobs without one), the last job this claimer took of that
	// tenant; tenants without one are read from their front.
	TenantAfter map[string]map[string]Bound
}

// ClaimResult is what a claim took and what it learned for the next one.
type ClaimResult struct {
	Jobs []ClaimedJob
	// Cursors holds, after a capped claim, per queue the last tenant its
	// visit reached: the next capped claim's TenantCursor for that queue
	// (a queue whose visit found no tenant has none).
	Cursors map[string]string
	// VisitCut reports a capped claim whose visit of some queue stopped at
	// its step limit (4 × Batch tenants) before it met Batch tenants with
	// jobs: the tenants after the new cursor were not visited, and may have
	// jobs even if the claim came back short (claim_capped_after steps
	// through tenants with nothing after their bounds).
	VisitCut bool
	// Tight reports a ClaimWithinRoom claim whose limits had no room for a
	// whole batch: it claimed with claim_limited instead, as the claimer
	// should from now on until it looks again.
	Tight bool
}

// check refuses a request whose fields do not fit its strategy: a field
// the strategy ignores would be a decision silently not taken.
func (r ClaimRequest) check() error {
	capped := r.Strategy == ClaimCapped || r.Strategy == ClaimCappedAfter
	limited := r.Strategy == ClaimWithinRoom || r.Strategy == ClaimLimited
	switch {
	case r.Strategy < ClaimPlain || r.Strategy > ClaimCappedAfter:
		return fmt.Errorf("store: unknown claim strategy %d", int(r.Strategy))
	case capped != (r.TenantCap > 0):
		return fmt.Errorf("store: %v with TenantCap %d", r.Strategy, r.TenantCap)
	case limited != (len(r.Limits) > 0):
		return fmt.Errorf("store: %v with %d limits", r.Strategy, len(r.Limits))
	case r.After != nil && r.Strategy != ClaimPlain && r.Strategy != ClaimWithinRoom:
		return fmt.Errorf("store: %v does not start after bounds (After)", r.Strategy)
	case r.TenantAfter != nil && r.Strategy != ClaimCappedAfter:
		return fmt.Errorf("store: %v does not start after tenant bounds (TenantAfter)", r.Strategy)
	}
	return nil
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

// Claim claims up to r.Batch ready jobs with r.Strategy in one round trip:
// claim_settings, the limits' locks when limits cover the claimer, and the
// strategy's statement, in one pipeline and so one implicit transaction. A
// ClaimWithinRoom claim whose limits turn out to have no room for a whole
// batch takes a second round trip, with claim_limited (ClaimResult.Tight).
func (s *Store) Claim(ctx context.Context, db DBTX, r ClaimRequest) (ClaimResult, error) {
	if err := r.check(); err != nil {
		return ClaimResult{}, err
	}
	args := []any{r.Queues, kindsArg(r.Kinds), r.Batch, r.WorkerID, Micros(r.Lease)}
	var res ClaimResult
	batch := &pgx.Batch{}
	batch.Queue(s.SQL("claim_settings"))
	switch r.Strategy {
	case ClaimPlain:
		batch.Queue(s.SQL("claim"), append(args, BoundArgs(r.Queues, r.After)...)...).Query(res.scan(r.Batch))
	case ClaimWithinRoom:
		// The limits' locks, then whether they have room for the whole
		// batch, then the plain claim, which takes nothing when they have
		// not (claim_gate); then, only in that case, claim_limited.
		room := false
		batch.Queue(s.SQL("limit_locks"), r.Limits)
		batch.Queue(s.SQL("limit_room"), r.Limits, r.Batch).QueryRow(func(row pgx.Row) error { return row.Scan(&room) })
		batch.Queue(s.SQL("claim"), append(args, BoundArgs(r.Queues, r.After)...)...).Query(res.scan(r.Batch))
		if err := db.SendBatch(ctx, batch).Close(); err != nil {
			return ClaimResult{}, err
		}
		if room {
			return res, nil
		}
		limited, err := s.claimLimited(ctx, db, r, args)
		limited.Tight = true
		return limited, err
	case ClaimLimited:
		return s.claimLimited(ctx, db, r, args)
	case ClaimCapped, ClaimCappedAfter:
		cursors := make([]*string, len(r.Queues))
		for i, q := range r.Queues {
			if c, ok := r.TenantCursor[q]; ok {
				cursors[i] = &c
			}
		}
		args = append(args, r.TenantCap, cursors)
		stmt := "claim_capped"
		if r.Strategy == ClaimCappedAfter {
			stmt, args = "claim_capped_after", append(args, TenantBoundArgs(r.TenantAfter)...)
		}
		batch.Queue(s.SQL("claim_capped_settings"))
		batch.Queue(s.SQL(stmt), args...).Query(res.scanCapped(r.Batch))
	}
	if err := db.SendBatch(ctx, batch).Close(); err != nil {
		return ClaimResult{}, err
	}
	return res, nil
}

// claimLimited is Claim with claim_limited: the limits' locks before the
// claim, so its snapshot is taken after they are held and includes every
// job claimed by their previous holder, and no limit is exceeded by two
// claimers at once.
func (s *Store) claimLimited(ctx context.Context, db DBTX, r ClaimRequest, args []any) (ClaimResult, error) {
	var res ClaimResult
	batch := &pgx.Batch{}
	batch.Queue(s.SQL("claim_settings"))
	batch.Queue(s.SQL("limit_locks"), r.Limits)
	batch.Queue(s.SQL("claim_limited"), append(args, r.Limits)...).Query(res.scan(r.Batch))
	if err := db.SendBatch(ctx, batch).Close(); err != nil {
		return ClaimResult{}, err
	}
	return res, nil
}

// scan reads a claim's jobs into res.
func (res *ClaimResult) scan(batch int) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		var err error
		res.Jobs, err = scanClaimed(rows, batch, nil, nil)
		return err
	}
}

// scanCapped reads a capped claim's jobs into res, with each queue's new
// cursor and whether its visit was cut short (the two columns every row of
// capped_tail carries after the job's).
func (res *ClaimResult) scanCapped(batch int) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		var cursor *string
		var cut bool
		var err error
		res.Jobs, err = scanClaimed(rows, batch, []any{&cursor, &cut}, func(queue string) {
			if cursor != nil {
				if res.Cursors == nil {
					res.Cursors = map[string]string{}
				}
				res.Cursors[queue] = *cursor
			}
			res.VisitCut = res.VisitCut || cut
		})
		return err
	}
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
			&j.RunAt, &j.CreatedAt, &j.AttemptedAt, &j.LeaseToken, &tenant, &entity, &unique, &j.Metadata, &j.Durable, &j.Sealed}
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
