package migrations_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

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
// indexes, constraints and functions (their whole definitions: body,
// settings, volatility), in a stable order.
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
		SELECT 'fn ' || p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ') ' || md5(pg_get_functiondef(p.oid))
		FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1
		ORDER BY 1`, schema)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return strings.Join(lines, "\n")
}

// fingerprint is the catalog and the dump (views, triggers, comments and
// whole function definitions besides) of schema skiplock.
func fingerprint(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	dump, err := migrations.Dump(context.Background(), pool, "skiplock")
	require.NoError(t, err)
	return catalog(t, pool, "skiplock") + "\n" + dump
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
	var functions int
	var touched bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*), bool_or(applied_at > (SELECT min(applied_at) FROM skiplock.schema_functions))
		FROM skiplock.schema_functions`).Scan(&functions, &touched))
	require.Equal(t, len(migrations.Functions()), functions, "every function file recorded")
	require.False(t, touched, "the second up applied no function file again")
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
// Every step down and up one version at a time also works, and each version
// reached going down is the very catalog that version has going up: a down
// file reverts what its version changed, function bodies included. A
// version from FunctionFilesSince on cannot be built going up below the
// latest (its function bodies are the files of the binary released at it,
// and this binary carries the latest's only), so it is reached going down:
// after the way up again the test goes down once more and compares each of
// those versions with the first way down. Each step down also changes
// exactly the functions its down file names: a down restores the bodies its
// own version changed, and no other version's.
func TestDownToZeroAndUpAgain(t *testing.T) {
	t.Parallel()
	db := dbtest.NewEmpty(t)
	ctx := context.Background()
	_, err := up(ctx, db.Pool, "skiplock", 0)
	require.NoError(t, err)
	want := fingerprint(t, db.Pool)

	wentDown := map[int]string{}
	fns := functionDefs(t, db.Pool)
	for v := migrations.Latest() - 1; v >= 0; v-- {
		reverted, err := down(ctx, db.Pool, "skiplock", v)
		require.NoError(t, err, "down to %d", v)
		require.Equal(t, []int{v + 1}, reverted)
		if v > 0 {
			wentDown[v] = fingerprint(t, db.Pool)
			below := functionDefs(t, db.Pool)
			require.Equal(t, namedByDown(migrations.All()[v].Down), changedFunctions(fns, below),
				"the functions %03d's down file names are the ones it changed", v+1)
			fns = below
		}
	}
	var exists bool
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'skiplock')").Scan(&exists))
	require.False(t, exists, "down to 0 leaves no schema behind")

	for v := 1; v < migrations.FunctionFilesSince; v++ {
		applied, err := up(ctx, db.Pool, "skiplock", v)
		require.NoError(t, err, "up to %d", v)
		require.Equal(t, []int{v}, applied)
		require.Equal(t, columnsByName(wentDown[v]), columnsByName(fingerprint(t, db.Pool)), "version %d, up and down", v)
	}
	for v := migrations.FunctionFilesSince; v < migrations.Latest(); v++ {
		_, err := up(ctx, db.Pool, "skiplock", v)
		require.ErrorIs(t, err, migrations.ErrNoFunctionsForTarget, "up to %d", v)
	}
	applied, err := up(ctx, db.Pool, "skiplock", 0)
	require.NoError(t, err)
	require.Len(t, applied, migrations.Latest()-migrations.FunctionFilesSince+1)
	require.Equal(t, want, fingerprint(t, db.Pool), "up again gives the very schema of a fresh up")

	for v := migrations.Latest() - 1; v >= migrations.FunctionFilesSince-1; v-- {
		_, err := down(ctx, db.Pool, "skiplock", v)
		require.NoError(t, err, "down to %d again", v)
		require.Equal(t, wentDown[v], fingerprint(t, db.Pool), "version %d, down from a fresh up and down after up again", v)
	}
}

