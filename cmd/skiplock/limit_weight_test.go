package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
)

// enqueue --limit-weight and the NDJSON "limit_weight" key store the weight
// (1 as NULL) and job get shows it; a weight out of range is a usage error
// naming the flag or key and writes nothing; limit list shows ready jobs
// heavier than a rate.
func TestEnqueueLimitWeightCLI(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	code, out, stderr := runCLI(t, "enqueue", "--database-url", db.URL, "--kind", "k", "--limit-weight", "5")
	require.Equal(t, 0, code, stderr)
	heavy := strings.TrimSpace(out)
	code, out, stderr = runCLI(t, "job", "get", heavy, "--database-url", db.URL)
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `limit_weight\s+5`, out, "job get shows the weight")
	file := filepath.Join(t.TempDir(), "jobs.ndjson")
	require.NoError(t, os.WriteFile(file, []byte(`{"kind":"k","limit_weight":3}`+"\n"+`{"kind":"k","limit_weight":null}`+"\n"+
		`{"kind":"k","limit_weight":1}`+"\n"), 0o600))
	code, _, stderr = runCLI(t, "enqueue", "--database-url", db.URL, "--file", file)
	require.Equal(t, 0, code, stderr)
	rows, err := db.Pool.Query(ctx, "SELECT coalesce(limit_weight, 1) FROM skiplock.jobs ORDER BY id")
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	require.ElementsMatch(t, []int{5, 3, 1, 1}, got)

	for _, bad := range []string{"0", "-2", "1000001", "x"} {
		code, _, stderr := runCLI(t, "enqueue", "--database-url", db.URL, "--kind", "k", "--limit-weight", bad)
		require.Equal(t, 2, code, stderr)
		require.Contains(t, stderr, "limit-weight")
	}
	require.NoError(t, os.WriteFile(file, []byte(`{"kind":"k"}`+"\n"+`{"kind":"k","limit_weight":0}`+"\n"), 0o600))
	code, _, stderr = runCLI(t, "enqueue", "--database-url", db.URL, "--file", file)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "line 2")
	require.Contains(t, stderr, "limit_weight: must be an integer between 1 and 1000000")
	code, _, stderr = runCLI(t, "enqueue", "--database-url", db.URL, "--file", file, "--limit-weight", "2")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--limit-weight")
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM skiplock.jobs").Scan(&n))
	require.Equal(t, 4, n, "bad input changed nothing")

	code, _, stderr = runCLI(t, "limit", "set", "api", "--database-url", db.URL, "--kind", "k", "--rate", "4", "--per", "1m")
	require.Equal(t, 0, code, stderr)
	code, out, stderr = runCLI(t, "limit", "list", "--database-url", db.URL, "--json")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, `"too_heavy":1`, "the weight-5 job")
	var parsed any
	require.NoError(t, json.Unmarshal([]byte(out), &parsed))
	code, out, _ = runCLI(t, "limit", "list", "--database-url", db.URL)
	require.Equal(t, 0, code)
	require.True(t, strings.Contains(out, "TOO HEAVY"), out)
}
