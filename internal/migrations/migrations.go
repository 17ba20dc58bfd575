// Package migrations owns skiplock's schema: versioned SQL files embedded in
// the binary, applied under an advisory lock so concurrent runners serialize,
// one transaction for a whole run so a failed upgrade leaves nothing behind.
package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/skiplock/skiplock/internal/sqlfile"
)

//go:embed sql/*.sql
var files embed.FS

// The runner's own statements (runner/runner.sql), by name.
//
//go:embed runner/*.sql
var runnerFiles embed.FS

var runnerSQL = sqlfile.MustParse(runnerFiles, "runner")

// stmt returns the runner's statement name rendered for schema.
func stmt(name, schema string) string {
	q, ok := runnerSQL[name]
	if !ok {
		panic("migrations: no runner statement " + name)
	}
	return sqlfile.Renderer(schema).Replace(q)
}

// Migration is one schema version.
type Migration struct {
	Version int
	Name    string
	Up      string // SQL with {{schema}} placeholders
	Down    string
}

// Status is a migration with the time it was applied, if it was.
type Status struct {
	Migration
	AppliedAt *time.Time
}

// Executor is what the runner needs: satisfied by pgx.Tx.
type Executor interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

var (
	fileRe   = regexp.MustCompile(`^(\d{3})_([a-z0-9_]+)\.(up|down)\.sql$`)
	schemaRe = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,47}$`)

	all = mustLoad()
)

// ErrInvalidSchema reports a schema name that is not a plain lower-case identifier.
var ErrInvalidSchema = errors.New("schema: must match ^[a-z_][a-z0-9_]{0,47}$")

// ValidateSchema checks a schema name. Schema names are the one identifier
// skiplock splices into SQL, so only plain lower-case names are accepted.
func ValidateSchema(schema string) error {
	if !schemaRe.MatchString(schema) {
		return fmt.Errorf("%w (got %q)", ErrInvalidSchema, schema)
	}
	return nil
}

func mustLoad() []Migration {
	entries, err := fs.ReadDir(files, "sql")
	if err != nil {
		panic(err)
	}
	byVersion := map[int]*Migration{}
	for _, e := range entries {
		m := fileRe.FindStringSubmatch(e.Name())
		if m == nil {
			panic("migrations: unexpected file " + e.Name())
		}
		v, _ := strconv.Atoi(m[1])
		body, err := files.ReadFile("sql/" + e.Name())
		if err != nil {
			panic(err)
		}
		mig := byVersion[v]
		if mig == nil {
			mig = &Migration{Version: v, Name: m[2]}
			byVersion[v] = mig
		}
		if mig.Name != m[2] {
			// Two branches that each added a migration with one number.
			panic(fmt.Sprintf("migrations: version %d has two names, %s and %s", v, mig.Name, m[2]))
		}
		if m[3] == "up" {
			mig.Up = string(body)
		} else {
			mig.Down = string(body)
		}
	}
	out := make([]Migration, 0, len(byVersion))
	for _, m := range byVersion {
		if m.Up == "" || m.Down == "" {
			panic(fmt.Sprintf("migrations: version %d lacks an up or down file", m.Version))
		}
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			panic(fmt.Sprintf("migrations: version %d is missing", i+1))
		}
	}
	return out
}

// All returns every migration in version order.
func All() []Migration { return append([]Migration(nil), all...) }

// Latest is the highest version known to this binary.
func Latest() int { return all[len(all)-1].Version }

// Render substitutes the schema into a migration's SQL (sqlfile's renderer,
// the one every package's SQL goes through).
func Render(sql, schema string) string { return sqlfile.Renderer(schema).Replace(sql) }

func prepare(ctx context.Context, tx Executor, schema string) error {
	if err := ValidateSchema(schema); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, stmt("lock", schema), schema); err != nil {
		return fmt.Errorf("migrations: lock: %w", err)
	}
	if _, err := tx.Exec(ctx, stmt("create_schema", schema)); err != nil {
		return fmt.Errorf("migrations: create schema: %w", err)
	}
	if _, err := tx.Exec(ctx, stmt("version_table", schema)); err != nil {
		return fmt.Errorf("migrations: version table: %w", err)
	}
	return nil
}

func applied(ctx context.Context, tx Executor, schema string) (map[int]time.Time, error) {
	rows, err := tx.Query(ctx, stmt("applied", schema))
	if err != nil {
		return nil, err
	}
	out := map[int]time.Time{}
	for rows.Next() {
		var v int
		var at time.Time
		if err := rows.Scan(&v, &at); err != nil {
			rows.Close()
			return nil, err
		}
		out[v] = at
	}
	return out, rows.Err()
}

// UpTx applies every pending migration up to target (0 = latest) inside tx,
// which the caller commits. It returns the versions it applied; none when the
// schema is current, so running it again is a no-op.
func UpTx(ctx context.Context, tx Executor, schema string, target int) ([]int, error) {
	if target == 0 {
		target = Latest()
	}
	if target < 0 || target > Latest() {
		return nil, fmt.Errorf("migrations: target: version %d does not exist (latest is %d)", target, Latest())
	}
	if err := prepare(ctx, tx, schema); err != nil {
		return nil, err
	}
	done, err := applied(ctx, tx, schema)
	if err != nil {
		return nil, fmt.Errorf("migrations: read versions: %w", err)
	}
	var ran []int
	for _, m := range all {
		if m.Version > target {
			break
		}
		if _, ok := done[m.Version]; ok {
			continue
		}
		if _, err := tx.Exec(ctx, Render(m.Up, schema)); err != nil {
			return ran, fmt.Errorf("migrations: up %03d_%s: %w", m.Version, m.Name, err)
		}
		if _, err := tx.Exec(ctx, stmt("record", schema), m.Version, m.Name); err != nil {
			return ran, fmt.Errorf("migrations: record %03d: %w", m.Version, err)
		}
		ran = append(ran, m.Version)
	}
	return ran, nil
}

// DownTx reverts applied migrations above target, newest first. At target 0
// it also removes the version table and the schema itself if nothing else
// lives in it.
func DownTx(ctx context.Context, tx Executor, schema string, target int) ([]int, error) {
	if target < 0 || target > Latest() {
		return nil, fmt.Errorf("migrations: target: version %d does not exist (latest is %d)", target, Latest())
	}
	if err := prepare(ctx, tx, schema); err != nil {
		return nil, err
	}
	done, err := applied(ctx, tx, schema)
	if err != nil {
		return nil, fmt.Errorf("migrations: read versions: %w", err)
	}
	var ran []int
	for i := len(all) - 1; i >= 0; i-- {
		m := all[i]
		if m.Version <= target {
			break
		}
		if _, ok := done[m.Version]; !ok {
			continue
		}
		if _, err := tx.Exec(ctx, Render(m.Down, schema)); err != nil {
			return ran, fmt.Errorf("migrations: down %03d_%s: %w", m.Version, m.Name, err)
		}
		if _, err := tx.Exec(ctx, stmt("forget", schema), m.Version); err != nil {
			return ran, err
		}
		ran = append(ran, m.Version)
	}
	if target == 0 {
		if _, err := tx.Exec(ctx, stmt("drop_version_table", schema)); err != nil {
			return ran, err
		}
		var others bool
		if err := tx.QueryRow(ctx, stmt("schema_in_use", schema)).Scan(&others); err != nil {
			return ran, err
		}
		if !others {
			if _, err := tx.Exec(ctx, stmt("drop_schema", schema)); err != nil {
				return ran, err
			}
		}
	}
	return ran, nil
}

// StatusOf lists every migration with the time it was applied. A schema that
// was never migrated reports everything pending.
func StatusOf(ctx context.Context, db Executor, schema string) ([]Status, error) {
	if err := ValidateSchema(schema); err != nil {
		return nil, err
	}
	var exists bool
	err := db.QueryRow(ctx, stmt("version_table_exists", schema)).Scan(&exists)
	if err != nil {
		return nil, err
	}
	done := map[int]time.Time{}
	if exists {
		if done, err = applied(ctx, db, schema); err != nil {
			return nil, err
		}
	}
	out := make([]Status, 0, len(all))
	for _, m := range all {
		s := Status{Migration: m}
		if at, ok := done[m.Version]; ok {
			at := at
			s.AppliedAt = &at
		}
		out = append(out, s)
	}
	return out, nil
}

// SQL renders the migrations from version `from` to `to` (inclusive) as one
// script for teams that run their own migration tool. The script records
// each version in schema_migrations exactly as the runner does (idempotently:
// ON CONFLICT DO NOTHING), so `migrate status`, the doctor and `migrate up`
// recognise a schema it built as migrated; the down script removes the
// records again. Down scripts come newest first. Run it in one transaction
// (psql --single-transaction, or your tool's transaction) so a failure
// leaves nothing half applied.
func SQL(schema string, up bool, from, to int) (string, error) {
	if err := ValidateSchema(schema); err != nil {
		return "", err
	}
	if from < 1 {
		from = 1
	}
	if to == 0 || to > Latest() {
		to = Latest()
	}
	var b strings.Builder
	// The runner's statements, with the version and name in place of $1, $2
	// (a version is a number, a name matches [a-z0-9_]+: nothing to quote).
	fill := func(name string, m Migration) string {
		return strings.NewReplacer("$1", strconv.Itoa(m.Version), "$2", "'"+m.Name+"'").Replace(stmt(name, schema))
	}
	if up {
		fmt.Fprintf(&b, "%s\n", stmt("create_schema", schema))
		fmt.Fprintf(&b, "-- serializes with `skiplock migrate up` while this transaction lasts\n")
		fmt.Fprintf(&b, "%s\n", strings.ReplaceAll(stmt("lock", schema), "$1", "'"+schema+"'"))
		fmt.Fprintf(&b, "%s\n\n", stmt("version_table", schema))
		for _, m := range all {
			if m.Version < from || m.Version > to {
				continue
			}
			fmt.Fprintf(&b, "-- skiplock migration %03d_%s (up)\n%s\n", m.Version, m.Name, terminated(Render(m.Up, schema)))
			fmt.Fprintf(&b, "%s\n\n", fill("record", m))
		}
		return b.String(), nil
	}
	for i := len(all) - 1; i >= 0; i-- {
		m := all[i]
		if m.Version < from || m.Version > to {
			continue
		}
		fmt.Fprintf(&b, "-- skiplock migration %03d_%s (down)\n%s\n", m.Version, m.Name, terminated(Render(m.Down, schema)))
		fmt.Fprintf(&b, "%s\n\n", fill("forget", m))
	}
	return b.String(), nil
}

// terminated makes sure a migration's last statement ends with a semicolon,
// so the version record that follows it in the script is a statement of its own.
func terminated(sql string) string {
	if strings.HasSuffix(strings.TrimSpace(sql), ";") {
		return sql
	}
	return sql + "\n;"
}
