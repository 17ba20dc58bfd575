package store

import (
	"context"
	"time"
)

// HistoryDay is one jobs_done partition whose UTC day has ended
// (history_days); Expired when the day ended longer ago than the retention
// asked about.
type HistoryDay struct {
	Day     time.Time
	Expired bool
}

// HistoryDays lists the ended days of jobs_done's partitions, oldest first;
// keep > 0 marks those past it.
func (s *Store) HistoryDays(ctx context.Context, db DBTX, keep time.Duration) ([]HistoryDay, error) {
	return s.days(ctx, db, "history_days", keep)
}

// HistoryDeadDays lists the ended UTC days of dead_at that jobs_dead holds
// rows of, oldest first; keep > 0 marks those that ended longer ago than
// it (the whole day is past the dead letters' retention).
func (s *Store) HistoryDeadDays(ctx context.Context, db DBTX, keep time.Duration) ([]HistoryDay, error) {
	return s.days(ctx, db, "history_dead_days", keep)
}

func (s *Store) days(ctx context.Context, db DBTX, stmt string, keep time.Duration) ([]HistoryDay, error) {
	rows, err := db.Query(ctx, s.SQL(stmt), keep.Microseconds())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []HistoryDay
	for rows.Next() {
		var d HistoryDay
		if err := rows.Scan(&d.Day, &d.Expired); err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// HistoryRows streams every finished job of the UTC day starting at day to
// fn, one JSON object per row in id order, without holding them in memory.
func (s *Store) HistoryRows(ctx context.Context, db DBTX, day time.Time, fn func(row []byte, id int64) error) error {
	return s.streamDay(ctx, db, "history_rows", day, fn)
}

// HistoryDeadRows is HistoryRows for the dead letters that died on day
// (jobs_dead, by dead_at).
func (s *Store) HistoryDeadRows(ctx context.Context, db DBTX, day time.Time, fn func(row []byte, id int64) error) error {
	return s.streamDay(ctx, db, "history_dead_rows", day, fn)
}

// utcDay is the bounds of the UTC day that starts at day's date.
func utcDay(day time.Time) (lo, hi time.Time) {
	lo = time.Date(day.Year(), day.Month(), day.Day(), 0, 0, 0, 0, time.UTC)
	return lo, lo.AddDate(0, 0, 1)
}

func (s *Store) streamDay(ctx context.Context, db DBTX, stmt string, day time.Time, fn func(row []byte, id int64) error) error {
	lo, hi := utcDay(day)
	rows, err := db.Query(ctx, s.SQL(stmt), lo, hi)
	if err != nil {
		return err
	}
	defer rows.Close()
	var raw []byte
	var id int64
	for rows.Next() {
		if err := rows.Scan(&raw, &id); err != nil {
			return err
		}
		if err := fn(raw, id); err != nil {
			return err
		}
	}
	return rows.Err()
}

// HistoryDropDay drops day's jobs_done partition if it holds exactly rows
// rows (drop_done_partition); dropped is false otherwise.
func (s *Store) HistoryDropDay(ctx context.Context, db DBTX, day time.Time, rows int64, lockTimeout time.Duration) (dropped bool, err error) {
	err = db.QueryRow(ctx, s.SQL("history_drop_day"), day, rows, lockTimeout.Milliseconds()).Scan(&dropped)
	return dropped, err
}

// HistoryImport inserts exported rows (a JSON array of objects) back into
// jobs_done, skipping those already there; it returns how many it inserted.
func (s *Store) HistoryImport(ctx context.Context, db DBTX, rowsJSON []byte) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, s.SQL("history_import"), string(rowsJSON)).Scan(&n)
	return n, err
}

// HistoryDeadLockDay locks day's dead letters (FOR UPDATE) in tx, the
// transaction that exports and purges them, and returns how many it locked.
func (s *Store) HistoryDeadLockDay(ctx context.Context, tx DBTX, day time.Time) (int64, error) {
	lo, hi := utcDay(day)
	var n int64
	err := tx.QueryRow(ctx, s.SQL("history_dead_lock_day"), lo, hi).Scan(&n)
	return n, err
}

// HistoryDeadPurgeDay deletes day's dead letters if they are exactly rows
// rows with ids minID..maxID (what their export wrote); matched is false,
// and nothing deleted, otherwise.
func (s *Store) HistoryDeadPurgeDay(ctx context.Context, tx DBTX, day time.Time, rows, minID, maxID int64) (matched bool, purged int64, err error) {
	lo, hi := utcDay(day)
	err = tx.QueryRow(ctx, s.SQL("history_dead_purge_day"), lo, hi, rows, minID, maxID).Scan(&matched, &purged)
	return matched, purged, err
}

// HistoryImportDead inserts exported dead letters (a JSON array of
// objects) back into jobs_dead, skipping those already there; it returns
// how many it inserted.
func (s *Store) HistoryImportDead(ctx context.Context, db DBTX, rowsJSON []byte) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, s.SQL("history_import_dead"), string(rowsJSON)).Scan(&n)
	return n, err
}
