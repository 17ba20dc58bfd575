package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// MoveJob is a job as a tenant move copies it (move.sql).
type MoveJob struct {
	ID, Attempts, Priority int64
	MaxAttempts            int64
	RunAt, CreatedAt       time.Time
	Queue, Kind            string
	UniqueKey, Tenant      *string
	Entity, LastError      *string
	Payload, Metadata      []byte
	LimitWeight            *int32 // nil: weight 1
	Sealed                 []byte // a sealed payload's bytes (payload its key id); nil: payload is whole
}

// MoveIdentity names the database of db for a tenant move.
func (s *Store) MoveIdentity(ctx context.Context, db DBTX) (string, error) {
	var id string
	err := db.QueryRow(ctx, s.SQL("move_identity"), s.Schema).Scan(&id)
	return id, err
}

// MoveLockBatch locks and returns the tenant's next ready jobs (inside tx).
func (s *Store) MoveLockBatch(ctx context.Context, tx DBTX, tenant string, n int) ([]MoveJob, error) {
	rows, err := tx.Query(ctx, s.SQL("move_lock_batch"), tenant, n)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (MoveJob, error) {
		var j MoveJob
		err := r.Scan(&j.ID, &j.Priority, &j.Attempts, &j.MaxAttempts, &j.RunAt, &j.CreatedAt, &j.Queue, &j.Kind,
			&j.UniqueKey, &j.Tenant, &j.Entity, &j.LastError, &j.Payload, &j.Sealed, &j.Metadata, &j.LimitWeight)
		return j, err
	})
}

// MoveLockIDs locks and returns those of ids still ready (inside tx).
func (s *Store) MoveLockIDs(ctx context.Context, tx DBTX, ids []int64) ([]int64, error) {
	return s.ids(ctx, tx, "move_lock_ids", ids)
}

// MoveGuard returns the moved_in state of each source id already moved in.
func (s *Store) MoveGuard(ctx context.Context, db DBTX, source string, ids []int64) (map[int64]string, error) {
	rows, err := db.Query(ctx, s.SQL("move_guard"), source, ids)
	if err != nil {
		return nil, err
	}
	out := map[int64]string{}
	var id int64
	var state string
	_, err = pgx.ForEachRow(rows, []any{&id, &state}, func() error { out[id] = state; return nil })
	return out, err
}

// MoveInsert inserts jobs held, each with its moved_in row, in one round
// trip (a pipeline inside tx); for each it returns "held", "merged" (a live
// job with its unique key is here), or "" when a moved_in row was already
// there (nothing done).
func (s *Store) MoveInsert(ctx context.Context, tx DBTX, source string, jobs []MoveJob) ([]string, error) {
	b := &pgx.Batch{}
	for _, j := range jobs {
		b.Queue(s.SQL("move_insert"), source, j.ID, j.Priority, j.Attempts, j.MaxAttempts, j.RunAt, j.CreatedAt,
			j.Queue, j.Kind, j.UniqueKey, j.Tenant, j.Entity, j.LastError, j.Payload, j.Metadata, j.LimitWeight, j.Sealed)
	}
	br := tx.SendBatch(ctx, b)
	out := make([]string, len(jobs))
	for i := range jobs {
		err := br.QueryRow().Scan(&out[i])
		if err != nil && !isNoRows(err) {
			_ = br.Close()
			return nil, err
		}
	}
	return out, br.Close()
}

// MoveDelete deletes the moved jobs and records them in moved_out (inside
// the transaction holding their locks); it returns how many.
func (s *Store) MoveDelete(ctx context.Context, tx DBTX, ids []int64, target string) (int64, error) {
	tag, err := tx.Exec(ctx, s.SQL("move_delete"), ids, target)
	return tag.RowsAffected(), err
}

// MoveRelease releases held jobs moved from source; it returns how many.
func (s *Store) MoveRelease(ctx context.Context, db DBTX, source string, ids []int64) (int64, error) {
	var n, queues int64
	err := db.QueryRow(ctx, s.SQL("move_release"), source, ids).Scan(&n, &queues)
	return n, err
}

// MoveDiscard deletes held copies whose source job ran in the source; it
// returns how many.
func (s *Store) MoveDiscard(ctx context.Context, db DBTX, source string, ids []int64) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, s.SQL("move_discard"), source, ids).Scan(&n)
	return n, err
}

// MoveHeld returns up to n source ids an interrupted move left held.
func (s *Store) MoveHeld(ctx context.Context, db DBTX, source string, n int) ([]int64, error) {
	rows, err := db.Query(ctx, s.SQL("move_held"), source, n)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

// MoveMovedOut returns those of ids recorded as moved out of this database.
func (s *Store) MoveMovedOut(ctx context.Context, db DBTX, ids []int64) ([]int64, error) {
	return s.ids(ctx, db, "move_moved_out", ids)
}

// MoveLeft counts what a move leaves of the tenant: running jobs, workflow
// tasks and dead letters.
func (s *Store) MoveLeft(ctx context.Context, db DBTX, tenant string) (running, tasks, dead int64, err error) {
	err = db.QueryRow(ctx, s.SQL("move_left"), tenant).Scan(&running, &tasks, &dead)
	return running, tasks, dead, err
}

// ids runs a statement that takes an id array and returns ids.
func (s *Store) ids(ctx context.Context, db DBTX, name string, ids []int64) ([]int64, error) {
	rows, err := db.Query(ctx, s.SQL(name), ids)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}
