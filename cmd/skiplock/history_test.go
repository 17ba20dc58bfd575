package main

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
)

// `skiplock history export --to DIR` writes each finished day and resumes;
// `history import FILE` brings one back; --to is required.
func TestHistoryCLI(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `INSERT INTO skiplock.jobs_done (id, priority, attempts, run_at, created_at, finished_at, queue, kind, payload)
		SELECT nextval('skiplock.jobs_id_seq'), 0, 1, f, f, f, 'q', 'k', '{}'
		FROM generate_series(1, 50) AS g,
		     LATERAL (SELECT now() - interval '3 days' + g * interval '1 second' AS f) AS x;
		SELECT skiplock.ensure_done_partitions(0)`)
	require.NoError(t, err)
	dir := t.TempDir()
	url := []string{"--database-url", db.URL}
	cli := func(args ...string) (int, string, string) { return runCLI(t, append(args, url...)...) }

	code, out, stderr := cli("history", "export", "--to", dir, "--json")
	require.Equal(t, 0, code, stderr)
	var res struct{ Files []skiplock.HistoryFile }
	decodeJSON(t, out, &res)
	var rows int64
	for _, f := range res.Files {
		rows += f.Rows
		require.False(t, f.Resumed)
	}
	require.EqualValues(t, 50, rows)

	code, out, stderr = cli("history", "export", "--to", dir)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "no (already exported)")

	_, err = db.Pool.Exec(ctx, `DELETE FROM skiplock.jobs_done`)
	require.NoError(t, err)
	for _, f := range res.Files {
		code, _, stderr = cli("history", "import", filepath.Join(dir, f.Name))
		require.Equal(t, 0, code, stderr)
	}
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM skiplock.jobs_done`).Scan(&n))
	require.Equal(t, 50, n)

	code, _, stderr = cli("history", "export")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--to")
}
