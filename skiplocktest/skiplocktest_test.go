package skiplocktest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/skiplocktest"
)

// fakeTB records failures instead of failing the real test. Like the testing
// package, it stops the failing helper with runtime.Goexit, so helpers run
// under it through run.
type fakeTB struct {
	testing.TB // the real test, for Cleanup, Context and Logf

	mu     sync.Mutex // guards failed and msgs
	failed bool
	msgs   []string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failed = true
	f.msgs = append(f.msgs, fmt.Sprintf(format, args...))
}

func (f *fakeTB) Error(args ...any) { f.Errorf("%s", fmt.Sprint(args...)) }

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.Errorf(format, args...)
	f.FailNow()
}

func (f *fakeTB) Fatal(args ...any) {
	f.Error(args...)
	f.FailNow()
}

func (f *fakeTB) Fail() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failed = true
}

func (f *fakeTB) FailNow() {
	f.Fail()
	runtime.Goexit()
}

func (f *fakeTB) Failed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed
}

// failure runs fn against a fake TB and returns its failure message, or ""
// if fn passed.
func failure(t *testing.T, fn func(tb testing.TB)) string {
	t.Helper()
	f := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.failed {
		return ""
	}
	return strings.Join(f.msgs, "\n")
}

type email struct {
	To       string `json:"to"`
	Template string `json:"template"`
}

func newClient(t *testing.T) *skiplock.Client {
	t.Helper()
	db := dbtest.New(t)
	return skiplocktest.NewClient(t, db.Pool, skiplock.Config{})
}

func TestRequireEnqueued(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := context.Background()
	r, err := c.Enqueue(ctx, skiplock.EnqueueParams{Queue: "mail", Kind: "email.send", Priority: 5, Tenant: "acme",
		Payload: email{To: "a@example.com", Template: "welcome"}})
	require.NoError(t, err)
	_, err = c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "report", Delay: time.Hour})
	require.NoError(t, err)

	j := skiplocktest.RequireEnqueued(t, c, skiplocktest.Match{Kind: "email.send"})
	require.Equal(t, r.ID, j.ID)
	require.Equal(t, "mail", j.Queue)
	require.Equal(t, "ready", j.State)
	var got email
	require.NoError(t, j.DecodeArgs(&got))
	require.Equal(t, "welcome", got.Template)

	// Every way of saying the same thing.
	for _, m := range []skiplocktest.Match{
		{Kind: "email.send", Queue: "mail", Args: map[string]any{"to": "a@example.com"}},
		{Kind: "email.send", Args: email{To: "a@example.com", Template: "welcome"}},
		{Kind: "email.send", Args: []byte(`{"template":"welcome"}`), Priority: new(5), Tenant: "acme", Scheduled: new(false)},
		{Args: map[string]any{"template": "welcome"}},
		{Kind: "report", Scheduled: new(true)},
	} {
		skiplocktest.RequireEnqueued(t, c, m)
	}
	skiplocktest.RequireNotEnqueued(t, c, skiplocktest.Match{Kind: "email.send", Queue: "default"})
	skiplocktest.RequireNotEnqueued(t, c, skiplocktest.Match{Kind: "sms.send"})
}

func TestRequireEnqueuedCatchesMissingEnqueue(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	msg := failure(t, func(tb testing.TB) {
		skiplocktest.RequireEnqueued(tb, c, skiplocktest.Match{Kind: "email.send"})
	})
	require.Contains(t, msg, `no job enqueued matching {kind="email.send"}`)
	require.Contains(t, msg, `no job of kind "email.send" is enqueued (nothing is enqueued)`)

	_, err := c.Enqueue(context.Background(), skiplock.EnqueueParams{Kind: "email.sned"}) // a typo in the code under test
	require.NoError(t, err)
	msg = failure(t, func(tb testing.TB) {
		skiplocktest.RequireEnqueued(tb, c, skiplocktest.Match{Kind: "email.send"})
	})
	require.Contains(t, msg, `(enqueued: email.sned×1)`)
}

