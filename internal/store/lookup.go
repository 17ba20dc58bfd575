package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// JobRow is one job as job_get and job_list return it: never its payload.
type JobRow struct {
	ID              int64
	State           string
	Queue           string
	Kind            string
	Priority        int
	Attempts        int
	MaxAttempts     *int
	RunAt           time.Time
	CreatedAt       time.Time
	AttemptedAt     *time.Time
	FinishedAt      *time.Time
	Outcome         *string
	LeaseExpiresAt  *time.Time
	LockedBy        *string
	UniqueKey       *string
	Tenant          *string
	Entity          *string
	LastError       *string
	CancelRequested bool
	Metadata        []byte // the job's metadata JSON object (nil: none)
	LimitWeight     *int32 // its weight in rate limits (nil: 1; job_get only)
	Progress        []byte // its last progress report, JSON (nil: none; job_get only)
}

// JobGet returns one job by id; found is false when no table has it.
func (s *Store) JobGet(ctx context.Context, db DBTX, id int64) (row JobRow, found bool, err error) {
	err = db.QueryRow(ctx, s.SQL("job_get"), id).Scan(&row.ID, &row.State, &row.Queue, &row.Kind, &row.Priority,
		&row.Attempts, &row.MaxAttempts, &row.RunAt, &row.CreatedAt, &row.AttemptedAt, &row.FinishedAt, &row.Outcome,
		&row.LeaseExpiresAt, &row.LockedBy, &row.UniqueKey, &row.Tenant, &row.Entity, &row.LastError,
		&row.CancelRequested, &row.Metadata, &row.LimitWeight, &row.Progress)
	if isNoRows(err) {
		return row, false, nil
	}
	return row, err == nil, err
}

// Finished is a job that has finished, as jobs_finished reports it.
type Finished struct {
	ID         int64
	State      string // completed, dead, or gone (in no table)
	Result     []byte // a completed job's result, JSON (nil: none)
	Reason     *string
	LastError  *string
	FinishedAt *time.Time
}

// summarizeEvery is how often one process's look-ups summarize jobs_done's
// BRIN index at most: a look-up a moment after another finds few new whole
// ranges (at 20,000 completions a second, 250 ms fill about eight).
const summarizeEvery = 250 * time.Millisecond

// JobsFinished returns those of ids that have finished (jobs_finished); a
// job still in flight is not in the result. The same pipeline first
// summarizes jobs_done's BRIN index over the ranges filled since
// (summarize_done), at most every summarizeEvery, when this process's role
// may: a role that may not (a reader, a schema migrated by an older
// binary) is found once and looks up without it from then on.
func (s *Store) JobsFinished(ctx context.Context, db DBTX, ids []int64) ([]Finished, error) {
	summarize := false
	if last, now := s.summarizedAt.Load(), time.Now().UnixNano(); !s.noSummarize.Load() && now-last >= int64(summarizeEvery) {
		summarize = s.summarizedAt.CompareAndSwap(last, now)
	}
	out, err := s.jobsFinished(ctx, db, ids, summarize)
	if summarize && CannotSummarize(err) {
		s.noSummarize.Store(true)
		return s.jobsFinished(ctx, db, ids, false)
	}
	return out, err
}

// SummarizeDone summarizes jobs_done's BRIN index on id over the whole page
// ranges filled since it last was, and returns how many ranges it
// summarized (summarize_done: 0 when another session is summarizing, or
// holds a partition). When the role may not (a reader) or the schema has
// no such function yet, it returns that error once (CannotSummarize) and
// 0 without asking from then on, as JobsFinished looks up without it.
func (s *Store) SummarizeDone(ctx context.Context, db DBTX) (int, error) {
	if s.noSummarize.Load() {
		return 0, nil
	}
	var n int
	err := db.QueryRow(ctx, s.SQL("summarize_done")).Scan(&n)
	if CannotSummarize(err) {
		s.noSummarize.Store(true)
	}
	return n, err
}

// CannotSummarize reports the errors of SummarizeDone that calling again
// will not cure: the role may not run summarize_done (42501), or the
// schema is older than the function (42883).
func CannotSummarize(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "42501" || pe.Code == "42883")
}

func (s *Store) jobsFinished(ctx context.Context, db DBTX, ids []int64, summarize bool) ([]Finished, error) {
	var out []Finished
	b := &pgx.Batch{}
	if summarize {
		b.Queue(s.SQL("summarize_done"))
	}
	b.Queue(s.SQL("jobs_finished_settings"), len(ids))
	b.Queue(s.SQL("jobs_finished"), ids).Query(func(rows pgx.Rows) error {
		var f Finished
		var err error
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Finished, error) {
			err := row.Scan(&f.ID, &f.State, &f.Result, &f.Reason, &f.LastError, &f.FinishedAt)
			return f, err
		})
		return err
	})
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	return out, nil
}

