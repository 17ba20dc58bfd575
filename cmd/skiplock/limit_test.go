package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
)

func TestLimitCLI(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	code, out, errOut := runCLI(t, "limit", "set", "email", "--database-url", db.URL, "--kind", "send-email", "--concurrency", "5")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "at most 5 running jobs of kind send-email")
	code, _, errOut = runCLI(t, "limit", "set", "per-customer", "--database-url", db.URL, "--kind", "sync",
		"--partition", "arg:customer_id", "--concurrency", "1")
	require.Equal(t, 0, code, errOut)
	code, out, errOut = runCLI(t, "limit", "set", "partner", "--database-url", db.URL, "--kind", "partner-call",
		"--rate", "100", "--per", "1m")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "at most 100 jobs of kind partner-call started per 1m0s")

	// Bad input: exit 2, the flag named, nothing stored.
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"bad", "--queue", "q", "--kind", "k", "--concurrency", "1"}, "--queue"},
		{[]string{"bad", "--queue", "q", "--concurrency", "0"}, "--concurrency"},
		{[]string{"bad", "--queue", "q"}, "--concurrency"},
		{[]string{"bad", "--queue", "q", "--partition", "customer", "--concurrency", "2"}, "--partition"},
		{[]string{"bad name", "--queue", "q", "--concurrency", "2"}, "NAME"},
		{[]string{"bad", "--kind", "k", "--rate", "5"}, "--per"},
		{[]string{"bad", "--kind", "k", "--rate", "5", "--per", "1m", "--concurrency", "2"}, "--concurrency"},
	} {
		code, _, errOut := runCLI(t, append([]string{"limit", "set", "--database-url", db.URL}, tc.args...)...)
		require.Equal(t, 2, code, "%v: %s", tc.args, errOut)
		require.Contains(t, errOut, tc.flag+":", "%v", tc.args)
	}

	code, out, errOut = runCLI(t, "limit", "list", "--database-url", db.URL, "--json")
	require.Equal(t, 0, code, errOut)
	var ls []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &ls))
	require.Len(t, ls, 3, "the refused limits were not stored")
	require.Equal(t, "email", ls[0]["name"])
	require.Equal(t, "partner", ls[1]["name"])
	require.EqualValues(t, 60, ls[1]["per_seconds"])
	require.Equal(t, "arg:customer_id", ls[2]["partition"])
	code, out, _ = runCLI(t, "limit", "list", "--database-url", db.URL)
	require.Equal(t, 0, code)
	require.Contains(t, out, "kind send-email")

	code, _, _ = runCLI(t, "limit", "remove", "email", "--database-url", db.URL)
	require.Equal(t, 0, code)
	code, _, errOut = runCLI(t, "limit", "remove", "email", "--database-url", db.URL)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "not found")
}

func TestQueueAgingCLI(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	code, out, errOut := runCLI(t, "queue", "aging", "reports", "--database-url", db.URL, "--after", "10m", "--to", "100")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "promoted to priority 100")
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--after", "10ms", "--to", "1"}, "--after"},
		{[]string{"--after", "1m", "--to", "5000"}, "--to"},
		{[]string{"--to", "5"}, "--after"},
		{[]string{"--off", "--to", "5"}, "--off"},
	} {
		code, _, errOut := runCLI(t, append([]string{"queue", "aging", "reports", "--database-url", db.URL}, tc.args...)...)
		require.Equal(t, 2, code, "%v: %s", tc.args, errOut)
		require.Contains(t, errOut, tc.flag+":", "%v", tc.args)
	}
	var after string
	var to int
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		"SELECT age_after::text, age_to FROM skiplock.queues WHERE name = 'reports'").Scan(&after, &to))
	require.Equal(t, "00:10:00", after, "refused changes left the setting alone")
	require.Equal(t, 100, to)
	code, out, _ = runCLI(t, "queue", "aging", "reports", "--database-url", db.URL, "--off")
	require.Equal(t, 0, code)
	require.Contains(t, out, "aging off")
}

func TestQueueWeightCLI(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	code, out, errOut := runCLI(t, "queue", "weight", "sync", "carrier-a", "5", "--database-url", db.URL)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "tenant carrier-a has weight 5")
	for _, tc := range []struct {
		args []string
		name string
	}{
		{[]string{"sync", "carrier-a", "101"}, "WEIGHT:"},
		{[]string{"sync", "carrier-a", "0"}, "WEIGHT:"},
		{[]string{"sync", "carrier-a", "five"}, "WEIGHT:"},
		{[]string{"bad queue", "carrier-a", "2"}, "QUEUE:"},
		{[]string{"sync", "", "2"}, "TENANT:"},
		{[]string{"sync", "carrier-a"}, "QUEUE TENANT WEIGHT:"},
	} {
		code, _, errOut := runCLI(t, append([]string{"queue", "weight", "--database-url", db.URL}, tc.args...)...)
		require.Equal(t, 2, code, "%v: %s", tc.args, errOut)
		require.Contains(t, errOut, tc.name, "%v", tc.args)
	}
	code, out, _ = runCLI(t, "queue", "weights", "--database-url", db.URL, "--json")
	require.Equal(t, 0, code)
	require.Contains(t, out, `"weight":5`, "refused changes left the weight alone")
	code, _, _ = runCLI(t, "queue", "weight", "sync", "carrier-a", "1", "--database-url", db.URL)
	require.Equal(t, 0, code)
	code, out, _ = runCLI(t, "queue", "weights", "sync", "--database-url", db.URL)
	require.Equal(t, 0, code)
	require.Empty(t, strings.TrimSpace(out), "weight 1 is the default: no row")
}
