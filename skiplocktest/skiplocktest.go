// Package skiplocktest helps test code that uses skiplock, against a real
// PostgreSQL database.
//
// A test typically gets an isolated installation with NewClient (a fresh,
// migrated schema that is dropped when the test ends), runs the code under
// test, and asserts what it enqueued:
//
//	client := skiplocktest.NewClient(t, pool, skiplock.Config{})
//	placeOrder(ctx, client, 7) // the code under test
//	skiplocktest.RequireEnqueued(t, client, skiplocktest.Match{
//		Kind: "order.confirm", Args: map[string]any{"order_id": 7},
//	})
//
// and then runs the jobs synchronously through the registered handlers,
// without starting the client:
//
//	skiplock.Handle(client, "order.confirm", confirmOrder)
//	res := skiplocktest.Drain(t, client, skiplock.DrainOptions{})
//	// res.Completed == 1
//
// The RequireEnqueuedTx and RequireNotEnqueuedTx variants look inside a
// transaction that has not committed yet (a pgx transaction, or a *sql.Tx through skiplock.SQLTx), which is how
// to test code that enqueues with EnqueueTx before its caller commits.
//
// Every helper fails the test through its testing.TB with a message that
// says what was expected and what is there instead, enqueued jobs' args
// included: the one place skiplock prints payloads, because these helpers
// run on test data and the args are what a failing test needs to see.
// Do not point them at a database holding real users' data.
package skiplocktest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/store"
)

// NewSchema creates a fresh schema with a random name in pool's database,
// migrates skiplock into it and returns its name. The schema is dropped when
// the test ends, so tests using their own schemas run in parallel without
// seeing each other's jobs.
func NewSchema(tb testing.TB, pool *pgxpool.Pool) string {
	tb.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "skiplocktest_" + hex.EncodeToString(b)
	if _, err := skiplock.Migrate(tb.Context(), pool, schema); err != nil {
		tb.Fatalf("skiplocktest: migrate schema %s: %v", schema, err)
		return ""
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := store.New(schema).DropSchema(ctx, pool); err != nil {
			tb.Logf("skiplocktest: drop schema %s: %v", schema, err)
		}
	})
	return schema
}

// NewClient returns a client over pool for one test. When cfg.Schema is
// empty it gets a fresh schema from NewSchema. The client is stopped (with
// StopAndCancel, in case the test started it) when the test ends, before its
// schema is dropped.
func NewClient(tb testing.TB, pool *pgxpool.Pool, cfg skiplock.Config) *skiplock.Client {
	tb.Helper()
	if cfg.Schema == "" {
		cfg.Schema = NewSchema(tb, pool)
	}
	c, err := skiplock.NewClient(pool, cfg)
	if err != nil {
		tb.Fatalf("skiplocktest: NewClient: %v", err)
		return nil
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.StopAndCancel(ctx); err != nil {
			tb.Logf("skiplocktest: stop client: %v", err)
		}
	})
	return c
}

// Drain runs due jobs through c's registered handlers in the calling
// goroutine (see skiplock.Client.Drain) and returns what became of them. It
// fails the test if the drain itself fails; jobs whose handlers fail are
// reported in the result, not as test failures.
func Drain(tb testing.TB, c *skiplock.Client, opts skiplock.DrainOptions) skiplock.DrainResult {
	tb.Helper()
	res, err := c.Drain(tb.Context(), opts)
	if err != nil {
		tb.Fatalf("skiplocktest: Drain: %v", err)
	}
	return res
}

// RunOne runs exactly one due job of kind (from any queue) through its
// registered handler and returns what became of it. It fails the test when
// no job of kind is due.
func RunOne(tb testing.TB, c *skiplock.Client, kind string) skiplock.DrainedJob {
	tb.Helper()
	res, err := c.Drain(tb.Context(), skiplock.DrainOptions{Kinds: []string{kind}, Limit: 1})
	if err != nil {
		tb.Fatalf("skiplocktest: RunOne(%q): %v", kind, err)
		return skiplock.DrainedJob{}
	}
	if len(res.Jobs) == 0 {
		tb.Fatalf("skiplocktest: RunOne(%q): no job of kind %q is due", kind, kind)
		return skiplock.DrainedJob{}
	}
	return res.Jobs[0]
}
