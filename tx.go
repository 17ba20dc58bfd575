package skiplock

import (
	"context"
	"database/sql"
	"errors"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// Tx is the one transaction type of the public API: every exported function
// that writes in the caller's transaction takes a Tx (EnqueueTx,
// EnqueueManyTx, EnqueueBatchTx, EnqueueWorkflowTx, EnqueueNext, CompleteTx,
// SignalSendTx, SetOutputTx, AddTasksTx, MigrateTx), and StepTx hands its
// callback one. A pgx transaction satisfies it as it is (so do *pgxpool.Pool
// and *pgx.Conn, for a write outside a transaction of yours); a
// database/sql transaction is wrapped with SQLTx. The compiler checks it.
//
// Exec runs a statement that returns no rows: the step's own writes in
// StepTx, the domain writes beside CompleteTx.
type Tx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// SQLQueryer is the database/sql handle SQLTx adapts: *sql.Tx, *sql.DB and
// *sql.Conn satisfy it (with pgx's stdlib driver or lib/pq).
type SQLQueryer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// SQLTx adapts a database/sql transaction (or *sql.DB, *sql.Conn) to Tx:
//
//	tx, _ := db.BeginTx(ctx, nil)
//	c.EnqueueTx(ctx, skiplock.SQLTx(tx), params)
//
// Arguments are passed as database/sql drivers want them (nil for a nil
// pointer), and a query that finds no row reports pgx.ErrNoRows. Exec's
// command tag carries the rows affected (RowsAffected), not the command's
// name: database/sql does not report it.
func SQLTx(tx SQLQueryer) Tx { return sqlTx{tx} }

type sqlTx struct{ db SQLQueryer }

func (t sqlTx) Exec(ctx context.Context, query string, args ...any) (pgconn.CommandTag, error) {
	res, err := t.db.ExecContext(ctx, query, sqlArgs(args)...)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		n = 0 // a driver that cannot tell: no count, not an error of the statement
	}
	// A tag's RowsAffected is its last word: "EXEC 3" reports 3.
	return pgconn.NewCommandTag("EXEC " + strconv.FormatInt(n, 10)), nil
}

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
