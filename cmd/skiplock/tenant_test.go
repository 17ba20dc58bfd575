package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
)

// TestTenantMoveCLI: `tenant move` moves the tenant's ready and scheduled
// jobs (and no other tenant's), reports what it left, and a second run
// finds nothing to do; bad flags are usage errors naming the flag.
func TestTenantMoveCLI(t *testing.T) {
	t.Parallel()
	a, b := dbtest.New(t), dbtest.New(t)
	opsReady(t, a, "mail", 2, -time.Second) // no tenant: stays
	opsRunning(t, a, "mail", 1)
	opsExec(t, a, `UPDATE skiplock.jobs SET tenant = 'acme' WHERE state = 'running'`)
	c, err := skiplock.NewClient(a.Pool, skiplock.Config{Schema: a.Schema})
	require.NoError(t, err)
	for i := range 7 {
		p := skiplock.EnqueueParams{Queue: "mail", Kind: "k", Tenant: "acme", Payload: map[string]string{"secret": opsSecret}}
		if i == 0 {
			p.Delay = time.Hour
		}
		_, err := c.Enqueue(t.Context(), p)
		require.NoError(t, err)
	}

	code, out, stderr := runCLI(t, "tenant", "move", "--tenant", "acme", "--from", a.URL, "--to", b.URL, "--batch", "3", "--json")
	require.Equal(t, 0, code, stderr)
	require.NotContains(t, out+stderr, opsSecret)
	var res skiplock.TenantMoveResult
	decodeJSON(t, out, &res)
	require.Equal(t, skiplock.TenantMoveResult{Moved: 7, Batches: 3, LeftRunning: 1}, res)
	require.EqualValues(t, 7, opsCount(t, b, `SELECT count(*) FROM skiplock.jobs WHERE tenant = 'acme' AND state = 'ready'`))
	require.EqualValues(t, 1, opsCount(t, b, `SELECT count(*) FROM skiplock.jobs WHERE run_at > now() + interval '50 minutes' AND run_at < '9000-01-01'`),
		"the scheduled job keeps its run_at")
	require.EqualValues(t, 3, opsCount(t, a, `SELECT count(*) FROM skiplock.jobs`), "the other jobs and the running one stay")

	code, out, stderr = runCLI(t, "tenant", "move", "--tenant", "acme", "--from", a.URL, "--to", b.URL)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, `moved 0 job(s) of tenant "acme"`)
	require.Contains(t, out, "left in the source: 1 running")

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--from", a.URL, "--to", b.URL}, "--tenant: required"},
		{[]string{"--tenant", "acme", "--to", b.URL}, "--from: required"},
		{[]string{"--tenant", "acme", "--from", a.URL}, "--to: required"},
		{[]string{"--tenant", "acme", "--from", a.URL, "--to", a.URL}, "--to: the same URL as --from"},
		{[]string{"--tenant", "acme", "--from", a.URL, "--to", b.URL, "--batch", "0"}, "--batch: must be between 1 and 10000"},
		{[]string{"--tenant", "acme", "--from", "postgres://%zz", "--to", b.URL}, "--from: cannot parse"},
	} {
		code, _, stderr := runCLI(t, append([]string{"tenant", "move"}, c.args...)...)
		require.Equal(t, 2, code, "%v: %s", c.args, stderr)
		require.Contains(t, stderr, c.want)
	}
}

// TestTenantMoveNeedsMigratedDatabases: a database without the move's
// tables is refused up front, naming its flag, and nothing moves.
func TestTenantMoveNeedsMigratedDatabases(t *testing.T) {
	t.Parallel()
	a, empty := dbtest.New(t), dbtest.NewEmpty(t)
	opsReady(t, a, "mail", 1, -time.Second)
	opsExec(t, a, `UPDATE skiplock.jobs SET tenant = 'acme'`)
	code, _, stderr := runCLI(t, "tenant", "move", "--tenant", "acme", "--from", a.URL, "--to", empty.URL)
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stderr, "--to: schema skiplock has")
	require.Contains(t, stderr, "skiplock migrate up")
	require.EqualValues(t, 1, opsCount(t, a, `SELECT count(*) FROM skiplock.jobs`))
}
