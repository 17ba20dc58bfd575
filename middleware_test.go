package skiplock_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/store"
)

// storedMetadata reads a job's metadata column from table (NULL: "").
func storedMetadata(t *testing.T, db *dbtest.DB, table string, id int64) string {
	t.Helper()
	var m *string
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		"SELECT metadata::text FROM skiplock."+table+" WHERE id = $1", id).Scan(&m))
	if m == nil {
		return ""
	}
	return *m
}

// Metadata set through every enqueue path reaches the handler and follows
// the job into the dead-letter table, back out of it on replay, and into
// the archive.
func TestMetadataEveryPath(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{Logger: quietLogger(), ArchiveCompleted: true})
	seen := map[int64]skiplock.Metadata{}
	require.NoError(t, skiplock.Handle(c, "k", func(ctx context.Context, j *skiplock.Job[struct{}]) error {
		seen[j.ID] = j.Metadata
		if j.Metadata.Get("fail") == "yes" {
			return skiplock.Cancel(errors.New("asked to"))
		}
		return nil
	}))
	md := func(req string) skiplock.Metadata { return skiplock.Metadata{"request_id": req, "n": 7} }

	one, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "k", Metadata: md("one")})
	require.NoError(t, err)
	none, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "k"})
	require.NoError(t, err)
	empty, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "k", Metadata: skiplock.Metadata{}})
	require.NoError(t, err)
	uniq, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "k", UniqueKey: "u", Metadata: md("uniq")})
	require.NoError(t, err)

	sqlDB, err := sql.Open("pgx", db.URL)
	require.NoError(t, err)
	defer sqlDB.Close()
	stdTx, err := sqlDB.BeginTx(ctx, nil)
	require.NoError(t, err)
	viaSQL, err := c.EnqueueTx(ctx, skiplock.SQLTx(stdTx), skiplock.EnqueueParams{Kind: "k", Metadata: md("database/sql")})
	require.NoError(t, err)
	require.NoError(t, stdTx.Commit())

	n, err := c.EnqueueMany(ctx, []skiplock.EnqueueParams{
		{Kind: "k", Queue: "bulk", Metadata: md("copy")},
		{Kind: "k", Queue: "bulk"},
		{Kind: "k", Queue: "bulk", UniqueKey: "b", Metadata: md("batch")},
	})
	require.NoError(t, err)
	require.EqualValues(t, 3, n)

	var plain int64
	require.NoError(t, db.Pool.QueryRow(ctx,
		`SELECT skiplock.enqueue(queue => 'default', kind => 'k', metadata => '{"fail": "yes", "request_id": "psql"}')`).Scan(&plain))

	require.Equal(t, `{"n": 7, "request_id": "one"}`, storedMetadata(t, db, "jobs", one.ID))
	require.Equal(t, "", storedMetadata(t, db, "jobs", none.ID), "no metadata stores NULL")
	require.Equal(t, "", storedMetadata(t, db, "jobs", empty.ID), "empty metadata stores NULL")
	var bulk []string
	rows, err := db.Pool.Query(ctx, `SELECT coalesce(metadata->>'request_id', '-') FROM skiplock.jobs WHERE queue = 'bulk' ORDER BY id`)
	require.NoError(t, err)
	bulk, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"copy", "-", "batch"}, bulk)

	res, err := c.Drain(ctx, skiplock.DrainOptions{})
	require.NoError(t, err)
	require.Equal(t, 8, res.Completed)
	require.Equal(t, 1, res.DeadLettered)

	require.Equal(t, "one", seen[one.ID].Get("request_id"))
	require.Equal(t, json.Number("7"), seen[one.ID]["n"], "numbers keep their text")
	require.Nil(t, seen[none.ID])
	require.Nil(t, seen[empty.ID])
	require.Equal(t, "uniq", seen[uniq.ID].Get("request_id"))
	require.Equal(t, "database/sql", seen[viaSQL.ID].Get("request_id"))
	require.Equal(t, "psql", seen[plain].Get("request_id"))

	// Archived and dead-lettered jobs keep their metadata.
	require.Equal(t, `{"n": 7, "request_id": "one"}`, storedMetadata(t, db, "jobs_done", one.ID))
	require.Equal(t, `{"fail": "yes", "request_id": "psql"}`, storedMetadata(t, db, "jobs_dead", plain))
	// A replay from the dead-letter table carries it back.
	replayed, err := store.New("skiplock").ReplayDead(ctx, db.Pool, store.ReplayFilter{IDs: []int64{plain}}, 0, nil)
	require.NoError(t, err)
	require.Equal(t, 1, replayed)
	require.Equal(t, 1, countJobs(t, db.Pool, `metadata->>'request_id' = 'psql'`))
}

