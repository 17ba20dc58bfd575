package maintenance

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
)

// churn makes n dead tuples in the jobs table (insert, then delete: rows
// inserted without a generation land in its partition jobs_keyed) and
// waits until the statistics show them.
func churn(t *testing.T, db *dbtest.DB, n int) {
	t.Helper()
	retExec(t, db, `INSERT INTO skiplock.jobs (queue, kind, payload) SELECT 'q', 'k', '{}' FROM generate_series(1, $1)`, n)
	retExec(t, db, `DELETE FROM skiplock.jobs`)
	retExec(t, db, `SELECT pg_stat_force_next_flush()`)
	require.Eventually(t, func() bool {
		return retCount(t, db, `SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = 'skiplock.jobs_keyed'::regclass`) >= int64(n)
	}, 10*time.Second, 50*time.Millisecond, "the statistics never showed the dead tuples")
}

// The guard vacuums the jobs table once dead tuples pass the threshold and
// autovacuum has not run, then leaves it alone while that vacuum is recent;
// below the threshold it does nothing.
func TestVacuumGuard(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	// Whatever the server's setting, autovacuum must not get there first.
	retExec(t, db, `ALTER TABLE skiplock.jobs_keyed SET (autovacuum_enabled = false)`)
	g := NewVacuumGuard(VacuumConfig{Pool: db.Pool, Schema: "skiplock", DeadTuples: 500})

	churn(t, db, 100)
	c, err := g.Check(ctx)
	require.NoError(t, err)
	require.False(t, c.Vacuumed, "100 dead tuples are below the threshold of 500")
	require.True(t, c.Owner)

	churn(t, db, 1000)
	c, err = g.Check(ctx)
	require.NoError(t, err)
	require.True(t, c.Vacuumed, "check: %+v", c)
	require.GreaterOrEqual(t, c.DeadTuples, int64(1000))
	require.NotZero(t, retCount(t, db, `SELECT vacuum_count FROM pg_stat_user_tables WHERE relid = 'skiplock.jobs_keyed'::regclass`))

	// A vacuum finished seconds ago: the guard waits even above the threshold.
	churn(t, db, 1000)
	c, err = g.Check(ctx)
	require.NoError(t, err)
	require.False(t, c.Vacuumed, "a vacuum finished %s ago", c.Since)
}

// Of two guards only one vacuums at a time: the other finds the advisory
// lock taken and skips.
func TestVacuumGuardLock(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	held, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer held.Release()
	_, err = held.Exec(ctx, "SELECT pg_advisory_lock(hashtextextended($1, 0))", vacuumLockKey("skiplock"))
	require.NoError(t, err)
	defer func() { _, _ = held.Exec(ctx, "SELECT pg_advisory_unlock_all()") }()

	retExec(t, db, `ALTER TABLE skiplock.jobs_keyed SET (autovacuum_enabled = false)`)
	churn(t, db, 1000)
	g := NewVacuumGuard(VacuumConfig{Pool: db.Pool, Schema: "skiplock", DeadTuples: 500})
	c, err := g.Check(ctx)
	require.NoError(t, err)
	require.False(t, c.Vacuumed, "another session holds the guard's lock")
	require.Zero(t, retCount(t, db, `SELECT vacuum_count FROM pg_stat_user_tables WHERE relid = 'skiplock.jobs_keyed'::regclass`))
}

// A role that does not own the jobs table cannot vacuum it: the guard finds
// out, says so once, and stops trying (instead of failing every 5 s).
func TestVacuumGuardNotOwner(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	role := fmt.Sprintf("skiplock_guard_%d", time.Now().UnixNano())
	retExec(t, db, `DROP ROLE IF EXISTS `+role)
	retExec(t, db, `CREATE ROLE `+role+` LOGIN`)
	t.Cleanup(func() {
		_, _ = db.Pool.Exec(context.Background(), `DROP OWNED BY `+role)
		_, _ = db.Pool.Exec(context.Background(), `DROP ROLE IF EXISTS `+role)
	})
	retExec(t, db, `GRANT USAGE ON SCHEMA skiplock TO `+role)
	retExec(t, db, `GRANT SELECT ON skiplock.jobs TO `+role)
	retExec(t, db, `ALTER TABLE skiplock.jobs_keyed SET (autovacuum_enabled = false)`)
	churn(t, db, 1000)

	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.ConnConfig.User = role
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	g := NewVacuumGuard(VacuumConfig{Pool: pool, Schema: "skiplock", DeadTuples: 500})
	c, err := g.Check(ctx)
	require.NoError(t, err)
	require.False(t, c.Owner)
	require.False(t, c.Vacuumed)
	require.True(t, g.disabled)
}
