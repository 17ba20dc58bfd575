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
	Partition   string        // "", "tenant", "entity" or "arg:FIELD"
	Concurrency int           // a concurrency limit: most running jobs; or
	Rate        int           // a rate limit: most starts
	Per         time.Duration // within this sliding window
}

// LimitUse is a limit with its use now.
type LimitUse struct {
	Limit
	MaxUsed    int64   // what it counts (running jobs, or starts in the window) in its fullest partition value
	FullValues int64   // partition values at the limit
	Used       int64   // what it counts, over all its partition values
	Ready      int64   // ready jobs it covers (with backlog)
	OldestDue  float64 // seconds the oldest due ready job it covers has waited (with backlog)
	UpdatedAt  time.Time
	TooHeavy   int64 // ready jobs it covers heavier than its rate: never started (with backlog)
	// TooHeavyIDs are the first five of those, lowest id first.
	TooHeavyIDs []int64
}

// SetLimit creates or replaces a limit (validated by the caller; the
// table's constraints refuse what slips through).
func (s *Store) SetLimit(ctx context.Context, db DBTX, l Limit) error {
	var conc, rate, per any
	if l.Rate > 0 {
		rate, per = l.Rate, Micros(l.Per)
	} else {
		conc = l.Concurrency
	}
	_, err := db.Exec(ctx, s.SQL("limit_set"), l.Name, nullable(l.Queue), nullable(l.Kind), nullable(l.Partition), conc, rate, per)
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
		var perSeconds float64
		err := r.Scan(&u.Name, &u.Queue, &u.Kind, &u.Partition, &u.Concurrency, &u.Rate, &perSeconds,
			&u.MaxUsed, &u.FullValues, &u.Used, &u.Ready, &u.OldestDue, &u.UpdatedAt,
			&u.TooHeavy, &u.TooHeavyIDs)
		u.Per = time.Duration(perSeconds * float64(time.Second))
		return u, err
	})
}

// PruneLimitStarts forgets at most max recorded starts that no rate limit
// counts any more, and returns how many.
func (s *Store) PruneLimitStarts(ctx context.Context, db DBTX, max int) (int64, error) {
	tag, err := db.Exec(ctx, s.SQL("limit_starts_prune"), max)
	return tag.RowsAffected(), err
}
