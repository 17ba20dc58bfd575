package skiplock

import (
	"context"
	"database/sql"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// Tx is the caller's transaction that EnqueueTx, EnqueueManyTx, CompleteTx,
// EnqueueNext, EnqueueWorkflowTx, EnqueueBatchTx, SignalTx, SetOutputTx and
// AddTasksTx write in, checked by the compiler: a pgx.Tx satisfies it as it is (so do *pgxpool.Pool and
// *pgx.Conn, for a write outside a transaction of yours); a database/sql
// transaction is wrapped with SQLTx.
type Tx interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// SQLQueryer is the database/sql handle SQLTx adapts: *sql.Tx, *sql.DB and
// *sql.Conn satisfy it (with pgx's stdlib driver or lib/pq).
type SQLQueryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// SQLTx adapts a database/sql transaction (or *sql.DB, *sql.Conn) to Tx:
//
//	tx, _ := db.BeginTx(ctx, nil)
//	c.EnqueueTx(ctx, skiplock.SQLTx(tx), params)
//
// Arguments are passed as database/sql drivers want them (nil for a nil
// pointer), and a query that finds no row reports pgx.ErrNoRows.
func SQLTx(tx SQLQueryer) Tx { return sqlTx{tx} }

type sqlTx struct{ db SQLQueryer }

func (t sqlTx) QueryRow(ctx context.Context, query string, args ...any) pgx.Row {
	return sqlRow{t.db.QueryRowContext(ctx, query, sqlArgs(args)...)}
}

func (t sqlTx) Query(ctx context.Context, query string, args ...any) (pgx.Rows, error) {
	rows, err := t.db.QueryContext(ctx, query, sqlArgs(args)...)
	if err != nil {
		return nil, err
	}
	return &sqlRows{rows: rows}, nil
}

// sqlRow is a *sql.Row that reports no row as pgx does.
type sqlRow struct{ row *sql.Row }

func (r sqlRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if errors.Is(err, sql.ErrNoRows) {
		return pgx.ErrNoRows
	}
	return err
}

// sqlRows is *sql.Rows behind pgx.Rows: Next, Scan, Values, Err and Close
// do what pgx's do; a database/sql result has no field descriptions, raw
// values, command tag or pgx connection to give.
type sqlRows struct {
	rows *sql.Rows
	err  error
}

func (r *sqlRows) Close() { _ = r.rows.Close() }

func (r *sqlRows) Err() error {
	if r.err != nil {
		return r.err
	}
	return r.rows.Err()
}

func (r *sqlRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (r *sqlRows) FieldDescriptions() []pgconn.FieldDescription { return nil }
func (r *sqlRows) RawValues() [][]byte                          { return nil }
func (r *sqlRows) Conn() *pgx.Conn                              { return nil }
func (r *sqlRows) TypeMap() *pgtype.Map                         { return nil }
func (r *sqlRows) Next() bool                                   { return r.rows.Next() }

func (r *sqlRows) Scan(dest ...any) error {
	err := r.rows.Scan(dest...)
	if err != nil {
		r.err = err
	}
	return err
}

func (r *sqlRows) Values() ([]any, error) {
	cols, err := r.rows.Columns()
	if err != nil {
		return nil, err
	}
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := r.Scan(ptrs...); err != nil {
		return nil, err
	}
	return vals, nil
}
