package skiplock_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/pgbouncertest"
)

func pooled(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	cfg, err := skiplock.ParsePoolConfig(context.Background(), url)
	require.NoError(t, err)
	require.Equal(t, pgx.QueryExecModeCacheDescribe, cfg.ConnConfig.DefaultQueryExecMode, "the pooler was detected")
	cfg.MaxConns = 8
	dbtest.TrimIdle(cfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// An explicit default_query_exec_mode is honoured as given (no connection
// is made); otherwise a direct connection keeps pgx's default and one
// through a transaction-mode pooler gets cache_describe.
func TestParsePoolConfigStatementMode(t *testing.T) {
	ctx := context.Background()
	for url, want := range map[string]pgx.QueryExecMode{
		"postgres://u@127.0.0.1:1/db?default_query_exec_mode=simple_protocol":          pgx.QueryExecModeSimpleProtocol,
		"postgres://u@127.0.0.1:1/db?sslmode=disable&default_query_exec_mode=exec":     pgx.QueryExecModeExec,
		"postgres://u@127.0.0.1:1/db?default_query_exec_mode=cache_statement":          pgx.QueryExecModeCacheStatement,
		"host=127.0.0.1 port=1 user=u dbname=db default_query_exec_mode=describe_exec": pgx.QueryExecModeDescribeExec,
	} {
		cfg, err := skiplock.ParsePoolConfig(ctx, url)
		require.NoError(t, err, url)
		require.Equal(t, want, cfg.ConnConfig.DefaultQueryExecMode, url)
	}
	_, err := skiplock.ParsePoolConfig(ctx, "postgres://u@127.0.0.1:1/db?default_query_exec_mode=bogus")
	require.Error(t, err, "an unknown mode is refused, not replaced")
	_, err = skiplock.ParsePoolConfig(ctx, "postgres://u:SECRET@127.0.0.1:1/db?connect_timeout=2")
	require.Error(t, err, "no server to probe")
	require.NotContains(t, err.Error(), "SECRET")

	db := dbtest.New(t)
	cfg, err := skiplock.ParsePoolConfig(ctx, db.URL)
	require.NoError(t, err)
	require.Equal(t, pgx.QueryExecModeCacheStatement, cfg.ConnConfig.DefaultQueryExecMode, "direct: pgx's default stays")
	b := pgbouncertest.Start(t)
	cfg, err = skiplock.ParsePoolConfig(ctx, b.URL(t, db.URL))
	require.NoError(t, err)
	require.Equal(t, pgx.QueryExecModeCacheDescribe, cfg.ConnConfig.DefaultQueryExecMode, "through pgbouncer")
}

func TestListenURLRejected(t *testing.T) {
	pool, err := pgxpool.New(context.Background(), "") // lazy: never connects
	require.NoError(t, err)
	defer pool.Close()
	_, err = skiplock.NewClient(pool, skiplock.Config{ListenURL: "postgres://u:SECRET@h:notaport/db"})
	var fe *skiplock.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "Config.ListenURL", fe.Field)
	require.NotContains(t, err.Error(), "SECRET", "the URL may hold a password")
}

// Enqueue (single, batch, the SQL function), claim, heartbeat and
// completion through a transaction-mode PgBouncer with the URL unchanged;
// with Config.ListenURL pointing past the pooler, pickup comes by NOTIFY.
func TestClientThroughPgBouncerWithListenURL(t *testing.T) {
	db := dbtest.New(t)
	b := pgbouncertest.Start(t)
	ctx := context.Background()
	pool := pooled(t, b.URL(t, db.URL))
	logs := &dbtest.LogBuffer{}
	// The poll interval is an hour: once the listener is up, only NOTIFY
	// can deliver a job in time.
	c := newClient(t, pool, skiplock.Config{Schema: db.Schema, ListenURL: db.URL, PollInterval: time.Hour,
		LeaseDuration: 3 * time.Second, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	got := make(chan int64, 100)
	require.NoError(t, skiplock.Handle(c, "k", func(ctx context.Context, j *skiplock.Job[json.RawMessage]) error {
		time.Sleep(1500 * time.Millisecond) // across a heartbeat (lease 3 s, beat every 1 s)
		got <- j.ID
		return nil
	}))
	gate := make(chan struct{})
	require.NoError(t, skiplock.Handle(c, "gate", func(ctx context.Context, j *skiplock.Job[json.RawMessage]) error {
		<-gate
		return nil
	}))
	require.NoError(t, c.Start(ctx))
	defer func() { _ = c.Stop(ctx) }()
	require.Eventually(t, func() bool { return c.Stats().ListenerUp }, 20*time.Second, 20*time.Millisecond,
		"the listener on the direct URL never came up: %s", logs.String())

	var ids []int64
	for range 5 {
		r, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "k", Payload: map[string]int{"a": 1}})
		require.NoError(t, err)
		ids = append(ids, r.ID)
	}
	var fnID int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT skiplock.enqueue('default', 'k', '{"b":2}')`).Scan(&fnID))
	ids = append(ids, fnID)
	seen := map[int64]bool{}
	for range ids {
		select {
		case id := <-got:
			seen[id] = true
		case <-time.After(30 * time.Second):
			t.Fatalf("a job was not picked up by NOTIFY (poll interval 1h); got %v of %v: %s", seen, ids, logs.String())
		}
	}
	for _, id := range ids {
		require.True(t, seen[id], "job %d ran", id)
	}
	require.Eventually(t, func() bool { return countJobs(t, db.Pool, "true") == 0 }, 10*time.Second, 20*time.Millisecond,
		"completions written through the pooler")
	require.Zero(t, c.Stats().LeaseLost, "heartbeats kept the leases through the pooler")

	// The same client waits on the same direct connection: a job's end
	// returns Wait by NOTIFY (past the waiters' second look-up, 1.5 s).
	r, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "gate"})
	require.NoError(t, err)
	time.AfterFunc(2500*time.Millisecond, func() { close(gate) })
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ends, err := c.Wait(wctx, r.ID)
	require.NoError(t, err, "Wait was not woken by NOTIFY on the listen URL (poll interval 1h): %s", logs.String())
	require.Equal(t, skiplock.JobStateCompleted, ends[0].State)
	require.NotContains(t, logs.String(), "POLLING ONLY")
	require.NotContains(t, logs.String(), "SQLSTATE")
}

// Without a listen URL the client finds the pooler, does not LISTEN, and
// says so once at warn level; with pgx's default statement cache it also
// says what that pool setting will do there.
func TestClientThroughPgBouncerPollsAndSaysSo(t *testing.T) {
	db := dbtest.New(t)
	b := pgbouncertest.Start(t)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(b.URL(t, db.URL)) // pgx's default: named statements
	require.NoError(t, err)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	logs := &dbtest.LogBuffer{}
	c := newClient(t, pool, skiplock.Config{Schema: db.Schema, PollInterval: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	require.NoError(t, skiplock.Handle(c, "k", func(ctx context.Context, j *skiplock.Job[json.RawMessage]) error { return nil }))
	require.NoError(t, c.Start(ctx))
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "POLLING ONLY") }, 20*time.Second, 20*time.Millisecond)
	require.NoError(t, c.Stop(ctx))
	out := logs.String()
	require.Equal(t, 1, strings.Count(out, "POLLING ONLY"), out)
	require.Contains(t, out, "connection pooler")
	require.Contains(t, out, "Config.ListenURL")
	require.Contains(t, out, "ParsePoolConfig", "the statement-cache hint")
	require.False(t, c.Stats().ListenerUp)
}

// The reaper returns expired leases through the pooler.
func TestReapThroughPgBouncer(t *testing.T) {
	db := dbtest.New(t)
	b := pgbouncertest.Start(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `INSERT INTO skiplock.jobs
		(queue, kind, state, attempts, max_attempts, locked_by, lease_token, lease_expires_at, attempted_at, payload)
		SELECT 'default', 'k', 'running', 1, 5, 'gone:1:abcd', g, now() - interval '1 minute', now() - interval '2 minutes', '{}'
		FROM generate_series(1, 7) AS g`)
	require.NoError(t, err)
	c := newClient(t, pooled(t, b.URL(t, db.URL)), skiplock.Config{Schema: db.Schema})
	total := 0
	for range 3 {
		back, dead, err := c.Reap(ctx)
		require.NoError(t, err)
		require.Zero(t, dead)
		total += back
	}
	require.Equal(t, 7, total)
	require.Equal(t, 7, countJobs(t, db.Pool, "state = 'ready'"))
}

// Through a transaction-mode pooler without a listen URL, the pools poll;
// a job enqueued by the client whose pool waits idle is handed off all the
// same (its enqueue and the claim of it are one pipeline, one transaction,
// one server connection), so it does not wait for the poll.
func TestHandOffThroughPgBouncer(t *testing.T) {
	db := dbtest.New(t)
	b := pgbouncertest.Start(t)
	ctx := context.Background()
	pool := pooled(t, b.URL(t, db.URL))
	c := newClient(t, pool, skiplock.Config{Schema: db.Schema, PollInterval: time.Hour, Logger: quietLogger()})
	ran := make(chan int64, 8)
	require.NoError(t, skiplock.Handle(c, "k", func(ctx context.Context, j *skiplock.Job[json.RawMessage]) error {
		ran <- j.ID
		return nil
	}))
	require.NoError(t, c.Start(ctx))
	require.Eventually(t, func() bool { return c.Stats().Claims >= 1 }, 20*time.Second, 10*time.Millisecond,
		"the pool's first claim (then it waits idle: no LISTEN, an hour's poll)")
	for i := 0; i < 3; i++ {
		waitIdle(t, c, "default", "k") // the pool parks after the first claim, and after each job
		r, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "k"})
		require.NoError(t, err)
		select {
		case id := <-ran:
			require.Equal(t, r.ID, id)
		case <-time.After(20 * time.Second):
			t.Fatalf("job %d did not run: not handed off, and the poll is an hour away", r.ID)
		}
	}
	require.EqualValues(t, 3, c.Stats().HandedOff)
	require.False(t, c.Stats().ListenerUp)
}
