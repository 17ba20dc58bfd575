package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
)

func TestLimitCLI(t *testing.T) {
	db := dbtest.New(t)
	code, out, errOut := runCLI(t, "limit", "set", "email", "--database-url", db.URL, "--kind", "send-email", "--concurrency", "5")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "at most 5 running jobs of kind send-email")
	code, _, errOut = runCLI(t, "limit", "set", "per-customer", "--database-url", db.URL, "--kind", "sync",
		"--partition", "arg:customer_id", "--concurrency", "1")
	require.Equal(t, 0, code, errOut)

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
	} {
		code, _, errOut := runCLI(t, append([]string{"limit", "set", "--database-url", db.URL}, tc.args...)...)
		require.Equal(t, 2, code, "%v: %s", tc.args, errOut)
		require.Contains(t, errOut, tc.flag+":", "%v", tc.args)
	}

	code, out, errOut = runCLI(t, "limit", "list", "--database-url", db.URL, "--json")
	require.Equal(t, 0, code, errOut)
	var ls []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &ls))
	require.Len(t, ls, 2, "the refused limits were not stored")
	require.Equal(t, "email", ls[0]["name"])
	require.Equal(t, "arg:customer_id", ls[1]["partition"])
	code, out, _ = runCLI(t, "limit", "list", "--database-url", db.URL)
	require.Equal(t, 0, code)
	require.Contains(t, out, "kind send-email")

	code, _, _ = runCLI(t, "limit", "remove", "email", "--database-url", db.URL)
	require.Equal(t, 0, code)
	code, _, errOut = runCLI(t, "limit", "remove", "email", "--database-url", db.URL)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "not found")
}
