package skiplock_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/store"
)

func newClient(t *testing.T, pool *pgxpool.Pool, cfg skiplock.Config) *skiplock.Client {
	t.Helper()
	c, err := skiplock.NewClient(pool, cfg)
	require.NoError(t, err)
	// A client that waited keeps its LISTEN connection a few seconds
	// after (waitLinger), which the test database's drop would wait for.
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	return c
}

func countJobs(t *testing.T, pool *pgxpool.Pool, where string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM skiplock.jobs WHERE "+where, args...).Scan(&n))
	return n
}

func TestEnqueueTxExistsIffCommit(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{})

	t.Run("pgx", func(t *testing.T) {
		for _, commit := range []bool{true, false} {
			tx, err := db.Pool.Begin(ctx)
			require.NoError(t, err)
			_, err = tx.Exec(ctx, "CREATE TABLE IF NOT EXISTS orders (id int)")
			require.NoError(t, err)
			res, err := c.EnqueueTx(ctx, tx, skiplock.EnqueueParams{Kind: "pgx", Payload: map[string]bool{"commit": commit}})
			require.NoError(t, err)
			require.True(t, res.Inserted)
			if commit {
				require.NoError(t, tx.Commit(ctx))
			} else {
				require.NoError(t, tx.Rollback(ctx))
			}
			require.Equal(t, boolInt(commit), countJobs(t, db.Pool, "id = $1", res.ID))
		}
	})
	t.Run("database/sql", func(t *testing.T) {
		sdb, err := sql.Open("pgx", db.URL)
		require.NoError(t, err)
		defer sdb.Close()
		for _, commit := range []bool{true, false} {
			tx, err := sdb.BeginTx(ctx, nil)
			require.NoError(t, err)
			res, err := c.EnqueueTx(ctx, skiplock.SQLTx(tx), skiplock.EnqueueParams{Kind: "sql", UniqueKey: "k-" + map[bool]string{true: "c", false: "r"}[commit],
				Tenant: "t", Entity: "e", RunAt: time.Now().Add(time.Minute)})
			require.NoError(t, err)
			if commit {
				require.NoError(t, tx.Commit())
			} else {
				require.NoError(t, tx.Rollback())
			}
			require.Equal(t, boolInt(commit), countJobs(t, db.Pool, "id = $1", res.ID))
		}
	})
	t.Run("sql function", func(t *testing.T) {
		for _, commit := range []bool{true, false} {
			tx, err := db.Pool.Begin(ctx)
			require.NoError(t, err)
			var id int64
			require.NoError(t, tx.QueryRow(ctx,
				`SELECT skiplock.enqueue(queue => 'q', kind => 'fn', payload => '{"a":1}', priority => 3)`).Scan(&id))
			if commit {
				require.NoError(t, tx.Commit(ctx))
			} else {
				require.NoError(t, tx.Rollback(ctx))
			}
			require.Equal(t, boolInt(commit), countJobs(t, db.Pool, "id = $1", id))
		}
	})
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestUniqueKeyConcurrentEnqueue(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{})
	const n = 64
	ids := make([]int64, n)
	inserted := make([]bool, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			res, err := c.Enqueue(ctx, skiplock.EnqueueParams{Queue: "uq", Kind: "k", UniqueKey: "same"})
			require.NoError(t, err)
			ids[i], inserted[i] = res.ID, res.Inserted
		}(i)
	}
	close(start)
	wg.Wait()
	require.Equal(t, 1, countJobs(t, db.Pool, "queue = 'uq'"))
	wins := 0
	for i := range ids {
		require.Equal(t, ids[0], ids[i], "every caller gets the one job's id")
		if inserted[i] {
			wins++
		}
	}
	require.Equal(t, 1, wins)

	// Same key in another queue is another job; bump-schedule moves run_at later only.
	other, err := c.Enqueue(ctx, skiplock.EnqueueParams{Queue: "uq2", Kind: "k", UniqueKey: "same"})
	require.NoError(t, err)
	require.NotEqual(t, ids[0], other.ID)
	later := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	res, err := c.Enqueue(ctx, skiplock.EnqueueParams{Queue: "uq", Kind: "k", UniqueKey: "same", BumpSchedule: true, RunAt: later})
	require.NoError(t, err)
	require.False(t, res.Inserted)
	require.Equal(t, ids[0], res.ID)
	var runAt time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT run_at FROM skiplock.jobs WHERE id=$1", res.ID).Scan(&runAt))
	require.True(t, runAt.Equal(later), "bumped to the later time, got %s", runAt)
	_, err = c.Enqueue(ctx, skiplock.EnqueueParams{Queue: "uq", Kind: "k", UniqueKey: "same", BumpSchedule: true})
	require.NoError(t, err)
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT run_at FROM skiplock.jobs WHERE id=$1", res.ID).Scan(&runAt))
	require.True(t, runAt.Equal(later), "GREATEST keeps the later time")
}