// Metadata is validated like a payload, naming the field, and a refused job
// writes nothing; the SQL function applies the same rules.
func TestMetadataValidation(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{})

	for name, m := range map[string]skiplock.Metadata{
		"too big":      {"x": strings.Repeat("a", skiplock.MaxMetadataBytes)},
		"not JSON":     {"ch": make(chan int)},
		"NUL":          {"x": "a\x00b"},
		"deep nesting": {"x": deep(70)},
	} {
		_, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "k", Metadata: m})
		var fe *skiplock.FieldError
		require.ErrorAs(t, err, &fe, name)
		require.Equal(t, "metadata", fe.Field, name)
		require.ErrorIs(t, err, skiplock.ErrInvalidJob, name)
		require.NotContains(t, err.Error(), "aaaa", name)
		_, err = c.EnqueueMany(ctx, []skiplock.EnqueueParams{{Kind: "k"}, {Kind: "k", Metadata: m}})
		require.ErrorAs(t, err, &fe, name)
		require.Equal(t, "jobs[1].metadata", fe.Field, name)
	}
	require.Equal(t, 0, countJobs(t, db.Pool, "true"), "nothing written")

	for raw, want := range map[string]string{
		`[1]`:              "must be a JSON object, got array",
		`"s"`:              "must be a JSON object, got string",
		`{"a":`:            "not valid JSON",
		`{"a":1} {}`:       "data after the JSON object",
		"{\"a\":\"\xff\"}": "invalid UTF-8",
	} {
		_, err := skiplock.ParseMetadata([]byte(raw))
		var fe *skiplock.FieldError
		require.ErrorAs(t, err, &fe, raw)
		require.Equal(t, "metadata", fe.Field)
		require.Contains(t, fe.Message, want, raw)
	}
	m, err := skiplock.ParseMetadata([]byte(`{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "big": 12345678901234567890}`))
	require.NoError(t, err)
	require.Equal(t, []string{"big", "traceparent"}, m.Keys())
	require.Equal(t, json.Number("12345678901234567890"), m["big"])

	for _, arg := range []string{`'[1]'`, `'"x"'`, `jsonb_build_object('x', repeat('a', 70000))`} {
		_, err := db.Pool.Exec(ctx, `SELECT skiplock.enqueue(queue => 'q', kind => 'k', metadata => `+arg+`)`)
		var pg *pgconn.PgError
		require.ErrorAs(t, err, &pg, arg)
		require.Equal(t, "22023", pg.Code)
		require.True(t, strings.HasPrefix(pg.Message, "skiplock: metadata: "), pg.Message)
	}
	require.Equal(t, 0, countJobs(t, db.Pool, "true"), "nothing written")
}

func deep(n int) any {
	var v any = 1
	for range n {
		v = []any{v}
	}
	return v
}