// columnsByName returns a fingerprint with each table's columns in name
// order. A down restores every column, its type, default and constraints,
// not its place in the row: version 26 moved the six columns a claim
// changes to the end of jobs' row, and its down leaves them there (a
// column's place is invisible to every statement skiplock runs, and
// putting them back before gen, jobs' partition key, which cannot be
// dropped and added, would mean rebuilding the partitioned table).
func columnsByName(fp string) string {
	lines := strings.Split(fp, "\n")
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "CREATE TABLE ") || !strings.HasSuffix(lines[i], " (") {
			continue
		}
		j := i + 1
		for j < len(lines) && strings.HasPrefix(lines[j], "    ") {
			lines[j] = strings.TrimSuffix(lines[j], ",")
			j++
		}
		sort.Strings(lines[i+1 : j])
		i = j
	}
	return strings.Join(lines, "\n")
}

// functionDefs maps each function of schema skiplock to its whole
// definition: body, settings, security, comment and privileges.
func functionDefs(t *testing.T, pool *pgxpool.Pool) map[string]string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT p.proname,
			pg_get_functiondef(p.oid) || coalesce(obj_description(p.oid, 'pg_proc'), '') || coalesce(p.proacl::text, '')
		FROM pg_proc AS p WHERE p.pronamespace = 'skiplock'::regnamespace`)
	require.NoError(t, err)
	defs := map[string]string{}
	for rows.Next() {
		var name, def string
		require.NoError(t, rows.Scan(&name, &def))
		defs[name] += def // overloads: one entry for the name
	}
	require.NoError(t, rows.Err())
	return defs
}

// changedFunctions lists the names whose definitions differ between a and b
// (added, dropped or changed), sorted.
func changedFunctions(a, b map[string]string) []string {
	var names []string
	for name, def := range a {
		if b[name] != def {
			names = append(names, name)
		}
	}
	for name := range b {
		if _, ok := a[name]; !ok {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

var functionStatement = regexp.MustCompile(`(?im)^\s*(?:CREATE\s+OR\s+REPLACE\s+FUNCTION|CREATE\s+FUNCTION|DROP\s+FUNCTION(?:\s+IF\s+EXISTS)?|ALTER\s+FUNCTION|COMMENT\s+ON\s+FUNCTION)\s+\{\{schema\}\}\.([a-z_0-9]+)`)

// namedByDown lists the functions a down file creates, drops, alters or
// comments on, sorted.
func namedByDown(sql string) []string {
	seen := map[string]bool{}
	var names []string
	for _, m := range functionStatement.FindAllStringSubmatch(sql, -1) {
		if !seen[m[1]] {
			seen[m[1]] = true
			names = append(names, m[1])
		}
	}
	sort.Strings(names)
	return names
}

// An up to a version from FunctionFilesSince on below the latest is refused
// and changes nothing: this binary carries the latest version's function
// bodies only. The error names the version, why, and the way there. The
// up script is refused alike; the down script to such a version is not.
func TestUpToAVersionWithoutItsFunctions(t *testing.T) {
	t.Parallel()
	db := dbtest.NewEmpty(t)
	ctx := context.Background()
	_, err := up(ctx, db.Pool, "skiplock", migrations.FunctionFilesSince-1)
	require.NoError(t, err)
	before := catalog(t, db.Pool, "skiplock")
	latest := migrations.Latest()
	for v := migrations.FunctionFilesSince; v < latest; v++ {
		ran, err := up(ctx, db.Pool, "skiplock", v)
		require.ErrorIs(t, err, migrations.ErrNoFunctionsForTarget, "up to %d", v)
		require.Empty(t, ran)
		require.Contains(t, err.Error(), fmt.Sprintf("cannot go up to version %d:", v))
		require.Contains(t, err.Error(), fmt.Sprintf("this binary carries the functions of version %d: migrate to %d, or down from it", latest, latest))

		_, err = migrations.SQL("skiplock", true, 1, v)
		require.ErrorIs(t, err, migrations.ErrNoFunctionsForTarget, "up script to %d", v)
		script, err := migrations.SQL("skiplock", false, v+1, 0)
		require.NoError(t, err, "down script to %d", v)
		require.Contains(t, script, fmt.Sprintf("%03d_", latest))
	}
	require.Equal(t, before, catalog(t, db.Pool, "skiplock"), "a refused up changed the schema")
	st, err := migrations.StatusOf(ctx, db.Pool, "skiplock")
	require.NoError(t, err)
	for _, s := range st {
		require.Equal(t, s.Version < migrations.FunctionFilesSince, s.AppliedAt != nil, "version %d", s.Version)
	}
	// A fresh database is refused before anything is created.
	empty := dbtest.NewEmpty(t)
	_, err = up(ctx, empty.Pool, "skiplock", latest-1)
	require.ErrorIs(t, err, migrations.ErrNoFunctionsForTarget)
	var exists bool
	require.NoError(t, empty.Pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'skiplock')").Scan(&exists))
	require.False(t, exists, "a refused up created the schema")
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
	var size int
	require.NoError(t, db.Pool.QueryRow(context.Background(), "SELECT skiplock.ring_size()").Scan(&size))
	require.Equal(t, size+1, parts, "jobs_g0..jobs_g<ring_size()-1> and jobs_keyed")
}

// jobs_done's BRIN index on id leaves its ranges to summarize_done
// (migration 025): no partition's index asks autovacuum to summarize a
// range it fills, neither one there before 25 nor a day
// ensure_done_partitions attaches later, which adopts the index it built
// (one index per day). Down to 24 they ask again.
func TestHistoryIndexLeavesRangesToSummarizeDone(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	leaves := func() map[string]string {
		rows, err := db.Pool.Query(ctx, `SELECT c.relname, coalesce(array_to_string(c.reloptions, ','), '')
			FROM pg_partition_tree('skiplock.jobs_done_id') AS t JOIN pg_class AS c ON c.oid = t.relid
			WHERE t.isleaf`)
		require.NoError(t, err)
		out := map[string]string{}
		var name, opts string
		_, err = pgx.ForEachRow(rows, []any{&name, &opts}, func() error { out[name] = opts; return nil })
		require.NoError(t, err)
		return out
	}
	var created int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT skiplock.ensure_done_partitions(2)`).Scan(&created))
	require.Equal(t, 3, created, "today and two days ahead")
	got := leaves()
	require.Len(t, got, 4, "the default partition's index and the three days'")
	for name, opts := range got {
		require.Equal(t, "pages_per_range=16,autosummarize=off", opts, name)
	}
	var indexes int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_index
		WHERE indrelid = format('skiplock.jobs_done_%s', to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD'))::regclass`).Scan(&indexes))
	require.Equal(t, 1, indexes, "the ATTACH adopted the day's index")

	_, err := down(ctx, db.Pool, "skiplock", 24)
	require.NoError(t, err)
	for name, opts := range leaves() {
		require.Equal(t, "pages_per_range=16,autosummarize=on", opts, name)
	}
	_, err = up(ctx, db.Pool, "skiplock", 0)
	require.NoError(t, err)
	for name, opts := range leaves() {
		require.Equal(t, "pages_per_range=16,autosummarize=off", opts, name)
	}
}

