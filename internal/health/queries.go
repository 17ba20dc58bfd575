package health

import (
	"context"
	"embed"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/internal/migrations"
	"github.com/skiplock/skiplock/internal/sqlfile"
	"github.com/skiplock/skiplock/internal/store"
)

// DBTX is what the health queries run on: a *pgxpool.Pool, a *pgx.Conn or a
// pgx.Tx, the data layer's store.DBTX plus Begin, used only where a check
// must run inside a transaction it rolls back (the doctor's EXPLAIN of the
// claim).
type DBTX interface {
	store.DBTX
	Begin(ctx context.Context) (pgx.Tx, error)
}

//go:embed sql/*.sql
var files embed.FS

var raw = sqlfile.MustParse(files, "sql")

// rendered caches the statements per schema.
var rendered sync.Map // schema → map[string]string

// ErrNotMigrated is returned (wrapped) when the schema lacks the health pack:
// it was never migrated, or not to version 2 or later. It is the data
// layer's store.ErrNotMigrated, so one errors.Is test covers both packages.
var ErrNotMigrated = store.ErrNotMigrated

// queries returns the statements rendered for schema, validating its name.
func queries(schema string) (map[string]string, error) {
	if v, ok := rendered.Load(schema); ok {
		return v.(map[string]string), nil
	}
	if err := migrations.ValidateSchema(schema); err != nil {
		return nil, fmt.Errorf("health: %w", err)
	}
	q := sqlfile.Render(raw, schema, nil)
	rendered.Store(schema, q)
	return q, nil
}

// query returns one rendered statement; an unknown name is a programming
// error caught by any test that runs it.
func query(schema, name string) (string, error) {
	q, err := queries(schema)
	if err != nil {
		return "", err
	}
	s, ok := q[name]
	if !ok {
		panic("health: no query named " + name)
	}
	return s, nil
}

// wrap adds context to a query error and turns "relation does not exist" on
// skiplock's own objects into ErrNotMigrated.
func wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("health: %w", store.Annotate(what, err))
}

// Statement returns one of the health statements rendered for schema, for
// tools that EXPLAIN them (bench/surroundings); it panics on an unknown name.
func Statement(schema, name string) (string, error) { return query(schema, name) }

// scanOne runs the one-row statement name with args and scans it into dest;
// what names it in the error.
func scanOne(ctx context.Context, db DBTX, schema, name, what string, args []any, dest ...any) error {
	q, err := query(schema, name)
	if err != nil {
		return err
	}
	return wrap(what, readRow(ctx, db, schema, q, args, dest...))
}

// readRow runs the one-row statement q after reader_settings, in one
// pipeline, and scans its row into dest (pgx.ErrNoRows when there is none).
func readRow(ctx context.Context, db DBTX, schema, q string, args []any, dest ...any) error {
	settings, err := query(schema, "reader_settings")
	if err != nil {
		return err
	}
	b := &pgx.Batch{}
	b.Queue(settings)
	b.Queue(q, args...).QueryRow(func(r pgx.Row) error { return r.Scan(dest...) })
	return db.SendBatch(ctx, b).Close()
}

// collect runs statement q after reader_settings, in one pipeline, and
// collects its rows with scan.
func collect[T any](ctx context.Context, db DBTX, schema, q string, args []any, scan pgx.RowToFunc[T]) ([]T, error) {
	settings, err := query(schema, "reader_settings")
	if err != nil {
		return nil, err
	}
	var out []T
	b := &pgx.Batch{}
	b.Queue(settings)
	b.Queue(q, args...).Query(func(rows pgx.Rows) error {
		var err error
		out, err = pgx.CollectRows(rows, scan)
		return err
	})
	return out, db.SendBatch(ctx, b).Close()
}
