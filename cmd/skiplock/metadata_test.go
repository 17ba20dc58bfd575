package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
)

// enqueue --metadata and the NDJSON "metadata" key store the object; bad
// metadata is a usage error naming the field, and writes nothing.
func TestEnqueueMetadataCLI(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	code, out, stderr := runCLI(t, "enqueue", "--database-url", db.URL, "--kind", "k",
		"--metadata", `{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","team":"billing"}`)
	require.Equal(t, 0, code, stderr)
	var md string
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT metadata->>'team' FROM skiplock.jobs WHERE id = $1",
		strings.TrimSpace(out)).Scan(&md))
	require.Equal(t, "billing", md)

	file := filepath.Join(t.TempDir(), "jobs.ndjson")
	require.NoError(t, os.WriteFile(file, []byte(`{"kind":"k","queue":"bulk","metadata":{"n":1}}`+"\n"+
		`{"kind":"k","queue":"bulk","metadata":null}`+"\n"+`{"kind":"k","queue":"bulk","unique_key":"u","metadata":{"n":3}}`+"\n"), 0o600))
	code, _, stderr = runCLI(t, "enqueue", "--database-url", db.URL, "--file", file)
	require.Equal(t, 0, code, stderr)
	rows, err := db.Pool.Query(ctx, "SELECT coalesce(metadata::text, '-') FROM skiplock.jobs WHERE queue = 'bulk' ORDER BY id")
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.ElementsMatch(t, []string{`{"n": 1}`, "-", `{"n": 3}`}, got)

	for _, bad := range []string{`[1]`, `{"a":`, `"x"`, `{"a":"` + strings.Repeat("x", 70000) + `"}`} {
		code, _, stderr := runCLI(t, "enqueue", "--database-url", db.URL, "--kind", "k", "--metadata", bad)
		require.Equal(t, 2, code, stderr)
		require.Contains(t, stderr, "--metadata: ")
		require.NotContains(t, stderr, "xxxx", "the value is not echoed")
	}
	require.NoError(t, os.WriteFile(file, []byte(`{"kind":"k"}`+"\n"+`{"kind":"k","metadata":[1]}`+"\n"), 0o600))
	code, _, stderr = runCLI(t, "enqueue", "--database-url", db.URL, "--file", file)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "line 2")
	require.Contains(t, stderr, "metadata: must be a JSON object")
	code, _, stderr = runCLI(t, "enqueue", "--database-url", db.URL, "--file", file, "--metadata", "{}")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--metadata")
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM skiplock.jobs").Scan(&n))
	require.Equal(t, 4, n, "bad input changed nothing")
}
