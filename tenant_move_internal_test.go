package skiplock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
)

// errCrash is the fault the move tests inject between a batch's steps.
var errCrash = errors.New("injected crash")

// TestMoveTenantSurvivesCrashesAndReruns moves a tenant's 23 jobs in
// batches of 4 through two interrupted runs (one stopped after a batch's
// target commit, before the source's; one after the source's, before the
// release) with a worker claiming a half-moved job in the source between
// them, then a run to the end and a re-run that finds nothing to do. Every
// job ends runnable in exactly one database, none lost or doubled; the one
// claimed in the source stays there and its held copy is discarded unrun.
func TestMoveTenantSurvivesCrashesAndReruns(t *testing.T) {
	a, b := dbtest.New(t), dbtest.New(t)
	ctx := context.Background()
	ca, err := NewClient(a.Pool, Config{Schema: a.Schema})
	require.NoError(t, err)
	cb, err := NewClient(b.Pool, Config{Schema: b.Schema})
	require.NoError(t, err)

	const moving = 23
	later := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	for n := range moving {
		p := EnqueueParams{Queue: "mail", Kind: "send", Tenant: "acme", Payload: map[string]int{"n": n}}
		switch n {
		case 3:
			p.RunAt = later // scheduled: keeps its run_at
		case 5:
			p.UniqueKey = "u-5" // live in the target already: merged
		case 7:
			p.Entity = "order-7"
			p.Metadata = Metadata{"trace": "t-7"}
		}
		_, err := ca.Enqueue(ctx, p)
		require.NoError(t, err)
	}
	for n := range 3 { // another tenant: stays
		_, err := ca.Enqueue(ctx, EnqueueParams{Queue: "mail", Kind: "send", Tenant: "other", Payload: map[string]int{"n": 100 + n}})
		require.NoError(t, err)
	}
	exec(t, a.Pool, `UPDATE skiplock.jobs SET attempts = 2, last_error = 'boom' WHERE payload->>'n' = '9'`)
	exec(t, a.Pool, `INSERT INTO skiplock.jobs (queue, kind, state, attempts, locked_by, lease_token, lease_expires_at,
		attempted_at, tenant, payload) VALUES ('mail', 'send', 'running', 1, 'w:1', 1, now() + interval '1 minute', now(), 'acme', '{"n": 200}')`)
	exec(t, a.Pool, `INSERT INTO skiplock.jobs_dead (id, priority, attempts, max_attempts, run_at, created_at, queue, kind,
		reason, tenant, payload) VALUES (990001, 0, 5, 5, now(), now(), 'mail', 'send', 'error', 'acme', '{"n": 300}')`)
	_, err = cb.Enqueue(ctx, EnqueueParams{Queue: "mail", Kind: "send", Tenant: "acme", UniqueKey: "u-5", Payload: map[string]int{"n": 5}})
	require.NoError(t, err)

	opts := TenantMoveOptions{Tenant: "acme", Schema: a.Schema, BatchSize: 4}

	// Run 1 stops after batch 2's target commit: batch 1 moved, batch 2
	// held in the target and still ready in the source.
	o := opts
	o.afterTarget = func(batch int) error {
		if batch == 2 {
			return errCrash
		}
		return nil
	}
	res, err := TenantMove(ctx, a.Pool, b.Pool, o)
	require.ErrorIs(t, err, errCrash)
	require.Equal(t, 1, res.Batches)
	require.Equal(t, 3, count(t, b.Pool, `SELECT count(*) FROM skiplock.jobs WHERE run_at > '9000-01-01'`),
		"batch 2 is held in the target (but for n=5, merged into the target's live job with its unique key)")
	requireRunnableOnce(t, a.Pool, b.Pool, moving)

	// A worker claims one of the half-moved jobs (held in the target) in
	// the source.
	var claimed int
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT min((payload->>'n')::int) FROM skiplock.jobs
		WHERE run_at > '9000-01-01'`).Scan(&claimed))
	exec(t, a.Pool, `UPDATE skiplock.jobs SET state = 'running', attempts = attempts + 1, locked_by = 'w:2',
		lease_token = 2, lease_expires_at = now() + interval '1 minute', attempted_at = now()
		WHERE tenant = 'acme' AND payload->>'n' = $1::text`, fmt.Sprint(claimed))
	requireRunnableOnce(t, a.Pool, b.Pool, moving)

	// Run 2 settles run 1's held jobs (one discarded: its source job runs
	// there), then stops after its first batch's source commit.
	o = opts
	o.afterSource = func(int) error { return errCrash }
	res, err = TenantMove(ctx, a.Pool, b.Pool, o)
	require.ErrorIs(t, err, errCrash)
	require.Equal(t, int64(1), res.Discarded, "the held copy of the job claimed in the source")
	require.Equal(t, int64(2), res.Recovered, "the other two held jobs, still ready in the source, moved on")
	requireRunnableOnce(t, a.Pool, b.Pool, moving)

	// Run 3 releases run 2's held batch and moves the rest.
	res, err = TenantMove(ctx, a.Pool, b.Pool, opts)
	require.NoError(t, err)
	require.Equal(t, int64(3), res.Recovered, "run 2's batch (n=5 merged already), deleted in the source, released")
	require.Equal(t, int64(2), res.LeftRunning, "the running job and the one claimed meanwhile stay")
	require.Equal(t, int64(1), res.LeftDead)
	requireRunnableOnce(t, a.Pool, b.Pool, moving)
	require.Zero(t, count(t, b.Pool, `SELECT count(*) FROM skiplock.jobs WHERE run_at > '9000-01-01'`), "nothing left held")
	require.Zero(t, count(t, a.Pool, `SELECT count(*) FROM skiplock.jobs WHERE tenant = 'acme' AND state = 'ready'`))
	require.Equal(t, 3, count(t, a.Pool, `SELECT count(*) FROM skiplock.jobs WHERE tenant = 'other'`), "another tenant's jobs stay")
	require.Equal(t, moving-1, count(t, b.Pool, `SELECT count(*) FROM skiplock.jobs WHERE tenant = 'acme'`),
		"every job but the one claimed in the source, the merged one counted once")

	// What a job carries moved with it.
	var runAt time.Time
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT run_at FROM skiplock.jobs WHERE payload->>'n' = '3'`).Scan(&runAt))
	require.True(t, later.Equal(runAt), "a scheduled job keeps its run_at: %s, want %s", runAt, later)
	var attempts int
	var lastErr string
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT attempts, last_error FROM skiplock.jobs WHERE payload->>'n' = '9'`).Scan(&attempts, &lastErr))
	require.Equal(t, 2, attempts, "a retried job keeps its spent attempts")
	require.Equal(t, "boom", lastErr)
	require.Equal(t, 1, count(t, b.Pool, `SELECT count(*) FROM skiplock.jobs WHERE entity = 'order-7' AND metadata->>'trace' = 't-7'`))
	require.Equal(t, 1, count(t, b.Pool, `SELECT count(*) FROM skiplock.jobs WHERE unique_key = 'u-5'`), "merged into the live job")
	require.Equal(t, 1, count(t, b.Pool, `SELECT count(*) FROM skiplock.moved_in WHERE state = 'merged'`))

	// A re-run after a complete move has nothing to do.
	res, err = TenantMove(ctx, a.Pool, b.Pool, opts)
	require.NoError(t, err)
	require.Equal(t, TenantMoveResult{LeftRunning: 2, LeftDead: 1}, res)
	// The moved jobs run in the target, each once (a scheduled one when due).
	ran := map[int]int{}
	require.NoError(t, Handle(cb, "send", func(_ context.Context, j *Job[map[string]int]) error {
		ran[j.Args["n"]]++
		return nil
	}))
	_, err = cb.Drain(ctx, DrainOptions{})
	require.NoError(t, err)
	for n := range moving {
		want := 1
		if n == claimed || n == 3 {
			want = 0 // claimed in the source; scheduled an hour ahead
		}
		require.Equal(t, want, ran[n], "job n=%d ran %d times in the target", n, ran[n])
	}
	t.Logf("moved %d jobs through two interrupted runs; the job claimed in the source (n=%d) stayed there", moving-1, claimed)
}

// requireRunnableOnce checks that each of the tenant's jobs 0..n-1 is in
// the tables exactly once, counting a job held in the target only while
// its source copy is gone (a move stopped before the release: the next run
// releases it): never runnable in both databases, never in neither.
func requireRunnableOnce(t *testing.T, a, b *pgxpool.Pool, n int) {
	t.Helper()
	read := func(pool *pgxpool.Pool, held bool) map[int]int {
		cond := "run_at < '9000-01-01'"
		if held {
			cond = "run_at > '9000-01-01'"
		}
		rows, err := pool.Query(context.Background(), `SELECT (payload->>'n')::int FROM skiplock.jobs
			WHERE tenant = 'acme' AND (payload->>'n')::int < 100 AND `+cond)
		require.NoError(t, err)
		out := map[int]int{}
		for rows.Next() {
			var k int
			require.NoError(t, rows.Scan(&k))
			out[k]++
		}
		require.NoError(t, rows.Err())
		return out
	}
	ra, rb, hb := read(a, false), read(b, false), read(b, true)
	for k := range n {
		got := ra[k] + rb[k]
		if k == 5 && rb[k] > 0 && ra[k] > 0 {
			got-- // the unique key's live job in the target predates the move: the source copy merges into it
		}
		require.LessOrEqual(t, hb[k], 1, "job n=%d held twice", k)
		require.Equal(t, 1, got+hb[k]*(1-ra[k]), "job n=%d: runnable in the source %d, in the target %d, held in the target %d",
			k, ra[k], rb[k], hb[k])
	}
}

func exec(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	_, err := pool.Exec(context.Background(), sql, args...)
	require.NoError(t, err)
}

func count(t *testing.T, pool *pgxpool.Pool, sql string) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), sql).Scan(&n))
	return n
}

func TestMoveTenantRefusesBadOptions(t *testing.T) {
	a := dbtest.New(t)
	ctx := context.Background()
	for field, o := range map[string]TenantMoveOptions{
		"Tenant":    {},
		"BatchSize": {Tenant: "t", BatchSize: 10001},
		"Schema":    {Tenant: "t", Schema: "no such; schema"},
		"to":        {Tenant: "t"},
	} {
		_, err := TenantMove(ctx, a.Pool, a.Pool, o)
		var fe *FieldError
		require.ErrorAs(t, err, &fe, field)
		require.Equal(t, field, fe.Field, fmt.Sprint(err))
		require.ErrorIs(t, err, ErrInvalidConfig)
	}
	_, err := TenantMove(ctx, nil, a.Pool, TenantMoveOptions{Tenant: "t"})
	require.ErrorIs(t, err, ErrInvalidConfig)
}

// A tenant's sealed jobs move with their bytes (migration 24: payload the
// key id, sealed the ciphertext), and a worker of the target with the
// keyring runs each with its plaintext.
func TestMoveTenantCarriesSealedPayloads(t *testing.T) {
	a, b := dbtest.New(t), dbtest.New(t)
	ctx := context.Background()
	k := testKeyring(t)
	ca, err := NewClient(a.Pool, Config{Schema: a.Schema, Encryption: k})
	require.NoError(t, err)
	want := map[string]bool{}
	for n := range 5 {
		email := fmt.Sprintf("user-%d@acme", n)
		want[email] = true
		_, err := ca.Enqueue(ctx, EnqueueParams{Queue: "mail", Kind: "send", Tenant: "acme", Payload: map[string]string{"email": email}})
		require.NoError(t, err)
	}
	res, err := TenantMove(ctx, a.Pool, b.Pool, TenantMoveOptions{Tenant: "acme", Schema: a.Schema, BatchSize: 2})
	require.NoError(t, err)
	require.EqualValues(t, 5, res.Moved)
	require.Equal(t, 5, count(t, b.Pool, `SELECT count(*) FROM skiplock.jobs
		WHERE sealed IS NOT NULL AND payload ? 'skiplock_encrypted' AND NOT payload::text LIKE '%acme%'`),
		"the target holds each job split, its bytes carried")

	cb, err := NewClient(b.Pool, Config{Schema: b.Schema, Encryption: k, PollInterval: 20 * time.Millisecond,
		Pools: []WorkerPool{{Queues: []string{"mail"}, Concurrency: 2}}})
	require.NoError(t, err)
	got := make(chan string, 5)
	require.NoError(t, Handle(cb, "send", func(_ context.Context, j *Job[map[string]string]) error {
		got <- j.Args["email"]
		return nil
	}))
	require.NoError(t, cb.Start(ctx))
	defer func() { require.NoError(t, cb.Stop(context.Background())) }()
	for range 5 {
		select {
		case e := <-got:
			require.True(t, want[e], "a handler got %q", e)
			delete(want, e)
		case <-time.After(15 * time.Second):
			t.Fatalf("jobs not run in the target; left: %v", want)
		}
	}
}
