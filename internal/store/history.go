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
	rows, err := db.Query(ctx, s.SQL("history_days"), keep.Microseconds())
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
	lo := time.Date(day.Year(), day.Month(), day.Day(), 0, 0, 0, 0, time.UTC)
	rows, err := db.Query(ctx, s.SQL("history_rows"), lo, lo.AddDate(0, 0, 1))
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