// JobFilter selects jobs for JobList; empty strings and zero match all.
type JobFilter struct {
	Queue, Kind, State, Tenant string
	BeforeID                   int64
	Limit                      int
}

// JobList returns jobs newest id first, the error cut to its first line.
func (s *Store) JobList(ctx context.Context, db DBTX, f JobFilter) ([]JobRow, error) {
	var before any
	if f.BeforeID > 0 {
		before = f.BeforeID
	}
	rows, err := db.Query(ctx, s.SQL("job_list"), nullable(f.Queue), nullable(f.Kind), nullable(f.State), before, f.Limit,
		nullable(f.Tenant))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []JobRow
	for rows.Next() {
		var r JobRow
		if err := rows.Scan(&r.ID, &r.State, &r.Queue, &r.Kind, &r.Priority, &r.Attempts, &r.MaxAttempts, &r.RunAt,
			&r.CreatedAt, &r.AttemptedAt, &r.FinishedAt, &r.Outcome, &r.Tenant, &r.LockedBy, &r.LastError); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// JobPayload returns one job's payload wherever it is; found is false when
// no table has it.
func (s *Store) JobPayload(ctx context.Context, db DBTX, id int64) (payload []byte, found bool, err error) {
	err = db.QueryRow(ctx, s.SQL("job_payload_any"), id).Scan(&payload)
	if isNoRows(err) {
		return nil, false, nil
	}
	return payload, err == nil, err
}

// JobRetry retries a dead or completed job as one new ready job. newID is
// 0 when the job was not retried; state is then where it is ("" when no
// table has it).
func (s *Store) JobRetry(ctx context.Context, db DBTX, id int64) (newID int64, state string, err error) {
	var nid *int64
	var st *string
	if err := db.QueryRow(ctx, s.SQL("job_retry"), id).Scan(&nid, &st); err != nil {
		return 0, "", err
	}
	if nid != nil {
		newID = *nid
	}
	return newID, deref(st), nil
}

// JobDelete deletes a ready (or scheduled) job or a dead letter and returns
// the state it was in, or "" when neither held it.
func (s *Store) JobDelete(ctx context.Context, db DBTX, id int64) (string, error) {
	var state string
	err := db.QueryRow(ctx, s.SQL("job_delete"), id).Scan(&state)
	return state, err
}

// JobAction reads what an earlier action ("retry", "cancel" or "delete")
// on the job did: the state the job was in and a retry's new id (found
// false: never done, or more than a week ago).
func (s *Store) JobAction(ctx context.Context, db DBTX, id int64, action string) (was string, newID int64, found bool, err error) {
	var nid *int64
	err = db.QueryRow(ctx, s.SQL("job_action"), id, action).Scan(&was, &nid)
	if isNoRows(err) {
		return "", 0, false, nil
	}
	if err != nil {
		return "", 0, false, err
	}
	if nid != nil {
		newID = *nid
	}
	return was, newID, true, nil
}

// PruneJobActions deletes up to batch action records older than a week and
// returns how many it deleted.
func (s *Store) PruneJobActions(ctx context.Context, db DBTX, batch int) (int64, error) {
	tag, err := db.Exec(ctx, s.SQL("prune_job_actions"), batch)
	return tag.RowsAffected(), err
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func isNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }

// EnqueuedRow is one in-flight job as skiplocktest sees it (enqueued_jobs).
type EnqueuedRow struct {
	ID          int64
	Queue, Kind string
	State       string
	Priority    int
	Attempts    int
	MaxAttempts int
	RunAt       time.Time
	Scheduled   bool // run_at is in the future
	Tenant      *string
	Entity      *string
	UniqueKey   *string
	Payload     string
	Contains    bool // the payload contains the contains argument
}

// EnqueuedJobs returns up to 1,000 in-flight jobs of kind and queue (""
// for any) in id order; contains, when not nil, is a JSON object each
// payload is tested against (EnqueuedRow.Contains). db may be the caller's
// uncommitted transaction, pgx's or database/sql's.
func (s *Store) EnqueuedJobs(ctx context.Context, db Querier, kind, queue string, contains *string) ([]EnqueuedRow, error) {
	rows, err := db.Query(ctx, s.SQL("enqueued_jobs"), kind, queue, contains)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (EnqueuedRow, error) {
		var r EnqueuedRow
		err := row.Scan(&r.ID, &r.Queue, &r.Kind, &r.State, &r.Priority, &r.Attempts, &r.MaxAttempts, &r.RunAt,
			&r.Scheduled, &r.Tenant, &r.Entity, &r.UniqueKey, &r.Payload, &r.Contains)
		return r, err
	})
}