// Enqueue middleware wraps every enqueue path in order, may add metadata
// without touching the caller's map, and may refuse an enqueue.
func TestEnqueueMiddleware(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	type ctxKey struct{}
	var calls []string
	tag := func(name string) skiplock.EnqueueMiddleware {
		return func(ctx context.Context, jobs []*skiplock.EnqueueParams, next func(context.Context) error) error {
			calls = append(calls, name+">")
			for _, j := range jobs {
				if j.Kind == "forbidden" {
					return errors.New("forbidden kind")
				}
				j.Metadata = j.Metadata.Clone()
				j.Metadata.Set(name, "1")
				if user, ok := ctx.Value(ctxKey{}).(string); ok {
					j.Metadata.Set("user", user)
				}
			}
			err := next(ctx)
			calls = append(calls, "<"+name)
			return err
		}
	}
	c := newClient(t, db.Pool, skiplock.Config{EnqueueMiddleware: []skiplock.EnqueueMiddleware{tag("a"), tag("b")}})

	shared := skiplock.Metadata{"caller": "x"}
	uctx := context.WithValue(ctx, ctxKey{}, "alice")
	r, err := c.Enqueue(uctx, skiplock.EnqueueParams{Kind: "k", Metadata: shared})
	require.NoError(t, err)
	require.Equal(t, []string{"a>", "b>", "<b", "<a"}, calls)
	require.Equal(t, skiplock.Metadata{"caller": "x"}, shared, "the caller's map is untouched")
	require.Equal(t, `{"a": "1", "b": "1", "user": "alice", "caller": "x"}`, storedMetadata(t, db, "jobs", r.ID))

	calls = nil
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	r, err = c.EnqueueTx(ctx, tx, skiplock.EnqueueParams{Kind: "k"})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, `{"a": "1", "b": "1"}`, storedMetadata(t, db, "jobs", r.ID))
	require.Equal(t, []string{"a>", "b>", "<b", "<a"}, calls)

	calls = nil
	n, err := c.EnqueueMany(ctx, []skiplock.EnqueueParams{{Kind: "m"}, {Kind: "m", UniqueKey: "u"}})
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	require.Equal(t, []string{"a>", "b>", "<b", "<a"}, calls, "one call per batch")
	require.Equal(t, 2, countJobs(t, db.Pool, `kind = 'm' AND metadata = '{"a": "1", "b": "1"}'`))

	// A refusal writes nothing, in a batch too.
	before := countJobs(t, db.Pool, "true")
	_, err = c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "forbidden"})
	require.EqualError(t, err, "forbidden kind")
	_, err = c.EnqueueMany(ctx, []skiplock.EnqueueParams{{Kind: "m"}, {Kind: "forbidden"}})
	require.EqualError(t, err, "forbidden kind")
	require.Equal(t, before, countJobs(t, db.Pool, "true"))

	// Validation runs after the middleware, on what it produced.
	bad := skiplock.EnqueueMiddleware(func(ctx context.Context, jobs []*skiplock.EnqueueParams, next func(context.Context) error) error {
		jobs[0].Priority = 5000
		return next(ctx)
	})
	c2 := newClient(t, db.Pool, skiplock.Config{EnqueueMiddleware: []skiplock.EnqueueMiddleware{bad}})
	_, err = c2.Enqueue(ctx, skiplock.EnqueueParams{Kind: "k"})
	var fe *skiplock.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "priority", fe.Field)
	require.Equal(t, before, countJobs(t, db.Pool, "true"))
}