func TestNotifyOnlyAfterCommit(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{})
	conn, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `LISTEN "skiplock.jobs"`)
	require.NoError(t, err)

	// Rolled back: nothing is ever delivered.
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = c.EnqueueTx(ctx, tx, skiplock.EnqueueParams{Queue: "rolled", Kind: "k"})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))

	// Committed, three jobs in two queues: delivered once per queue, on commit.
	tx, err = db.Pool.Begin(ctx)
	require.NoError(t, err)
	for _, q := range []string{"a", "a", "b"} {
		_, err = c.EnqueueTx(ctx, tx, skiplock.EnqueueParams{Queue: q, Kind: "k"})
		require.NoError(t, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = conn.WaitForNotification(wctx)
	cancel()
	require.Error(t, err, "nothing is delivered before commit")
	require.NoError(t, tx.Commit(ctx))

	got := map[string]int{}
	for {
		wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if err != nil {
			break
		}
		got[n.Payload]++
	}
	require.Equal(t, map[string]int{"a": 1, "b": 1}, got)
}

// badInputs is the PRODUCT §4.6 list; each must be rejected naming the field.
var badInputs = []struct {
	name  string
	p     skiplock.EnqueueParams
	field string
}{
	{"invalid JSON", skiplock.EnqueueParams{Kind: "k", Payload: json.RawMessage(`{bad`)}, "payload"},
	{"truncated JSON", skiplock.EnqueueParams{Kind: "k", Payload: json.RawMessage(`{"a":`)}, "payload"},
	{"unterminated object", skiplock.EnqueueParams{Kind: "k", Payload: json.RawMessage(`{"a":[1,2`)}, "payload"},
	{"JSON array", skiplock.EnqueueParams{Kind: "k", Payload: json.RawMessage(`[1]`)}, "payload"},
	{"oversized payload", skiplock.EnqueueParams{Kind: "k", Payload: json.RawMessage(`{"a":"` + strings.Repeat("x", 1<<20) + `"}`)}, "payload"},
	{"NUL in payload", skiplock.EnqueueParams{Kind: "k", Payload: json.RawMessage(`{"a":"x\u0000y"}`)}, "payload"},
	{"invalid UTF-8 payload", skiplock.EnqueueParams{Kind: "k", Payload: json.RawMessage("{\"a\":\"\xff\"}")}, "payload"},
	{"empty kind", skiplock.EnqueueParams{Kind: ""}, "kind"},
	{"overlong kind", skiplock.EnqueueParams{Kind: strings.Repeat("k", 129)}, "kind"},
	{"bad kind chars", skiplock.EnqueueParams{Kind: "a b"}, "kind"},
	{"overlong queue", skiplock.EnqueueParams{Queue: strings.Repeat("q", 129), Kind: "k"}, "queue"},
	{"queue injection", skiplock.EnqueueParams{Queue: "default'; DROP TABLE jobs;--", Kind: "k"}, "queue"},
	{"NUL in queue", skiplock.EnqueueParams{Queue: "a\x00b", Kind: "k"}, "queue"},
	{"invalid UTF-8 queue", skiplock.EnqueueParams{Queue: "a\xffb", Kind: "k"}, "queue"},
	{"absurd run_at", skiplock.EnqueueParams{Kind: "k", RunAt: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)}, "run_at"},
	{"run_at before 1970", skiplock.EnqueueParams{Kind: "k", RunAt: time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC)}, "run_at"},
	{"negative delay", skiplock.EnqueueParams{Kind: "k", Delay: -time.Second}, "delay"},
	{"absurd priority", skiplock.EnqueueParams{Kind: "k", Priority: 1 << 30}, "priority"},
	{"max_attempts too big", skiplock.EnqueueParams{Kind: "k", MaxAttempts: 100000}, "max_attempts"},
	{"overlong unique key", skiplock.EnqueueParams{Kind: "k", UniqueKey: strings.Repeat("u", 513)}, "unique_key"},
	{"NUL in tenant", skiplock.EnqueueParams{Kind: "k", Tenant: "a\x00"}, "tenant"},
	{"invalid UTF-8 entity", skiplock.EnqueueParams{Kind: "k", Entity: "\xfe"}, "entity"},
	// Identifiers are shown to operators: no terminal control (issue 38 §5).
	{"ANSI escape in tenant", skiplock.EnqueueParams{Kind: "k", Tenant: "ten\x1b[31mRED"}, "tenant"},
	{"line break in entity", skiplock.EnqueueParams{Kind: "k", Entity: "a\nb"}, "entity"},
	{"C1 CSI in unique key", skiplock.EnqueueParams{Kind: "k", UniqueKey: "k\u009b2J"}, "unique_key"},
	{"bump without key", skiplock.EnqueueParams{Kind: "k", BumpSchedule: true}, "bump_schedule"},
}

