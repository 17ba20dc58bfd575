package migrations_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/migrations"
)

// sqlReference is the SQL reference this test keeps true.
const sqlReference = "../../docs/reference/sql.md"

// schemaObject is a function or view of the migrated schema, with the
// signature the reference must show for it.
type schemaObject struct {
	name      string
	signature string // as PostgreSQL prints it, normalized by normalizeDoc
}

var (
	// A signature in the reference: what starts each entry.
	docSignature = regexp.MustCompile(`\b(?:FUNCTION|PROCEDURE|VIEW) skiplock\.([a-z_][a-z0-9_]*)`)
	// Any object of the schema the reference names.
	docObject = regexp.MustCompile(`\bskiplock\.([a-z_][a-z0-9_]*)`)
	// The migration an entry says holds the object's current body.
	docMigration = regexp.MustCompile(`\bmigration (\d{3})\b`)
	// A migration creating or replacing a function or view.
	createObject = regexp.MustCompile(`(?i)\bCREATE\s+(?:OR\s+REPLACE\s+)?(?:FUNCTION|PROCEDURE|VIEW)\s+\{\{schema\}\}\.([a-z_][a-z0-9_]*)`)
	spaces       = regexp.MustCompile(`\s+`)
)

// settings are names under skiplock. that are custom settings (SET
// skiplock.x), not objects of the schema. None since migration 020 (the
// payload limit moved from skiplock.max_payload_bytes to the settings
// table, which only the owner can write).
var settings = map[string]bool{}

// TestSQLReference keeps docs/reference/sql.md the reference of the schema
// the migrations build: every function and view of a freshly migrated
// schema is there with the signature the catalog prints for it (its
// arguments' names, types and defaults, its result, a view's columns), each
// entry names the file that holds the object's body today, and the page
// names no object of the schema that no longer exists.
func TestSQLReference(t *testing.T) {
	t.Parallel()
	db := dbtest.NewEmpty(t)
	ctx := context.Background()
	require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		_, err := migrations.UpTx(ctx, tx, "skiplock", 0)
		return err
	}))

	rows, err := db.Pool.Query(ctx, `
		SELECT p.proname::text,
		       CASE p.prokind WHEN 'p' THEN 'PROCEDURE ' ELSE 'FUNCTION ' END || n.nspname || '.' || p.proname
		       || '(' || pg_get_function_arguments(p.oid) || ')'
		       || coalesce(' RETURNS ' || pg_get_function_result(p.oid), '')
		FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
		WHERE n.nspname = $1
		UNION ALL
		SELECT c.relname::text,
		       'VIEW ' || n.nspname || '.' || c.relname || ' ('
		       || string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum) || ')'
		FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
		JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
		WHERE n.nspname = $1 AND c.relkind IN ('v', 'm')
		GROUP BY n.nspname, c.relname
		ORDER BY 1, 2`, "skiplock")
	require.NoError(t, err)
	var objects []schemaObject
	for rows.Next() {
		var o schemaObject
		require.NoError(t, rows.Scan(&o.name, &o.signature))
		o.signature = normalizeDoc(o.signature)
		objects = append(objects, o)
	}
	require.NoError(t, rows.Err())
	require.NotEmpty(t, objects)

	// Every name of the schema: functions and relations of any kind (the
	// page may name a table or a sequence in its prose).
	names := map[string]bool{}
	rows, err = db.Pool.Query(ctx, `
		SELECT p.proname::text FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace WHERE n.nspname = $1
		UNION
		SELECT c.relname::text FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace WHERE n.nspname = $1`,
		"skiplock")
	require.NoError(t, err)
	all, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	for _, n := range all {
		names[n] = true
	}

	raw, err := os.ReadFile(sqlReference)
	require.NoError(t, err)
	doc := normalizeDoc(string(raw))

	// 1. Every function and view is documented, with today's signature.
	var missing []string
	for _, o := range objects {
		if !strings.Contains(doc, o.signature) {
			missing = append(missing, "  "+o.signature)
		}
	}
	require.Empty(t, missing, "%s documents none of these objects of the schema, or not with this signature "+
		"(add each to the public section or to the internal one, with its signature as printed here):\n%s",
		sqlReference, strings.Join(missing, "\n"))

	// 2. No entry documents an object the schema no longer has, or a
	// signature it no longer has beside today's.
	inSchema := map[string]int{}
	for _, o := range objects {
		inSchema[o.name]++
	}
	documented := map[string]int{}
	for _, m := range docSignature.FindAllStringSubmatch(doc, -1) {
		documented[m[1]]++
	}
	var stale []string
	for name, n := range documented {
		if n > inSchema[name] {
			stale = append(stale, name+" (documented "+strconv.Itoa(n)+" times, in the schema "+strconv.Itoa(inSchema[name])+")")
		}
	}
	sort.Strings(stale)
	require.Empty(t, stale, "%s documents functions or views the schema no longer has (or signatures it no longer has):\n  %s",
		sqlReference, strings.Join(stale, "\n  "))
	var unknown []string
	for _, m := range docObject.FindAllStringSubmatch(doc, -1) {
		if !names[m[1]] && !settings[m[1]] {
			unknown = append(unknown, "skiplock."+m[1])
		}
	}
	require.Empty(t, unknown, "%s names objects the schema does not have: %v", sqlReference, unknown)

	// 3. Each entry names the file that holds its object's body today: a
	// function's own file under sql/functions (its one home), a view's last
	// migration that created or replaced it.
	last := map[string]int{}
	for _, m := range migrations.All() {
		for _, c := range createObject.FindAllStringSubmatch(m.Up, -1) {
			last[c[1]] = m.Version
		}
	}
	starts := docSignature.FindAllStringSubmatchIndex(doc, -1)
	for i, s := range starts {
		name := doc[s[2]:s[3]]
		end := len(doc)
		if i+1 < len(starts) {
			end = starts[i+1][0]
		}
		entry := doc[s[1]:end]
		if _, err := os.Stat(filepath.Join("sql", "functions", name+".sql")); err == nil {
			want := "`functions/" + name + ".sql`"
			require.Contains(t, entry, want, "%s: %s's body today is in %s; its entry must say so", sqlReference, name, want)
			continue
		}
		m := docMigration.FindStringSubmatch(entry)
		require.NotNil(t, m, "%s: the entry of %s names no migration (\"body: migration NNN\")", sqlReference, name)
		want, ok := last[name]
		require.True(t, ok, "no migration creates %s", name)
		got, _ := strconv.Atoi(m[1])
		require.Equal(t, want, got, "%s: %s's body today is migration %03d's, the page says %s", sqlReference, name, want, m[1])
	}
}

// normalizeDoc makes a signature comparable however it is wrapped: runs of
// white space become one space, with none just inside parentheses.
func normalizeDoc(s string) string {
	s = spaces.ReplaceAllString(s, " ")
	s = strings.ReplaceAll(s, "( ", "(")
	return strings.ReplaceAll(s, " )", ")")
}