// The ring's size has one home, ring_size(): the partitions the schema has
// are the ones it names, and ring_gen never names another.
func TestRingSizeIsThePartitions(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	var size int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT skiplock.ring_size()").Scan(&size))
	require.GreaterOrEqual(t, size, 3, "one taking inserts, one draining, one to truncate")
	var ring []string
	rows, err := db.Pool.Query(ctx, `SELECT c.relname FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'skiplock.jobs'::regclass AND c.relname <> 'jobs_keyed' ORDER BY c.relname`)
	require.NoError(t, err)
	ring, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	want := make([]string, size)
	for g := range want {
		want[g] = fmt.Sprintf("jobs_g%d", g)
	}
	require.Equal(t, want, ring)
	var gen int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT skiplock.ring_gen()").Scan(&gen))
	require.True(t, gen >= 0 && gen < size, "ring_gen() = %d", gen)
	// No function body states the size itself.
	rows, err = db.Pool.Query(ctx, `SELECT p.proname FROM pg_proc AS p
		WHERE p.pronamespace = 'skiplock'::regnamespace AND p.proname <> 'ring_size' AND p.prosrc ~ '%\s*3\s*\)'`)
	require.NoError(t, err)
	literal, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Empty(t, literal, "functions that take a value modulo 3 instead of ring_size()")
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

	// A release that changed only function bodies: the script past the
	// latest version holds the function files alone, and applies again.
	only, err := migrations.SQL("skiplock", true, migrations.Latest()+1, 0)
	require.NoError(t, err)
	require.NotContains(t, only, "skiplock migration")
	for _, f := range migrations.Functions() {
		require.Contains(t, only, "-- skiplock function "+f.Name+"\n")
	}
	before := catalog(t, db.Pool, "skiplock")
	_, err = db.Pool.Exec(ctx, only)
	require.NoError(t, err)
	require.Equal(t, before, catalog(t, db.Pool, "skiplock"))
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

// Each SQL function's current body has one home, sql/functions/<name>.sql:
// the functions the schema has are the files there are, and no versioned
// migration from FunctionFilesSince on carries a body in its up file (its
// down file restores the bodies its version changed).
func TestFunctionsHaveOneHome(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	rows, err := db.Pool.Query(ctx, `SELECT p.proname FROM pg_proc AS p
		WHERE p.pronamespace = 'skiplock'::regnamespace ORDER BY p.proname COLLATE "C"`)
	require.NoError(t, err)
	inCatalog, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	var files []string
	for _, f := range migrations.Functions() {
		files = append(files, f.Name)
		require.Equal(t, 1, strings.Count(f.SQL, "CREATE OR REPLACE FUNCTION"), "functions/%s.sql defines one function", f.Name)
	}
	require.Equal(t, inCatalog, files, "one file per function, one function per file")
	create := regexp.MustCompile(`(?i)CREATE\s+(OR\s+REPLACE\s+)?FUNCTION`)
	for _, m := range migrations.All() {
		if m.Version >= migrations.FunctionFilesSince {
			require.False(t, create.MatchString(m.Up), "%03d_%s.up.sql defines a function: its body belongs in sql/functions", m.Version, m.Name)
		}
	}
}

// A function file changed without a migration is applied by the next up
// (and only that file): the body a schema runs is the file's.
func TestChangedFunctionFileIsApplied(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	body := func() string {
		var s string
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT prosrc FROM pg_proc WHERE oid = 'skiplock.ring_period'::regproc").Scan(&s))
		return s
	}
	want := body()
	appliedAt := func() map[string]time.Time {
		rows, err := db.Pool.Query(ctx, "SELECT name, applied_at FROM skiplock.schema_functions")
		require.NoError(t, err)
		m := map[string]time.Time{}
		for rows.Next() {
			var n string
			var at time.Time
			require.NoError(t, rows.Scan(&n, &at))
			m[n] = at
		}
		require.NoError(t, rows.Err())
		return m
	}
	// As if the binary before this one had applied another text.
	_, err := db.Pool.Exec(ctx, `
		CREATE OR REPLACE FUNCTION skiplock.ring_period() RETURNS integer LANGUAGE sql IMMUTABLE AS $$ SELECT 7 $$;
		UPDATE skiplock.schema_functions SET sha256 = 'older' WHERE name = 'ring_period';
		INSERT INTO skiplock.schema_functions (name, sha256) VALUES ('dropped_by_a_migration', 'x');`)
	require.NoError(t, err)
	before := appliedAt()
	ran, err := up(ctx, db.Pool, "skiplock", 0)
	require.NoError(t, err)
	require.Empty(t, ran, "no version to apply")
	require.Equal(t, want, body(), "the file's body is back")
	// Which records the up rewrote (a record's time moves when its file is
	// applied; comparing times with the clock raced the template's build).
	var again []string
	for name, at := range appliedAt() {
		if prev, ok := before[name]; !ok || !prev.Equal(at) {
			again = append(again, name)
		}
	}
	require.Equal(t, []string{"ring_period"}, again, "only the changed file was applied")
	var stale bool
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM skiplock.schema_functions WHERE name = 'dropped_by_a_migration')").Scan(&stale))
	require.False(t, stale, "the record of a file that is gone is forgotten")
}