func TestRequireEnqueuedCatchesWrongPayload(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	_, err := c.Enqueue(context.Background(), skiplock.EnqueueParams{Queue: "mail", Kind: "email.send",
		Payload: email{To: "a@example.com", Template: "welcome"}})
	require.NoError(t, err)

	msg := failure(t, func(tb testing.TB) {
		skiplocktest.RequireEnqueued(tb, c, skiplocktest.Match{Kind: "email.send", Args: email{To: "b@example.com", Template: "welcome"}})
	})
	require.Contains(t, msg, `no job enqueued matching {kind="email.send" args⊇{"to":"b@example.com","template":"welcome"}}`)
	require.Contains(t, msg, `1 enqueued jobs of kind "email.send", none matching`)
	require.Contains(t, msg, `args={"to": "a@example.com", "template": "welcome"}: args do not contain {"to":"b@example.com","template":"welcome"}`)

	msg = failure(t, func(tb testing.TB) {
		skiplocktest.RequireEnqueued(tb, c, skiplocktest.Match{Kind: "email.send", Queue: "default", Priority: new(3)})
	})
	require.Contains(t, msg, `queue is "mail", want "default"; priority is 0, want 3`)

	msg = failure(t, func(tb testing.TB) {
		skiplocktest.RequireEnqueued(tb, c, skiplocktest.Match{Kind: "email.send", Args: []string{"not", "an", "object"}})
	})
	require.Contains(t, msg, "Match.Args must be a JSON object")
}

func TestRequireNotEnqueuedCatchesUnwantedJob(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	r, err := c.Enqueue(context.Background(), skiplock.EnqueueParams{Kind: "email.send", Payload: email{To: "a@example.com"}})
	require.NoError(t, err)
	msg := failure(t, func(tb testing.TB) {
		skiplocktest.RequireNotEnqueued(tb, c, skiplocktest.Match{Kind: "email.send", Args: map[string]any{"to": "a@example.com"}})
	})
	require.Contains(t, msg, `expected no job matching {kind="email.send" args⊇{"to":"a@example.com"}}, found 1`)
	require.Contains(t, msg, fmt.Sprintf("job %d kind=%q", r.ID, "email.send"))
}

func TestRequireEnqueuedInTransaction(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	c := skiplocktest.NewClient(t, db.Pool, skiplock.Config{})
	ctx := context.Background()
	m := skiplocktest.Match{Kind: "email.send"}

	t.Run("pgx", func(t *testing.T) {
		tx, err := c.Pool().Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck // rolled back on purpose
		_, err = c.EnqueueTx(ctx, tx, skiplock.EnqueueParams{Kind: "email.send"})
		require.NoError(t, err)
		skiplocktest.RequireEnqueuedTx(t, c, tx, m)
		skiplocktest.RequireNotEnqueued(t, c, m) // not committed: invisible outside
		require.Contains(t, failure(t, func(tb testing.TB) { skiplocktest.RequireNotEnqueuedTx(tb, c, tx, m) }), "found 1")
		require.NoError(t, tx.Rollback(ctx))
		skiplocktest.RequireNotEnqueued(t, c, m)
	})
	t.Run("database/sql", func(t *testing.T) {
		sqlDB, err := sql.Open("pgx", db.URL)
		require.NoError(t, err)
		defer sqlDB.Close()
		tx, err := sqlDB.BeginTx(ctx, nil)
		require.NoError(t, err)
		defer tx.Rollback() //nolint:errcheck // committed below
		_, err = c.EnqueueTx(ctx, skiplock.SQLTx(tx), skiplock.EnqueueParams{Kind: "email.send", Payload: email{To: "x@example.com"}})
		require.NoError(t, err)
		skiplocktest.RequireEnqueuedTx(t, c, skiplock.SQLTx(tx), skiplocktest.Match{Kind: "email.send", Args: map[string]any{"to": "x@example.com"}})
		skiplocktest.RequireNotEnqueued(t, c, m)
		require.NoError(t, tx.Commit())
		skiplocktest.RequireEnqueued(t, c, m)
	})
}

