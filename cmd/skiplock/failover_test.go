package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/store"
)

// TestFailoverAdvanceTokens: the sequence moves to the current time in
// microseconds, or a million past itself when it is ahead of the clock
// (never backwards), and the next claim's token is above it.
func TestFailoverAdvanceTokens(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	before := time.Now().UnixMicro()
	code, out, stderr := runCLI(t, "failover", "advance-tokens", "--database-url", db.URL, "--json")
	require.Equal(t, 0, code, stderr)
	var first map[string]int64
	decodeJSON(t, out, &first)
	require.GreaterOrEqual(t, first["lease_tokens"], before)

	opsExec(t, db, `SELECT setval('skiplock.lease_tokens', $1::bigint)`, first["lease_tokens"]+10_000_000_000)
	code, out, stderr = runCLI(t, "failover", "advance-tokens", "--database-url", db.URL, "--json")
	require.Equal(t, 0, code, stderr)
	var second map[string]int64
	decodeJSON(t, out, &second)
	require.Equal(t, first["lease_tokens"]+10_000_000_000+1+1_000_000, second["lease_tokens"],
		"never backwards: a million past the sequence when it is ahead of the clock")

	opsExec(t, db, `INSERT INTO skiplock.jobs (queue, kind) VALUES ('default', 'k')`)
	res, err := store.New("skiplock").Claim(ctx, db.Pool, store.ClaimRequest{Queues: []string{"default"}, Batch: 1, WorkerID: "w", Lease: time.Minute})
	require.NoError(t, err)
	jobs := res.Jobs
	require.Len(t, jobs, 1)
	require.Greater(t, jobs[0].LeaseToken, second["lease_tokens"])

	code, out, _ = runCLI(t, "failover", "advance-tokens", "--database-url", db.URL)
	require.Equal(t, 0, code)
	require.Contains(t, out, "lease tokens now start after")
}
