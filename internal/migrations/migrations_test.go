package migrations_test

import (
	"context"
	"errors"
	"flag"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/migrations"
)

func up(ctx context.Context, pool *pgxpool.Pool, schema string, target int) ([]int, error) {
	var applied []int
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		applied, err = migrations.UpTx(ctx, tx, schema, target)
		return err
	})
	return applied, err
}

func down(ctx context.Context, pool *pgxpool.Pool, schema string, target int) ([]int, error) {
	var reverted []int
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		reverted, err = migrations.DownTx(ctx, tx, schema, target)
		return err
	})
	return reverted, err
}

// catalog fingerprints a schema: its relations with their options, columns,
// indexes, constraints and functions, in a stable order.
func catalog(t *testing.T, pool *pgxpool.Pool, schema string) string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT 'rel ' || c.relname || ' ' || c.relkind::text || ' ' || coalesce(array_to_string(c.reloptions, ','), '')
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1
		UNION ALL
		SELECT 'col ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull
		       || ' ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
		FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		WHERE n.nspname = $1 AND a.attnum > 0 AND NOT a.attisdropped
		UNION ALL
		SELECT 'idx ' || pg_get_indexdef(i.indexrelid)
		FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1
		UNION ALL
		SELECT 'con ' || conname || ' ' || pg_get_constraintdef(k.oid)
		FROM pg_constraint k JOIN pg_namespace n ON n.oid = k.connamespace WHERE n.nspname = $1
		UNION ALL
		SELECT 'fn ' || p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ') ' || md5(p.prosrc)
		FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1
		ORDER BY 1`, schema)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return strings.Join(lines, "\n")
}

func TestUpTwiceIsANoOp(t *testing.T) {
	t.Parallel()
	db := dbtest.NewEmpty(t)
	ctx := context.Background()
	applied, err := up(ctx, db.Pool, "skiplock", 0)
	require.NoError(t, err)
	require.Len(t, applied, len(migrations.All()))
	before := catalog(t, db.Pool, "skiplock")
	applied, err = up(ctx, db.Pool, "skiplock", 0)
	require.NoError(t, err)
	require.Empty(t, applied)
	require.Equal(t, before, catalog(t, db.Pool, "skiplock"))

	st, err := migrations.StatusOf(ctx, db.Pool, "skiplock")
	require.NoError(t, err)
	for _, s := range st {
		require.NotNil(t, s.AppliedAt, "migration %03d not recorded", s.Version)
	}
}

// Eight processes deploying at once: the advisory lock lets one apply each
// migration; the others find nothing to do. None fails.
func TestConcurrentUp(t *testing.T) {
	t.Parallel()
	db := dbtest.NewEmpty(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	results := make([][]int, 8)
	errs := make([]error, 8)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = up(ctx, db.Pool, "skiplock", 0)
		}()
	}
	wg.Wait()
	total := 0
	for i := range results {
		require.NoError(t, errs[i])
		total += len(results[i])
	}
	require.Equal(t, len(migrations.All()), total, "each migration applied exactly once")
}

// Down to zero removes everything; up again gives the very same catalog.
// Every step down and up one version at a time also works.
func TestDownToZeroAndUpAgain(t *testing.T) {
	t.Parallel()
	db := dbtest.NewEmpty(t)
	ctx := context.Background()
	_, err := up(ctx, db.Pool, "skiplock", 0)
	require.NoError(t, err)
	want := catalog(t, db.Pool, "skiplock")

	for v := migrations.Latest() - 1; v >= 0; v-- {
		reverted, err := down(ctx, db.Pool, "skiplock", v)
		require.NoError(t, err, "down to %d", v)
		require.Equal(t, []int{v + 1}, reverted)
	}
	var exists bool
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'skiplock')").Scan(&exists))
	require.False(t, exists, "down to 0 leaves no schema behind")

	for v := 1; v <= migrations.Latest(); v++ {
		applied, err := up(ctx, db.Pool, "skiplock", v)
		require.NoError(t, err, "up to %d", v)
		require.Equal(t, []int{v}, applied)
	}
	require.Equal(t, want, catalog(t, db.Pool, "skiplock"))
}

// The hot table's storage settings are part of the schema: fillfactor for
// HOT updates and aggressive per-table autovacuum.
func TestJobsTableSettings(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	// Every partition (migration 016: the ring and jobs_keyed) carries them.
	rows, err := db.Pool.Query(context.Background(), `SELECT c.relname, coalesce(c.reloptions, '{}')
		FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'skiplock.jobs'::regclass ORDER BY 1`)
	require.NoError(t, err)
	parts := 0
	for rows.Next() {
		var name string
		var opts []string
		require.NoError(t, rows.Scan(&name, &opts))
		parts++
		joined := strings.Join(opts, ",")
		for _, want := range []string{"fillfactor=", "autovacuum_vacuum_scale_factor=", "autovacuum_vacuum_cost_delay="} {
			require.Contains(t, joined, want, name)
		}
	}
	require.NoError(t, rows.Err())
	require.Equal(t, 4, parts, "jobs_g0..jobs_g2 and jobs_keyed")
}

// Two installations in one database do not see each other.
func TestTwoSchemas(t *testing.T) {
	t.Parallel()
	db := dbtest.NewEmpty(t)
	ctx := context.Background()
	for _, s := range []string{"skiplock", "other_app"} {
		_, err := up(ctx, db.Pool, s, 0)
		require.NoError(t, err)
	}
	_, err := db.Pool.Exec(ctx, "INSERT INTO other_app.jobs (queue, kind) VALUES ('q', 'k')")
	require.NoError(t, err)
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM skiplock.jobs").Scan(&n))
	require.Zero(t, n)
	before := catalog(t, db.Pool, "skiplock")
	_, err = down(ctx, db.Pool, "other_app", 0)
	require.NoError(t, err)
	require.Equal(t, before, catalog(t, db.Pool, "skiplock"), "removing one installation touched the other")
	st, err := migrations.StatusOf(ctx, db.Pool, "skiplock")
	require.NoError(t, err)
	require.NotNil(t, st[len(st)-1].AppliedAt)
}

// A schema name is spliced into SQL, so only plain identifiers pass, and a
// rejected name changes nothing.
func TestBadSchemaName(t *testing.T) {
	t.Parallel()
	db := dbtest.NewEmpty(t)
	ctx := context.Background()
	for _, bad := range []string{"", "Skiplock", "a-b", "x; DROP TABLE y", `"q"`, "1abc", strings.Repeat("a", 49), "a\x00b"} {
		_, err := up(ctx, db.Pool, bad, 0)
		require.Error(t, err, "%q", bad)
		require.True(t, errors.Is(err, migrations.ErrInvalidSchema), "%q: %v", bad, err)
		require.Contains(t, err.Error(), "schema")
	}
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx,
		"SELECT count(*) FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_%' AND nspname NOT IN ('public', 'information_schema')").Scan(&n))
	require.Zero(t, n, "a rejected schema name created something")
}

// The exported script is the same SQL the runner applies.
// TestSQLScript applies the exported script the way a team's own migration
// tool would (one multi-statement exec, no runner) and checks the runner
// then sees a migrated schema: status all applied, up a no-op, the same
// catalog as a runner-built schema. The down script undoes it, records
// included.
func TestSQLScript(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	script, err := migrations.SQL("ext", true, 1, migrations.Latest())
	require.NoError(t, err)
	for _, m := range migrations.All() {
		require.Contains(t, script, strings.TrimSpace(migrations.Render(m.Up, "ext"))[:40])
	}
	db := dbtest.NewEmpty(t)
	_, err = db.Pool.Exec(ctx, script)
	require.NoError(t, err)

	st, err := migrations.StatusOf(ctx, db.Pool, "ext")
	require.NoError(t, err)
	for _, s := range st {
		require.NotNil(t, s.AppliedAt, "version %d recorded by the script", s.Version)
	}
	ran, err := up(ctx, db.Pool, "ext", 0)
	require.NoError(t, err)
	require.Empty(t, ran, "up after the exported script is a no-op")

	ref := dbtest.NewEmpty(t)
	_, err = up(ctx, ref.Pool, "ext", 0)
	require.NoError(t, err)
	require.Equal(t, catalog(t, ref.Pool, "ext"), catalog(t, db.Pool, "ext"), "script and runner build the same schema")

	downScript, err := migrations.SQL("ext", false, 1, 0)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, downScript)
	require.NoError(t, err)
	st, err = migrations.StatusOf(ctx, db.Pool, "ext")
	require.NoError(t, err)
	for _, s := range st {
		require.Nil(t, s.AppliedAt, "version %d unrecorded by the down script", s.Version)
	}
	ran, err = up(ctx, db.Pool, "ext", 0)
	require.NoError(t, err)
	require.Len(t, ran, migrations.Latest(), "up rebuilds what the down script removed")
}

// TestSQLScriptPartial exports only the versions a runner-migrated schema
// lacks, the way a team upgrades with its own tool.
func TestSQLScriptPartial(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.NewEmpty(t)
	_, err := up(ctx, db.Pool, "skiplock", 2)
	require.NoError(t, err)
	script, err := migrations.SQL("skiplock", true, 3, 0)
	require.NoError(t, err)
	require.NotContains(t, script, "001_core")
	_, err = db.Pool.Exec(ctx, script)
	require.NoError(t, err)
	ran, err := up(ctx, db.Pool, "skiplock", 0)
	require.NoError(t, err)
	require.Empty(t, ran)
}

// Migration 016 (generations) carries the jobs in flight across, up and
// down: ids, leases and tokens, unique keys and entities, and the id
// sequence; down gives back the very catalog of 015, and up works again.
func TestGenerationsCarryJobsUpAndDown(t *testing.T) {
	t.Parallel()
	db := dbtest.NewEmpty(t)
	ctx := context.Background()
	_, err := up(ctx, db.Pool, "skiplock", 15)
	require.NoError(t, err)
	want := catalog(t, db.Pool, "skiplock")
	jobs := func() string {
		var s string
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT string_agg(concat_ws(' ', id, state, lease_token, unique_key, entity), ', ' ORDER BY id)
			FROM skiplock.jobs`).Scan(&s))
		return s
	}
	_, err = db.Pool.Exec(ctx, `
		SELECT skiplock.enqueue('q', 'k');
		SELECT skiplock.enqueue('q', 'k', unique_key => 'u1');
		SELECT skiplock.enqueue('q', 'k', entity => 'e1');
		UPDATE skiplock.jobs SET state = 'running', locked_by = 'w', lease_token = 77,
		       lease_expires_at = now() + interval '1 minute' WHERE id = 1;`)
	require.NoError(t, err)
	before := jobs()

	_, err = up(ctx, db.Pool, "skiplock", 16)
	require.NoError(t, err)
	require.Equal(t, before, jobs(), "up: every job in flight, as it was")
	var keyed int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM skiplock.jobs_keyed").Scan(&keyed))
	require.Equal(t, 3, keyed, "the jobs there were wait in jobs_keyed")
	var id int64
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT skiplock.enqueue('q', 'k')").Scan(&id))
	require.Equal(t, int64(4), id, "the id sequence carries on")
	var again int64
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT skiplock.enqueue('q', 'k', unique_key => 'u1')").Scan(&again))
	require.Equal(t, int64(2), again, "the unique key still finds its job")
	_, err = db.Pool.Exec(ctx, "DELETE FROM skiplock.jobs WHERE id = 4")
	require.NoError(t, err)

	_, err = down(ctx, db.Pool, "skiplock", 15)
	require.NoError(t, err)
	require.Equal(t, before, jobs(), "down: every job in flight, as it was")
	require.Equal(t, want, catalog(t, db.Pool, "skiplock"), "down gives back 015's catalog")
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT skiplock.enqueue('q', 'k')").Scan(&id))
	require.Greater(t, id, int64(4), "the id sequence carries on, down too: no id is issued twice")
	_, err = up(ctx, db.Pool, "skiplock", 16)
	require.NoError(t, err, "up again")
}

var update = flag.Bool("update", false, "rewrite schema.sql from a freshly migrated database")

// TestSchemaFileIsCurrent checks that schema.sql is the catalog of a freshly
// migrated schema; with -update (go generate ./internal/migrations) it
// writes it.
func TestSchemaFileIsCurrent(t *testing.T) {
	t.Parallel()
	db := dbtest.NewEmpty(t)
	ctx := context.Background()
	_, err := up(ctx, db.Pool, "skiplock", 0)
	require.NoError(t, err)
	got, err := migrations.Dump(ctx, db.Pool, "skiplock")
	require.NoError(t, err)
	require.Contains(t, got, "CREATE TABLE skiplock.jobs (")
	require.Contains(t, got, "CREATE OR REPLACE FUNCTION skiplock.enqueue_job(")
	require.Contains(t, got, "CREATE TRIGGER jobs_left")
	if *update {
		require.NoError(t, os.WriteFile("schema.sql", []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile("schema.sql")
	require.NoError(t, err)
	require.Equal(t, string(want), got, "schema.sql is stale: run go generate ./internal/migrations")
}
