package store

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// TryVacuumLock takes the vacuum guard's session advisory lock on conn,
// only if conn reaches its server session directly. It returns nil when it
// is not direct (no lock taken: VACUUM's SKIP_LOCKED alone keeps vacuums one
// at a time), else whether the lock was taken.
func (s *Store) TryVacuumLock(ctx context.Context, conn *pgx.Conn, key string) (*bool, error) {
	var got *bool
	err := conn.QueryRow(ctx, s.SQL("vacuum_try_lock"), key, int64(conn.PgConn().PID())).Scan(&got)
	return got, err
}

// VacuumUnlock releases the lock TryVacuumLock took.
func (s *Store) VacuumUnlock(ctx context.Context, conn *pgx.Conn, key string) error {
	_, err := conn.Exec(ctx, s.SQL("vacuum_unlock"), key)
	return err
}

// JobsVacuumState is what the vacuum guard reads of the jobs table
// (vacuum_guard_state).
type JobsVacuumState struct {
	DeadTuples int64
	// SinceVacuum is the time since the last vacuum or autovacuum of any
	// partition; negative when none ever ran.
	SinceVacuum time.Duration
	// Owner reports whether this role may vacuum the table; Running, that
	// a vacuum of one of its partitions is in progress.
	Owner, Running bool
}

// JobsVacuumState reads the jobs table's dead tuples, last vacuum, the
// role's right to vacuum it and whether a vacuum runs, in one statement.
func (s *Store) JobsVacuumState(ctx context.Context, db DBTX) (JobsVacuumState, error) {
	var v JobsVacuumState
	var since *float64
	if err := db.QueryRow(ctx, s.SQL("vacuum_guard_state")).Scan(&v.DeadTuples, &since, &v.Owner, &v.Running); err != nil {
		return JobsVacuumState{}, err
	}
	v.SinceVacuum = -1
	if since != nil {
		v.SinceVacuum = time.Duration(*since * float64(time.Second))
	}
	return v, nil
}

// VacuumJobs runs VACUUM (SKIP_LOCKED, ANALYZE) on the jobs table; it must
// run outside a transaction.
func (s *Store) VacuumJobs(ctx context.Context, conn *pgx.Conn) error {
	_, err := conn.Exec(ctx, s.SQL("vacuum_jobs"))
	return err
}

// BeginRetentionPass is the first statement of a retention pass in tx: it
// sets the transaction's statement and idle-in-transaction timeouts and
// tries the pass's advisory lock (key), reporting whether it got it.
func (s *Store) BeginRetentionPass(ctx context.Context, tx DBTX, key string, statementTimeout, idleTimeout time.Duration) (bool, error) {
	var st, idle string
	var got bool
	err := tx.QueryRow(ctx, s.SQL("retention_begin"),
		strconv.FormatInt(statementTimeout.Milliseconds(), 10), strconv.FormatInt(idleTimeout.Milliseconds(), 10), key).
		Scan(&st, &idle, &got)
	return got, err
}

// DropSchema drops the schema and everything in it; skiplocktest uses it to
// remove a test's own schema.
func (s *Store) DropSchema(ctx context.Context, db DBTX) error {
	_, err := db.Exec(ctx, s.SQL("drop_schema"))
	return err
}

// PurgeUniqueKeys deletes at most batch rows of unique_keys whose hold
// ended (purge_unique_keys), in one statement: the unit of the retention
// service's held-keys pass.
func (s *Store) PurgeUniqueKeys(ctx context.Context, db DBTX, batch int) (int64, error) {
	if batch <= 0 {
		return 0, fmt.Errorf("purge unique keys: batch must be positive, got %d", batch)
	}
	tag, err := db.Exec(ctx, s.SQL("purge_unique_keys"), batch)
	return tag.RowsAffected(), err
}