func TestBadInputGoAPI(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{})
	for _, tc := range badInputs {
		_, err := c.Enqueue(ctx, tc.p)
		require.Error(t, err, tc.name)
		require.True(t, errors.Is(err, skiplock.ErrInvalidJob), "%s: %v", tc.name, err)
		var fe *skiplock.FieldError
		require.True(t, errors.As(err, &fe), tc.name)
		require.Equal(t, tc.field, fe.Field, tc.name)
		require.NotContains(t, err.Error(), "DROP TABLE", "errors never echo values")
		// The bulk path rejects the whole batch and names the index.
		_, err = c.EnqueueMany(ctx, []skiplock.EnqueueParams{{Kind: "ok"}, tc.p})
		require.ErrorIs(t, err, skiplock.ErrInvalidJob, tc.name)
		require.Contains(t, err.Error(), "jobs[1]."+tc.field, tc.name)
	}
	require.Equal(t, 0, countJobs(t, db.Pool, "true"), "nothing was inserted")
}

func TestBadInputSQLFunction(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	cases := []struct{ call, field string }{
		{`skiplock.enqueue(queue => '', kind => 'k')`, "queue"},
		{`skiplock.enqueue(queue => repeat('q', 129), kind => 'k')`, "queue"},
		{`skiplock.enqueue(queue => 'a b', kind => 'k')`, "queue"},
		{`skiplock.enqueue(queue => 'q', kind => '')`, "kind"},
		{`skiplock.enqueue(queue => 'q', kind => 'k', payload => '[1]')`, "payload"},
		{`skiplock.enqueue(queue => 'q', kind => 'k', payload => jsonb_build_object('a', repeat('x', 1100000)))`, "payload"},
		{`skiplock.enqueue(queue => 'q', kind => 'k', priority => 100000)`, "priority"},
		{`skiplock.enqueue(queue => 'q', kind => 'k', run_at => 'infinity')`, "run_at"},
		{`skiplock.enqueue(queue => 'q', kind => 'k', run_at => '9999-01-01')`, "run_at"},
		{`skiplock.enqueue(queue => 'q', kind => 'k', max_attempts => 0)`, "max_attempts"},
		{`skiplock.enqueue(queue => 'q', kind => 'k', unique_key => '')`, "unique_key"},
		{`skiplock.enqueue(queue => 'q', kind => 'k', tenant => repeat('t', 300))`, "tenant"},
		{`skiplock.enqueue(queue => 'q', kind => 'k', entity => '')`, "entity"},
	}
	for _, tc := range cases {
		_, err := db.Pool.Exec(ctx, "SELECT "+tc.call)
		require.Error(t, err, tc.call)
		require.Contains(t, err.Error(), "skiplock: "+tc.field+":", tc.call)
	}
	// Invalid JSON and NUL never reach the function: PostgreSQL rejects the cast.
	_, err := db.Pool.Exec(ctx, `SELECT skiplock.enqueue(queue => 'q', kind => 'k', payload => '{bad')`)
	require.Error(t, err)
	_, err = db.Pool.Exec(ctx, `SELECT skiplock.enqueue(queue => 'q', kind => 'k', payload => '{"a":"\u0000"}')`)
	require.Error(t, err)
	require.Equal(t, 0, countJobs(t, db.Pool, "true"))
}

