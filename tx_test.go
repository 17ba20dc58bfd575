package skiplock_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/migrations"
)

// TestSQLTxExec: Exec through SQLTx runs in the database/sql transaction
// (gone on rollback, kept on commit) and reports the rows it affected, as a
// pgx transaction's Exec does.
func TestSQLTxExec(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, "CREATE TABLE stock (sku text PRIMARY KEY, n int)")
	require.NoError(t, err)
	sdb, err := sql.Open("pgx", db.URL)
	require.NoError(t, err)
	defer sdb.Close()

	for _, commit := range []bool{false, true} {
		stx, err := sdb.BeginTx(ctx, nil)
		require.NoError(t, err)
		var tx skiplock.Tx = skiplock.SQLTx(stx)
		tag, err := tx.Exec(ctx, "INSERT INTO stock VALUES ($1, 1), ($2, 1)", "a", "b")
		require.NoError(t, err)
		require.EqualValues(t, 2, tag.RowsAffected())
		tag, err = tx.Exec(ctx, "UPDATE stock SET n = n + 1 WHERE sku = $1", "a")
		require.NoError(t, err)
		require.EqualValues(t, 1, tag.RowsAffected())
		_, err = tx.Exec(ctx, "INSERT INTO stock VALUES ($1, 1)", "a")
		require.Error(t, err, "a failing statement reports its error")
		if commit {
			require.NoError(t, stx.Rollback()) // the failed INSERT aborted it; do it again and commit
			stx, err = sdb.BeginTx(ctx, nil)
			require.NoError(t, err)
			_, err = skiplock.SQLTx(stx).Exec(ctx, "INSERT INTO stock VALUES ($1, 5)", "c")
			require.NoError(t, err)
			require.NoError(t, stx.Commit())
		} else {
			require.NoError(t, stx.Rollback())
		}
	}
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT coalesce(sum(n), 0) FROM stock").Scan(&n))
	require.Equal(t, 5, n, "only the committed transaction's row is there")
}

// TestMigrateTxTakesEitherTx: MigrateTx takes the one Tx type, so a team
// whose migration tool runs database/sql applies skiplock's schema in its own
// transaction as a pgx team does, and a rollback leaves no trace.
func TestMigrateTxTakesEitherTx(t *testing.T) {
	t.Parallel()
	db := dbtest.NewEmpty(t)
	ctx := context.Background()
	sdb, err := sql.Open("pgx", db.URL)
	require.NoError(t, err)
	defer sdb.Close()

	schemaExists := func(name string) bool {
		var ok bool
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", name).Scan(&ok))
		return ok
	}

	stx, err := sdb.BeginTx(ctx, nil)
	require.NoError(t, err)
	ran, err := skiplock.MigrateTx(ctx, skiplock.SQLTx(stx), "viasql")
	require.NoError(t, err)
	require.Len(t, ran, migrations.Latest())
	require.NoError(t, stx.Rollback())
	require.False(t, schemaExists("viasql"), "a rolled-back MigrateTx leaves nothing")

	stx, err = sdb.BeginTx(ctx, nil)
	require.NoError(t, err)
	ran, err = skiplock.MigrateTx(ctx, skiplock.SQLTx(stx), "viasql")
	require.NoError(t, err)
	require.Len(t, ran, migrations.Latest())
	require.NoError(t, stx.Commit())
	require.True(t, schemaExists("viasql"))

	// The same schema through a pgx transaction: nothing left to apply.
	require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		ran, err = skiplock.MigrateTx(ctx, tx, "viasql")
		return err
	}))
	require.Empty(t, ran)
}
