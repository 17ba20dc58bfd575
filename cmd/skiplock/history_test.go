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
// `--to file://… --dead-letters` writes the dead letters' days too, and
// `history import URL` brings them back into the dead letters; a scheme the
// binary has no driver for is a usage error naming --to, and so is one
// given to work --history-export-dir.
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

	_, err = db.Pool.Exec(ctx, `INSERT INTO skiplock.jobs_dead (id, priority, attempts, max_attempts, run_at, created_at, dead_at, queue, kind, reason, payload)
		SELECT nextval('skiplock.jobs_id_seq'), 0, 3, 3, f, f, f, 'q', 'k', 'error', '{}'
		FROM generate_series(1, 30) AS g,
		     LATERAL (SELECT now() - interval '3 days' + g * interval '1 second' AS f) AS x`)
	require.NoError(t, err)
	bucket := "file://" + filepath.ToSlash(t.TempDir()) + "/exports"
	code, out, stderr = cli("history", "export", "--to", bucket, "--dead-letters", "--json")
	require.Equal(t, 0, code, stderr)
	res.Files = nil
	decodeJSON(t, out, &res)
	var dead []skiplock.HistoryFile
	for _, f := range res.Files {
		if f.Table == "jobs_dead" {
			dead = append(dead, f)
		}
	}
	require.NotEmpty(t, dead)
	_, err = db.Pool.Exec(ctx, `DELETE FROM skiplock.jobs_dead`)
	require.NoError(t, err)
	for _, f := range dead {
		code, out, stderr = cli("history", "import", bucket+"/"+f.Name)
		require.Equal(t, 0, code, stderr)
		require.Contains(t, out, "inserted")
	}
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM skiplock.jobs_dead`).Scan(&n))
	require.Equal(t, 30, n)

	code, _, stderr = cli("history", "export", "--to", "ftp://host/dir")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--to")
	require.Contains(t, stderr, `scheme "ftp"`)
	code, _, stderr = cli("work", "--exec", "true", "--history-export-dir", "ftp://host/dir")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--history-export-dir")
}