// A database at any earlier version, with jobs in flight and a process
// enqueueing throughout, upgrades to the very catalog of a fresh install
// (schema.sql's), every job kept. A version from FunctionFilesSince on is
// reached as a database gets there with this binary: down from the latest.
func TestUpgradeFromEveryVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ref := dbtest.NewEmpty(t)
	_, err := up(ctx, ref.Pool, "skiplock", 0)
	require.NoError(t, err)
	want := catalog(t, ref.Pool, "skiplock")
	wantDump, err := migrations.Dump(ctx, ref.Pool, "skiplock")
	require.NoError(t, err)
	// enqueue's signature: an upgrade that changes it replaces the function
	// by DROP and CREATE.
	signature := func(pool *pgxpool.Pool) string {
		var args string
		require.NoError(t, pool.QueryRow(ctx, "SELECT pg_get_function_identity_arguments('skiplock.enqueue'::regproc)").Scan(&args))
		return args
	}
	latestSignature := signature(ref.Pool)

	for v := 1; v < migrations.Latest(); v++ {
		if testing.Short() && v != 1 && v != migrations.Latest()-1 {
			continue // -short: the oldest and the newest upgrade only
		}
		t.Run(fmt.Sprintf("from_%03d", v), func(t *testing.T) {
			db := dbtest.NewEmpty(t)
			var err error
			if v < migrations.FunctionFilesSince {
				_, err = up(ctx, db.Pool, "skiplock", v)
			} else {
				_, err = up(ctx, db.Pool, "skiplock", 0)
				require.NoError(t, err)
				_, err = down(ctx, db.Pool, "skiplock", v)
			}
			require.NoError(t, err)
			replacesEnqueue := signature(db.Pool) != latestSignature
			_, err = db.Pool.Exec(ctx, `
				SELECT skiplock.enqueue('q', 'k');
				SELECT skiplock.enqueue('q', 'k', unique_key => 'u1');
				SELECT skiplock.enqueue('q', 'k', entity => 'e1');
				UPDATE skiplock.jobs SET state = 'running', locked_by = 'w', lease_token = 77,
				       lease_expires_at = now() + interval '1 minute' WHERE id = 1;`)
			require.NoError(t, err)

			// A process enqueueing while the upgrade runs waits for the
			// upgrade's locks and loses nothing. An upgrade that changes
			// enqueue's signature (migrations 006 and 014, and version 19's
			// function file, which added the uniqueness and mode arguments:
			// from 001-018) must replace it by DROP and CREATE, since CREATE
			// OR REPLACE cannot change a function's arguments; a call that
			// looked the old function up just before the DROP then fails
			// once with "cache lookup failed" (PostgreSQL's, and it succeeds
			// when retried; docs/migrations.md tells producers). So such a
			// failure is tolerated, and only when the upgrade changes
			// enqueue's signature: from 019 on none is.
			stop := make(chan struct{})
			type result struct {
				ids  []int64
				errs []string
			}
			done := make(chan result)
			go func() {
				var r result
				defer func() { done <- r }()
				for {
					select {
					case <-stop:
						return
					default:
					}
					var id int64
					if err := db.Pool.QueryRow(ctx, "SELECT skiplock.enqueue('q', 'k')").Scan(&id); err != nil {
						r.errs = append(r.errs, err.Error())
						continue
					}
					r.ids = append(r.ids, id)
				}
			}()
			_, err = up(ctx, db.Pool, "skiplock", 0)
			close(stop)
			r := <-done
			require.NoError(t, err)
			var after int64
			require.NoError(t, db.Pool.QueryRow(ctx, "SELECT skiplock.enqueue('q', 'k')").Scan(&after))
			ids := append(r.ids, after)
			for _, e := range r.errs {
				require.True(t, replacesEnqueue, "an enqueue failed during an upgrade that keeps enqueue's signature: %s", e)
				require.Contains(t, e, "cache lookup failed for function")
			}

			require.Equal(t, want, catalog(t, db.Pool, "skiplock"), "upgraded from %d", v)
			got, err := migrations.Dump(ctx, db.Pool, "skiplock")
			require.NoError(t, err)
			require.Equal(t, wantDump, got, "upgraded from %d", v)

			var running, keyedLeft int
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE id = 1 AND state = 'running' AND lease_token = 77),
				count(*) FILTER (WHERE id <= 3) FROM skiplock.jobs`).Scan(&running, &keyedLeft))
			require.Equal(t, 1, running, "the running job keeps its lease")
			require.Equal(t, 3, keyedLeft, "the jobs in flight before the upgrade")
			var missing int
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM unnest($1::bigint[]) AS i(id)
				WHERE NOT EXISTS (SELECT 1 FROM skiplock.jobs AS j WHERE j.id = i.id)`, ids).Scan(&missing))
			require.Zero(t, missing, "a job enqueued during the upgrade was lost")
		})
	}
}