// Work middleware wraps each handler run: global first, then the
// handler's own; it passes a context to the handler, sees the job without
// its payload, sees panics as *PanicError, and decides the outcome.
func TestWorkMiddleware(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	type ctxKey struct{}
	var calls []string
	outcomes := map[string]string{}
	global := func(ctx context.Context, job *skiplock.JobInfo, next func(context.Context) error) error {
		calls = append(calls, "global>")
		err := next(context.WithValue(ctx, ctxKey{}, job.Metadata.Get("user")))
		outcomes[job.Kind] = skiplock.AttemptOutcome(ctx, err)
		var pe *skiplock.PanicError
		if errors.As(err, &pe) {
			require.Equal(t, "boom", pe.Value)
			require.Contains(t, string(pe.Stack), "middleware_test.go", "the handler's stack")
		}
		calls = append(calls, "<global")
		if job.Kind == "forgiven" {
			return nil
		}
		return err
	}
	c := newClient(t, db.Pool, skiplock.Config{
		Logger: quietLogger(), WorkMiddleware: []skiplock.WorkMiddleware{global},
		Backoff: func(int) time.Duration { return time.Hour },
	})
	own := skiplock.WithMiddleware(func(ctx context.Context, job *skiplock.JobInfo, next func(context.Context) error) error {
		calls = append(calls, "own>")
		require.Equal(t, "ok", job.Kind)
		require.Equal(t, 1, job.Attempt)
		require.Equal(t, c.Config().WorkerID, job.WorkerID)
		require.NotZero(t, job.LeaseToken)
		err := next(ctx)
		calls = append(calls, "<own")
		return err
	})
	var user string
	require.NoError(t, skiplock.Handle(c, "ok", func(ctx context.Context, j *skiplock.Job[struct{}]) error {
		calls = append(calls, "handler")
		user, _ = ctx.Value(ctxKey{}).(string)
		return nil
	}, own))
	handle := func(kind string, fn func(ctx context.Context) error, opts ...skiplock.HandlerOption) {
		require.NoError(t, skiplock.Handle(c, kind, func(ctx context.Context, _ *skiplock.Job[struct{}]) error { return fn(ctx) }, opts...))
	}
	handle("panics", func(context.Context) error { panic("boom") })
	handle("forgiven", func(context.Context) error { return errors.New("ignored by the middleware") })
	handle("fails", func(context.Context) error { return errors.New("nope") })
	handle("snoozes", func(context.Context) error { return skiplock.Snooze(time.Hour) })
	handle("discards", func(context.Context) error { return skiplock.Discard(errors.New("bad")) })
	handle("cancels", func(context.Context) error { return skiplock.Cancel(errors.New("stop")) })
	handle("times_out", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }, skiplock.WithTimeout(time.Millisecond))
	require.NoError(t, skiplock.Handle(c, "undecodable", func(context.Context, *skiplock.Job[struct{ N int }]) error { return nil }))

	_, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "ok", Metadata: skiplock.Metadata{"user": "bob"}})
	require.NoError(t, err)
	res, err := c.Drain(ctx, skiplock.DrainOptions{})
	require.NoError(t, err)
	require.Equal(t, 1, res.Completed)
	require.Equal(t, []string{"global>", "own>", "handler", "<own", "<global"}, calls)
	require.Equal(t, "bob", user, "the handler runs with the middleware's context")

	for _, k := range []string{"panics", "forgiven", "fails", "snoozes", "discards", "cancels", "times_out"} {
		_, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: k, MaxAttempts: 1})
		require.NoError(t, err)
	}
	_, err = c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "undecodable", Payload: json.RawMessage(`{"N": "x"}`)})
	require.NoError(t, err)
	res, err = c.Drain(ctx, skiplock.DrainOptions{})
	require.NoError(t, err)
	require.Equal(t, map[string]string{
		"ok": "completed", "panics": "panic", "forgiven": "error", "fails": "error", "snoozes": "snoozed",
		"discards": "discarded", "cancels": "cancelled", "times_out": "timeout", "undecodable": "discarded",
	}, outcomes)
	reasons := map[string]string{}
	for _, j := range res.Jobs {
		reasons[j.Kind] = string(j.Outcome) + "/" + j.Reason
	}
	require.Equal(t, map[string]string{
		"panics": "dead_lettered/panic", "forgiven": "completed/", "fails": "dead_lettered/error",
		"snoozes": "snoozed/", "discards": "dead_lettered/discarded", "cancels": "dead_lettered/cancelled",
		"times_out": "dead_lettered/timeout", "undecodable": "dead_lettered/discarded",
	}, reasons)
	var lastErr string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT last_error FROM skiplock.jobs_dead WHERE kind = 'panics'`).Scan(&lastErr))
	require.True(t, strings.HasPrefix(lastErr, "panic: boom\n"), lastErr)
	require.Contains(t, lastErr, "middleware_test.go", "the stored stack is the handler's")
}

// A panic in a middleware itself fails the run as a panic.
func TestWorkMiddlewarePanics(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	mw := func(ctx context.Context, job *skiplock.JobInfo, next func(context.Context) error) error {
		panic("middleware bug")
	}
	c := newClient(t, db.Pool, skiplock.Config{Logger: quietLogger(), WorkMiddleware: []skiplock.WorkMiddleware{mw}})
	ran := false
	require.NoError(t, skiplock.Handle(c, "k", func(context.Context, *skiplock.Job[struct{}]) error { ran = true; return nil }))
	_, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "k", MaxAttempts: 1})
	require.NoError(t, err)
	res, err := c.Drain(ctx, skiplock.DrainOptions{})
	require.NoError(t, err)
	require.Len(t, res.Jobs, 1)
	require.Equal(t, "panic", res.Jobs[0].Reason)
	require.False(t, ran)
}
