package store

import (
	"context"
	"time"
)

// The jobs_done partition DDL (sql/maintenance.sql), run by the retention
// service's partition pass. Listing the partitions is a read-side figure:
// health.DonePartitions.

// EnsureDonePartitions creates the daily jobs_done partitions from today
// (UTC) through daysAhead days ahead, moving any rows waiting in the default
// partition into their day's; it returns how many partitions it created.
func (s *Store) EnsureDonePartitions(ctx context.Context, db DBTX, daysAhead int) (int, error) {
	var n int
	err := db.QueryRow(ctx, s.SQL("ensure_done_partitions"), daysAhead).Scan(&n)
	return n, Annotate("ensure jobs_done partitions", err)
}

// DropDonePartitions drops every daily jobs_done partition whose day ended
// more than keep ago (a catalog operation: no DELETE, no dead tuples) and
// returns how many it dropped.
func (s *Store) DropDonePartitions(ctx context.Context, db DBTX, keep time.Duration) (int, error) {
	var n int
	err := db.QueryRow(ctx, s.SQL("drop_done_partitions"), keep.Microseconds()).Scan(&n)
	return n, Annotate("drop jobs_done partitions", err)
}

// PartitionPass is the outcome of MaintainDonePartitions.
type PartitionPass struct {
	// Locked reports that the pass took its advisory lock; when false
	// another process was running it and nothing was done.
	Locked           bool
	Created, Dropped int
}

// MaintainDonePartitions runs one partition pass as a single statement
// (one implicit transaction that never waits on the client): under the
// advisory lock keyed by lockKey, if free, it creates partitions daysAhead
// ahead when archive is set and drops those whose day ended more than keep
// ago when keep > 0. DDL waits at most lockTimeout for its table locks.
func (s *Store) MaintainDonePartitions(ctx context.Context, db DBTX, lockKey string, archive bool, daysAhead int,
	keep, lockTimeout time.Duration) (PartitionPass, error) {
	var p PartitionPass
	err := db.QueryRow(ctx, s.SQL("maintain_partitions"), lockKey, archive, daysAhead, keep.Microseconds(), lockTimeout.Milliseconds()).
		Scan(&p.Locked, &p.Created, &p.Dropped)
	if err != nil {
		return PartitionPass{}, Annotate("maintain jobs_done partitions", err)
	}
	return p, nil
}