func TestEnqueueManyCopy(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{MaxAttempts: 7})
	ps := make([]skiplock.EnqueueParams, 0, 2003)
	for i := 0; i < 2000; i++ {
		ps = append(ps, skiplock.EnqueueParams{Queue: "bulk", Kind: "k", Payload: map[string]int{"i": i}, Tenant: "t"})
	}
	ps = append(ps,
		skiplock.EnqueueParams{Queue: "bulk", Kind: "k", UniqueKey: "u1"},
		skiplock.EnqueueParams{Queue: "bulk", Kind: "k", UniqueKey: "u1"},
		skiplock.EnqueueParams{Queue: "bulk", Kind: "k", Delay: time.Hour},
	)
	n, err := c.EnqueueMany(ctx, ps)
	require.NoError(t, err)
	require.EqualValues(t, 2002, n, "the duplicate unique key is skipped")
	require.Equal(t, 2002, countJobs(t, db.Pool, "queue = 'bulk' AND max_attempts = 7"))
	require.Equal(t, 1, countJobs(t, db.Pool, "queue = 'bulk' AND run_at > now() + interval '50 minutes'"))
}

// TestClaimUsesPartialIndex checks the claim's plan on a table where almost
// every row is not claimable: it must walk the partial ready index, never
// the table.
func TestClaimUsesPartialIndex(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `
		INSERT INTO skiplock.jobs (queue, kind, state, locked_by, lease_token, lease_expires_at, run_at)
		SELECT 'q', 'k', 'running', 'w', g, now() + interval '1 hour', now() FROM generate_series(1, 20000) g;
		INSERT INTO skiplock.jobs (queue, kind, run_at)
		SELECT 'q', 'k', now() + interval '1 day' FROM generate_series(1, 20000) g;
		INSERT INTO skiplock.jobs (queue, kind) SELECT 'q', 'k' FROM generate_series(1, 10) g;
		ANALYZE skiplock.jobs;`)
	require.NoError(t, err)
	st := store.New("skiplock")
	for _, tc := range []struct {
		name, query string
		args        []any
	}{
		{"claim one queue", st.SQL("claim"), []any{[]string{"q"}, nil, 50, "w", int64(30e6), nil, nil, nil}},
		{"claim queues and kinds", st.SQL("claim"), []any{[]string{"q", "other"}, []string{"k"}, 50, "w", int64(30e6), nil, nil, nil}},
	} {
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		// Released whatever happens: a connection left in a transaction
		// would hang the pool's Close in the test's cleanup.
		defer func() { _ = tx.Rollback(ctx) }()
		// As the claim runs: behind claim_settings (no sequential scan, which
		// an empty generation of the ring would otherwise be planned as).
		_, err = tx.Exec(ctx, st.SQL("claim_settings"))
		require.NoError(t, err)
		rows, err := tx.Query(ctx, "EXPLAIN (COSTS OFF) "+tc.query, tc.args...)
		require.NoError(t, err)
		var plan []string
		for rows.Next() {
			var line string
			require.NoError(t, rows.Scan(&line))
			plan = append(plan, line)
		}
		require.NoError(t, rows.Err())
		require.NoError(t, tx.Rollback(ctx))
		text := dbtest.PlanText(strings.Join(plan, "\n"))
		require.Contains(t, text, "jobs_ready", "%s:\n%s", tc.name, text)
		require.NotContains(t, text, "Seq Scan on jobs", "%s:\n%s", tc.name, text)
	}
}

