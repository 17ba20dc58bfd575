package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
)

func TestEnqueueCLI(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	code, out, _ := runCLI(t, "enqueue", "--database-url", db.URL, "--queue", "q", "--kind", "k",
		"--payload", `{"a":1}`, "--unique-key", "u", "--json")
	require.Equal(t, 0, code)
	require.Contains(t, out, `"inserted":true`)
	code, out, _ = runCLI(t, "enqueue", "--database-url", db.URL, "--queue", "q", "--kind", "k", "--unique-key", "u", "--json")
	require.Equal(t, 0, code)
	require.Contains(t, out, `"inserted":false`)

	bad := []struct {
		args  []string
		field string
	}{
		{[]string{"--kind", "k", "--payload", "{bad"}, "--payload"},
		{[]string{"--kind", "k", "--payload", `{"a":`}, "--payload"},
		{[]string{"--kind", "k", "--payload", "[1]"}, "--payload"},
		{[]string{"--kind", "k", "--payload", `{"a":"\u0000"}`}, "--payload"},
		{[]string{"--kind", ""}, "--kind"},
		{[]string{"--kind", strings.Repeat("k", 200)}, "--kind"},
		{[]string{"--kind", "k", "--queue", "a b"}, "--queue"},
		{[]string{"--kind", "k", "--priority", "99999"}, "--priority"},
		{[]string{"--kind", "k", "--run-at", "tomorrow"}, "--run-at"},
		{[]string{"--kind", "k", "--run-at", "9999-01-01T00:00:00Z"}, "--run-at"},
		{[]string{"--kind", "k", "--delay", "-1s"}, "--delay"},
		{[]string{"--kind", "k", "--max-attempts", "5000"}, "--max-attempts"},
		{[]string{"--kind", "k", "--tenant", strings.Repeat("t", 300)}, "--tenant"},
		{[]string{"--kind", "k", "--nope"}, "--nope"},
	}
	for _, b := range bad {
		args := append([]string{"enqueue", "--database-url", db.URL}, b.args...)
		code, _, stderr := runCLI(t, args...)
		require.Equal(t, 2, code, "%v: %s", b.args, stderr)
		require.Contains(t, stderr, b.field, b.args)
	}
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM skiplock.jobs").Scan(&n))
	require.Equal(t, 1, n, "bad input changed nothing")
}

func TestEnqueueFileCLI(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	dir := t.TempDir()
	good := filepath.Join(dir, "good.ndjson")
	var b bytes.Buffer
	for i := 0; i < 300; i++ {
		b.WriteString(`{"queue":"bulk","kind":"k","payload":{"i":1},"tenant":"t"}` + "\n")
	}
	require.NoError(t, os.WriteFile(good, b.Bytes(), 0o600))
	code, out, stderr := runCLI(t, "enqueue", "--database-url", db.URL, "--file", good, "--batch", "100")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, `"inserted":300`)

	badFile := filepath.Join(dir, "bad.ndjson")
	require.NoError(t, os.WriteFile(badFile, []byte(`{"kind":"k"}`+"\n"+`{"kind":"k","priority":5000}`+"\n"), 0o600))
	code, _, stderr = runCLI(t, "enqueue", "--database-url", db.URL, "--file", badFile)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "line 2")
	require.Contains(t, stderr, "priority")
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM skiplock.jobs").Scan(&n))
	require.Equal(t, 300, n, "nothing from the bad file was written")

	// Blank lines carry no job: they are neither counted nor "skipped".
	blanks := filepath.Join(dir, "blanks.ndjson")
	require.NoError(t, os.WriteFile(blanks, []byte("\n"+`{"kind":"k"}`+"\n\n"+`{"kind":"k"}`+"\n\n"), 0o600))
	code, out, stderr = runCLI(t, "enqueue", "--database-url", db.URL, "--file", blanks)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, `"lines":2`)
	require.Contains(t, out, `"skipped_duplicates":0`)

	// A job flag next to --file would be ignored: it is refused, naming it.
	for _, flag := range []string{"--queue=q2", "--priority=5", "--tenant=t", "--delay=1m"} {
		code, _, stderr = runCLI(t, "enqueue", "--database-url", db.URL, "--file", good, flag)
		require.Equal(t, 2, code, flag)
		require.Contains(t, stderr, strings.SplitN(flag, "=", 2)[0], flag)
	}
	require.NoError(t, db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM skiplock.jobs").Scan(&n))
	require.Equal(t, 302, n, "a refused --file call wrote something")
}

// The uniqueness and mode flags reach enqueue_unique; bad combinations are
// usage errors naming the flag.
func TestEnqueueUniqueAndModesCLI(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	enqueue := func(args ...string) string {
		t.Helper()
		code, out, stderr := runCLI(t, append([]string{"enqueue", "--database-url", db.URL, "--json"}, args...)...)
		require.Equal(t, 0, code, stderr)
		return strings.TrimSpace(out)
	}
	hourly := []string{"--queue", "mail", "--kind", "digest", "--payload", `{"customer":42,"n":1}`,
		"--unique-by", "args", "--unique-fields", "customer", "--unique-period", "1h"}
	require.Contains(t, enqueue(hourly...), `"inserted":true`)
	hourly[5] = `{"customer":42,"n":2}`
	require.Contains(t, enqueue(hourly...), `"inserted":false`, "same customer, same hour")

	render := func(rev string) []string {
		return []string{"--queue", "docs", "--kind", "render", "--payload", `{"rev":` + rev + `}`, "--unique-key", "doc:7", "--supersede"}
	}
	require.Contains(t, enqueue(render("1")...), `"inserted":true`)
	require.Contains(t, enqueue(render("2")...), `"inserted":false`)
	require.Contains(t, enqueue("--queue", "hooks", "--kind", "sync", "--unique-key", "a:9", "--throttle", "30s"), `"inserted":true`)
	require.Contains(t, enqueue("--queue", "hooks", "--kind", "sync", "--unique-key", "a:9", "--debounce", "5s"), `"inserted":false`)
	var rev int
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT (payload->>'rev')::int FROM skiplock.jobs WHERE queue = 'docs'`).Scan(&rev))
	require.Equal(t, 2, rev, "superseded by the newest payload")

	for _, b := range []struct {
		args []string
		flag string
	}{
		{[]string{"--kind", "k", "--supersede"}, "--unique-key"},
		{[]string{"--kind", "k", "--unique-by", "payload"}, "--unique-by"},
		{[]string{"--kind", "k", "--unique-key", "u", "--unique-period", "10ms"}, "--unique-period"},
		{[]string{"--kind", "k", "--unique-key", "u", "--supersede", "--throttle", "1s"}, "--supersede, --debounce, --throttle"},
		{[]string{"--kind", "k", "--unique-key", "u", "--debounce", "-1s"}, "--debounce"},
		{[]string{"--kind", "k", "--unique-fields", "a"}, "--unique-fields"},
		{[]string{"--file", "-", "--supersede"}, "--supersede"},
	} {
		code, _, stderr := runCLI(t, append([]string{"enqueue", "--database-url", db.URL}, b.args...)...)
		require.Equal(t, 2, code, "%v: %s", b.args, stderr)
		require.Contains(t, stderr, b.flag, b.args)
	}
}