// A schema a newer binary migrated further keeps that binary's bodies: an
// older one (a replica restarting during a rolling deploy) applies no
// function file, even one whose text differs from the schema's.
func TestOlderBinaryLeavesFunctionsAlone(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `
		INSERT INTO skiplock.schema_migrations (version, name) VALUES (999, 'from_a_newer_binary');
		CREATE OR REPLACE FUNCTION skiplock.ring_period() RETURNS integer LANGUAGE sql IMMUTABLE AS $$ SELECT 7 $$;
		UPDATE skiplock.schema_functions SET sha256 = 'newer' WHERE name = 'ring_period';`)
	require.NoError(t, err)
	ran, err := up(ctx, db.Pool, "skiplock", 0)
	require.NoError(t, err)
	require.Empty(t, ran)
	var period int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT skiplock.ring_period()").Scan(&period))
	require.Equal(t, 7, period, "the newer binary's body stays")
}

// Version 26 moves the six columns a claim changes to the end of jobs'
// row and leaves every privilege on them as it was: an upgrade from 25
// with a reader role granted (its column grants on jobs and on each
// partition, its grants on the views that read them) and a worker role
// keeps each grant, and the claim columns come last.
func TestClaimColumnsLastKeepGrants(t *testing.T) {
	t.Parallel()
	db := dbtest.NewEmpty(t)
	ctx := context.Background()
	_, err := up(ctx, db.Pool, "skiplock", 0)
	require.NoError(t, err)
	_, err = down(ctx, db.Pool, "skiplock", 25)
	require.NoError(t, err)

	b := make([]byte, 6)
	_, _ = rand.Read(b)
	suffix := hex.EncodeToString(b)
	for _, kind := range []string{"reader", "worker"} {
		role := "t_mig26_" + kind + "_" + suffix
		_, err = db.Pool.Exec(ctx, "CREATE ROLE "+role)
		require.NoError(t, err)
		t.Cleanup(func() {
			_, _ = db.Pool.Exec(context.Background(), "DROP OWNED BY "+role)
			_, _ = db.Pool.Exec(context.Background(), "DROP ROLE "+role)
		})
		_, err = db.Pool.Exec(ctx, "SELECT * FROM skiplock.grant_role($1, $2)", kind, role)
		require.NoError(t, err)
	}
	grants := func() []string {
		rows, err := db.Pool.Query(ctx, `
			SELECT c.relname || '.' || a.attname || ' ' || x.grantee::regrole::text || ' ' || x.privilege_type
			FROM pg_class AS c
			JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
			CROSS JOIN aclexplode(a.attacl) AS x
			WHERE c.relnamespace = 'skiplock'::regnamespace AND c.relname LIKE 'jobs%'
		  UNION ALL
			SELECT c.relname || ' ' || x.grantee::regrole::text || ' ' || x.privilege_type
			FROM pg_class AS c CROSS JOIN aclexplode(c.relacl) AS x
			WHERE c.relnamespace = 'skiplock'::regnamespace AND x.grantee <> c.relowner
			  AND (c.relname LIKE 'jobs%' OR c.relkind = 'v')
			ORDER BY 1`)
		require.NoError(t, err)
		list, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return list
	}
	before := grants()
	require.Contains(t, before, "jobs.state t_mig26_reader_"+suffix+" SELECT", "the reader's column grant, before")
	require.Contains(t, before, "jobs_g0.locked_by t_mig26_reader_"+suffix+" SELECT")
	require.Contains(t, before, "long_runners t_mig26_reader_"+suffix+" SELECT")

	_, err = up(ctx, db.Pool, "skiplock", 0)
	require.NoError(t, err)
	require.Equal(t, before, grants(), "every grant kept across version 26")

	var last []string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT array_agg(a.attname::text ORDER BY a.attnum DESC)
		FROM (SELECT * FROM pg_attribute WHERE attrelid = 'skiplock.jobs'::regclass AND attnum > 0 AND NOT attisdropped
		      ORDER BY attnum DESC LIMIT 6) AS a`).Scan(&last))
	require.Equal(t, []string{"lease_expires_at", "locked_by", "attempted_at", "lease_token", "state", "attempts"}, last,
		"the columns a claim changes are the last of jobs' row (migration 026); a column added after them "+
			"is in every claim's WAL record whenever it holds a value (docs/architecture.md, Rotate)")
}
