package maintenance

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/pgbouncertest"
)

// pooledPool opens a pool on db through a transaction-mode PgBouncer, with
// the statement mode skiplock.ParsePoolConfig picks for an unmodified URL.
func pooledPool(t *testing.T, db *dbtest.DB) *pgxpool.Pool {
	t.Helper()
	b := pgbouncertest.Start(t)
	cfg, err := pgxpool.ParseConfig(b.URL(t, db.URL))
	require.NoError(t, err)
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// Every maintenance pass works through a transaction-mode pooler: the
// partition and dead-letter passes (transaction-scoped locks) and the
// vacuum guard, which must not leave a session advisory lock behind on a
// server session the pooler lends to others.
func TestMaintenanceThroughPgBouncer(t *testing.T) {
	db := dbtest.New(t)
	ctx := context.Background()
	pool := pooledPool(t, db)

	old := dayPartition(t, db, 30, 5)
	insertDeadAt(t, db, 30, 1, 40*24*time.Hour)
	r := NewRetention(RetentionConfig{DB: pool, Schema: db.Schema, Archive: true, PartitionsAhead: 1,
		CompletedRetention: 7 * 24 * time.Hour, DeadLetterRetention: 30 * 24 * time.Hour})
	for range 3 { // repeated: any per-session leftover would collide on the second pass
		_, err := r.MaintainPartitions(ctx)
		require.NoError(t, err)
		_, err = r.PurgeDeadLetters(ctx)
		require.NoError(t, err)
	}
	names := partitionNames(t, db)
	require.False(t, names[old], "the 30-day-old partition was dropped through the pooler")
	require.True(t, names["jobs_done_"+time.Now().UTC().Format("20060102")], "today's partition was created")
	require.Zero(t, retCount(t, db, `SELECT count(*) FROM skiplock.jobs_dead`), "old dead letters purged")

	retExec(t, db, `ALTER TABLE skiplock.jobs_keyed SET (autovacuum_enabled = false)`)
	churn(t, db, 1000)
	g := NewVacuumGuard(VacuumConfig{Pool: pool, Schema: "skiplock", DeadTuples: 500})
	c, err := g.Check(ctx)
	require.NoError(t, err)
	require.True(t, c.Vacuumed, "check: %+v", c)
	require.NotZero(t, retCount(t, db, `SELECT vacuum_count FROM pg_stat_user_tables WHERE relid = 'skiplock.jobs_keyed'::regclass`))
	require.Zero(t, retCount(t, db, `SELECT count(*) FROM pg_locks AS l JOIN pg_database AS d ON d.oid = l.database
		WHERE l.locktype = 'advisory' AND d.datname = current_database()`),
		"no session advisory lock left on a pooled server session")
}
