package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Limit is a concurrency limit as stored (migration 009).
type Limit struct {
	Name        string
	Queue       string // one of Queue and Kind is set
	Kind        string
	Partition   string // "", "tenant", "entity" or "arg:FIELD"
	Concurrency int
}

// LimitUse is a limit with its use now.
type LimitUse struct {
	Limit
	MaxUsed    int64   // running jobs in its fullest partition value
	FullValues int64   // partition values at the limit
	Running    int64   // running jobs it counts
	Ready      int64   // ready jobs it covers (with backlog)
	OldestDue  float64 // seconds the oldest due ready job it covers has waited (with backlog)
	UpdatedAt  time.Time
}

// SetLimit creates or replaces a limit (validated by the caller; the
// table's constraints refuse what slips through).
func (s *Store) SetLimit(ctx context.Context, db DBTX, l Limit) error {
	_, err := db.Exec(ctx, s.SQL("limit_set"), l.Name, nullable(l.Queue), nullable(l.Kind), nullable(l.Partition), l.Concurrency)
	return err
}

// RemoveLimit removes a limit and reports whether it existed.
func (s *Store) RemoveLimit(ctx context.Context, db DBTX, name string) (bool, error) {
	rows, err := db.Query(ctx, s.SQL("limit_remove"), name)
	if err != nil {
		return false, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return len(names) > 0, err
}

// ListLimits returns every limit with its use now; with backlog, also the
// ready jobs each covers (a scan of that backlog).
func (s *Store) ListLimits(ctx context.Context, db DBTX, backlog bool) ([]LimitUse, error) {
	rows, err := db.Query(ctx, s.SQL("limit_list"), backlog)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (LimitUse, error) {
		var u LimitUse
		err := r.Scan(&u.Name, &u.Queue, &u.Kind, &u.Partition, &u.Concurrency,
			&u.MaxUsed, &u.FullValues, &u.Running, &u.Ready, &u.OldestDue, &u.UpdatedAt)
		return u, err
	})
}