// Both enqueue paths route by the generations of migration 016: a plain job
// into the ring (the current generation, 0..2), a job with an entity or a
// unique key into jobs_keyed (-1), whose unique indexes guard them.
func TestEnqueueRoutesGenerations(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{})
	n, err := c.EnqueueMany(ctx, []skiplock.EnqueueParams{
		{Queue: "many", Kind: "plain"},
		{Queue: "many", Kind: "entity", Entity: "e1"},
		{Queue: "many", Kind: "unique", UniqueKey: "u1"},
	})
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
	for _, kind := range []string{"plain", "entity", "unique"} {
		_, err := c.Enqueue(ctx, skiplock.EnqueueParams{Queue: "one", Kind: kind,
			Entity: map[bool]string{true: "e2"}[kind == "entity"], UniqueKey: map[bool]string{true: "u2"}[kind == "unique"]})
		require.NoError(t, err)
	}
	rows, err := db.Pool.Query(ctx, "SELECT queue, kind, gen FROM skiplock.jobs ORDER BY queue, kind")
	require.NoError(t, err)
	got := map[string]int{}
	for rows.Next() {
		var queue, kind string
		var gen int
		require.NoError(t, rows.Scan(&queue, &kind, &gen))
		got[queue+"/"+kind] = gen
	}
	require.NoError(t, rows.Err())
	require.Len(t, got, 6)
	for _, q := range []string{"many", "one"} {
		require.GreaterOrEqual(t, got[q+"/plain"], 0, "%s: a plain job goes to the ring", q)
		require.LessOrEqual(t, got[q+"/plain"], 2, q)
		require.Equal(t, -1, got[q+"/entity"], "%s: an entity job goes to jobs_keyed", q)
		require.Equal(t, -1, got[q+"/unique"], "%s: a unique job goes to jobs_keyed", q)
	}
}

// EnqueueManyTx takes the same Tx as EnqueueTx: on a database/sql
// transaction (no COPY) the jobs go in one statement each, exist if and only
// if it commits, a held unique key is skipped, and a bad job rejects the
// call by its index with nothing written.
func TestEnqueueManyTxDatabaseSQL(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{})
	sdb, err := sql.Open("pgx", db.URL)
	require.NoError(t, err)
	defer sdb.Close()
	_, err = c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "many", UniqueKey: "held"})
	require.NoError(t, err)
	for _, commit := range []bool{false, true} {
		tx, err := sdb.BeginTx(ctx, nil)
		require.NoError(t, err)
		n, err := c.EnqueueManyTx(ctx, skiplock.SQLTx(tx), []skiplock.EnqueueParams{
			{Kind: "many", Queue: "bulk"},
			{Kind: "many", Queue: "bulk", Delay: time.Minute, Tenant: "t"},
			{Kind: "many", UniqueKey: "held"}, // in flight already: skipped
		})
		require.NoError(t, err)
		require.EqualValues(t, 2, n)
		if commit {
			require.NoError(t, tx.Commit())
		} else {
			require.NoError(t, tx.Rollback())
		}
		require.Equal(t, 2*boolInt(commit), countJobs(t, db.Pool, "queue = 'bulk'"))
	}
	tx, err := sdb.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback() //nolint:errcheck // rolled back on purpose
	_, err = c.EnqueueManyTx(ctx, skiplock.SQLTx(tx), []skiplock.EnqueueParams{{Kind: "many", Queue: "bad"}, {Kind: ""}})
	var fe *skiplock.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "jobs[1].kind", fe.Field)
	require.Zero(t, countJobs(t, db.Pool, "queue = 'bad'"))
}