func TestRequireEnqueuedMany(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := context.Background()
	for _, p := range []skiplock.EnqueueParams{
		{Kind: "email.send", Payload: email{To: "a@example.com"}},
		{Kind: "audit"}, // another kind: ignored
		{Kind: "sms.send"},
		{Kind: "email.send", Payload: email{To: "b@example.com"}},
	} {
		_, err := c.Enqueue(ctx, p)
		require.NoError(t, err)
	}
	jobs := skiplocktest.RequireEnqueuedMany(t, c,
		skiplocktest.Match{Kind: "email.send", Args: map[string]any{"to": "a@example.com"}},
		skiplocktest.Match{Kind: "sms.send"},
		skiplocktest.Match{Kind: "email.send", Args: map[string]any{"to": "b@example.com"}},
	)
	require.Len(t, jobs, 3)
	require.Less(t, jobs[0].ID, jobs[1].ID)

	msg := failure(t, func(tb testing.TB) {
		skiplocktest.RequireEnqueuedMany(tb, c,
			skiplocktest.Match{Kind: "email.send", Args: map[string]any{"to": "b@example.com"}},
			skiplocktest.Match{Kind: "sms.send"},
		)
	})
	require.Contains(t, msg, "the enqueued jobs of kinds email.send, sms.send are not the expected 2")
	require.Contains(t, msg, `[0] want {kind="email.send" args⊇{"to":"b@example.com"}}, got job`)
	require.Contains(t, msg, `[2] unexpected job`)

	msg = failure(t, func(tb testing.TB) {
		skiplocktest.RequireEnqueuedMany(tb, c, skiplocktest.Match{Kind: "sms.send"}, skiplocktest.Match{Kind: "sms.send"})
	})
	require.Contains(t, msg, `[1] want {kind="sms.send"}: missing`)
}

func TestDrainAndRunOne(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := context.Background()
	var sent []string
	require.NoError(t, skiplock.Handle(c, "signup", func(ctx context.Context, j *skiplock.Job[email]) error {
		// Follow-up work enqueued by a handler runs in the same Drain.
		_, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "email.send", Payload: email{To: j.Args.To, Template: "welcome"}})
		return err
	}))
	require.NoError(t, skiplock.Handle(c, "email.send", func(ctx context.Context, j *skiplock.Job[email]) error {
		if j.Args.To == "" {
			return skiplock.Discard(errors.New("no recipient"))
		}
		sent = append(sent, j.Args.To)
		return nil
	}))
	_, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "signup", Payload: email{To: "a@example.com"}})
	require.NoError(t, err)

	one := skiplocktest.RunOne(t, c, "signup")
	require.Equal(t, skiplock.OutcomeCompleted, one.Outcome)
	require.Empty(t, sent, "RunOne ran only the signup job")
	skiplocktest.RequireEnqueued(t, c, skiplocktest.Match{Kind: "email.send", Args: map[string]any{"to": "a@example.com"}})

	_, err = c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "signup", Payload: email{To: "b@example.com"}})
	require.NoError(t, err)
	_, err = c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "email.send"})
	require.NoError(t, err)
	res := skiplocktest.Drain(t, c, skiplock.DrainOptions{})
	require.Equal(t, 3, res.Completed)
	require.Equal(t, 1, res.DeadLettered)
	require.ElementsMatch(t, []string{"a@example.com", "b@example.com"}, sent)
	skiplocktest.RequireNotEnqueued(t, c, skiplocktest.Match{})

	msg := failure(t, func(tb testing.TB) { skiplocktest.RunOne(tb, c, "signup") })
	require.Contains(t, msg, `RunOne("signup"): no job of kind "signup" is due`)
}

func TestNewSchemaIsolatesAndCleansUp(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	var a, b *skiplock.Client
	t.Run("two installations", func(t *testing.T) {
		a = skiplocktest.NewClient(t, db.Pool, skiplock.Config{})
		b = skiplocktest.NewClient(t, db.Pool, skiplock.Config{})
		require.NotEqual(t, a.Config().Schema, b.Config().Schema)
		_, err := a.Enqueue(ctx, skiplock.EnqueueParams{Kind: "k"})
		require.NoError(t, err)
		skiplocktest.RequireEnqueued(t, a, skiplocktest.Match{Kind: "k"})
		skiplocktest.RequireNotEnqueued(t, b, skiplocktest.Match{Kind: "k"})
	})
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname = ANY ($1)",
		[]string{a.Config().Schema, b.Config().Schema}).Scan(&n))
	require.Zero(t, n, "both schemas dropped when the test ended")
}
