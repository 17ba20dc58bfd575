package skiplock_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock"
)

// exampleClient is the examples' setup: a client on a fresh skiplock schema
// in the test database (TEST_DATABASE_URL, else PostgreSQL on
// 127.0.0.1:5432), and a func that drops the schema and closes the pool.
func exampleClient(cfg skiplock.Config) (*skiplock.Client, func()) {
	ctx := context.Background()
	url := os.Getenv("TEST_DATABASE_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable&connect_timeout=2"
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		panic(err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	cfg.Schema = "skiplock_example_" + hex.EncodeToString(b)
	if _, err := skiplock.Migrate(ctx, pool, cfg.Schema); err != nil {
		panic(fmt.Sprintf("the examples need PostgreSQL (set TEST_DATABASE_URL): %v", err))
	}
	c, err := skiplock.NewClient(pool, cfg)
	if err != nil {
		panic(err)
	}
	return c, func() {
		_ = c.Stop(ctx)
		_, _ = pool.Exec(ctx, "DROP SCHEMA "+cfg.Schema+" CASCADE")
		pool.Close()
	}
}

// A job commits in the same transaction as the row that caused it: here an
// order and the job that confirms it exist together or not at all.
func ExampleClient_EnqueueTx() {
	c, done := exampleClient(skiplock.Config{})
	defer done()
	ctx := context.Background()
	pool := c.Pool()
	schema := c.Config().Schema
	if _, err := pool.Exec(ctx, "CREATE TABLE "+schema+".orders (id bigint PRIMARY KEY)"); err != nil {
		panic(err)
	}

	type confirm struct {
		OrderID int64 `json:"order_id"`
	}
	placeOrder := func(id int64, commit bool) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			panic(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit
		if _, err := tx.Exec(ctx, "INSERT INTO "+schema+".orders VALUES ($1)", id); err != nil {
			panic(err)
		}
		if _, err := c.EnqueueTx(ctx, tx, skiplock.EnqueueParams{Kind: "order.confirm", Payload: confirm{OrderID: id}}); err != nil {
			panic(err)
		}
		if commit {
			if err := tx.Commit(ctx); err != nil {
				panic(err)
			}
		}
	}
	placeOrder(1, true)
	placeOrder(2, false) // rolled back: no order, no job

	_ = skiplock.Handle(c, "order.confirm", func(ctx context.Context, j *skiplock.Job[confirm]) error {
		fmt.Println("confirming order", j.Args.OrderID)
		return nil
	})
	res, err := c.Drain(ctx, skiplock.DrainOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Println("completed:", res.Completed)
	// Output:
	// confirming order 1
	// completed: 1
}

// Handle registers a typed handler per kind. Return nil to complete the job,
// an error to retry it with backoff, or Snooze, Discard or Cancel.
func ExampleHandle() {
	c, done := exampleClient(skiplock.Config{})
	defer done()
	ctx := context.Background()

	type welcome struct {
		Email string `json:"email"`
	}
	err := skiplock.Handle(c, "email.welcome", func(ctx context.Context, j *skiplock.Job[welcome]) error {
		if j.Args.Email == "" {
			return skiplock.Discard(errors.New("no address")) // retrying will not help
		}
		fmt.Printf("attempt %d: welcome %s\n", j.Attempt, j.Args.Email)
		return nil
	}, skiplock.WithTimeout(30*time.Second))
	if err != nil {
		panic(err)
	}
	for _, email := range []string{"ada@example.com", ""} {
		if _, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "email.welcome", Payload: welcome{Email: email}}); err != nil {
			panic(err)
		}
	}
	// A service calls c.Start(ctx) and, at shutdown, c.Stop(ctx); this
	// example runs the jobs synchronously instead.
	res, err := c.Drain(ctx, skiplock.DrainOptions{})
	if err != nil {
		panic(err)
	}
	for _, j := range res.Jobs {
		fmt.Println(strings.TrimSpace(fmt.Sprintf("%s %s %s", j.Kind, j.Outcome, j.Reason)))
	}
	// Output:
	// attempt 1: welcome ada@example.com
	// email.welcome completed
	// email.welcome dead_lettered discarded
}

// CompleteTx completes the job in the handler's own transaction: the ledger
// row and the completion commit together, so the payment is recorded
// exactly once however often the job is delivered.
func ExampleCompleteTx() {
	c, done := exampleClient(skiplock.Config{})
	defer done()
	ctx := context.Background()
	schema := c.Config().Schema
	if _, err := c.Pool().Exec(ctx, "CREATE TABLE "+schema+".ledger (job_id bigint, cents int)"); err != nil {
		panic(err)
	}

	type payment struct {
		Cents int `json:"cents"`
	}
	_ = skiplock.Handle(c, "ledger.record", func(ctx context.Context, j *skiplock.Job[payment]) error {
		tx, err := c.Pool().Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit
		if _, err := tx.Exec(ctx, "INSERT INTO "+schema+".ledger VALUES ($1, $2)", j.ID, j.Args.Cents); err != nil {
			return err
		}
		// Fenced by the lease: if another worker owns the job now, this
		// fails with ErrLeaseLost and the rollback discards the insert.
		if err := skiplock.CompleteTx(ctx, c, tx, j); err != nil {
			return err
		}
		return tx.Commit(ctx)
	})
	if _, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "ledger.record", Payload: payment{Cents: 1250}}); err != nil {
		panic(err)
	}
	if _, err := c.Drain(ctx, skiplock.DrainOptions{}); err != nil {
		panic(err)
	}
	var rows, cents int
	if err := c.Pool().QueryRow(ctx, "SELECT count(*), sum(cents) FROM "+schema+".ledger").Scan(&rows, &cents); err != nil {
		panic(err)
	}
	fmt.Printf("ledger rows: %d, total: %d cents\n", rows, cents)
	// Output:
	// ledger rows: 1, total: 1250 cents
}

// Snooze reschedules a job without spending an attempt: here, until a
// rate-limited API accepts calls again.
func ExampleSnooze() {
	c, done := exampleClient(skiplock.Config{})
	defer done()
	ctx := context.Background()

	_ = skiplock.Handle(c, "api.sync", func(ctx context.Context, j *skiplock.Job[struct{}]) error {
		return skiplock.Snooze(time.Minute) // say the API answered 429
	})
	r, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "api.sync"})
	if err != nil {
		panic(err)
	}
	res, err := c.Drain(ctx, skiplock.DrainOptions{})
	if err != nil {
		panic(err)
	}
	var attempts int
	var inFuture bool
	err = c.Pool().QueryRow(ctx, "SELECT attempts, run_at > now() + interval '50 seconds' FROM "+c.Config().Schema+".jobs WHERE id = $1",
		r.ID).Scan(&attempts, &inFuture)
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Jobs[0].Outcome, "attempts spent:", attempts, "runs in about a minute:", inFuture)
	// Output:
	// snoozed attempts spent: 0 runs in about a minute: true
}

// A recurring job: every started client runs the scheduler, and each fire
// time is enqueued exactly once however many processes run it.
func ExampleClient_ScheduleAdd() {
	c, done := exampleClient(skiplock.Config{})
	defer done()
	ctx := context.Background()

	err := c.ScheduleAdd(ctx, skiplock.Schedule{
		Name: "nightly-report", Cron: "30 2 * * *", Timezone: "Europe/Paris",
		Queue: "reports", Kind: "report.build", Payload: map[string]string{"format": "pdf"},
	})
	if err != nil {
		panic(err)
	}
	ss, err := c.ScheduleList(ctx)
	if err != nil {
		panic(err)
	}
	for _, s := range ss {
		fmt.Println(s.Name, s.Spec(), s.Timezone, s.Queue, s.Kind)
	}
	// Output:
	// nightly-report 30 2 * * * Europe/Paris reports report.build
}

// The "enqueue the next run at the end of this one" pattern: the handler's
// writes, its completion and its successor commit together.
func ExampleEnqueueNext() {
	c, done := exampleClient(skiplock.Config{})
	defer done()
	ctx := context.Background()

	runs := 0
	_ = skiplock.Handle(c, "inbox.poll", func(ctx context.Context, j *skiplock.Job[struct{}]) error {
		runs++
		fmt.Println("polling the inbox, run", runs)
		tx, err := c.Pool().Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit
		if runs < 3 {
			if _, err := skiplock.EnqueueNext(ctx, c, tx, j, 0, "main"); err != nil {
				return err
			}
		} else if err := skiplock.CompleteTx(ctx, c, tx, j); err != nil { // end of the chain
			return err
		}
		return tx.Commit(ctx)
	})
	// Every process may seed the chain at start-up: the unique key keeps one.
	for range 2 {
		_, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "inbox.poll", UniqueKey: skiplock.NextRunKey("inbox.poll", "main")})
		if err != nil {
			panic(err)
		}
	}
	if _, err := c.Drain(ctx, skiplock.DrainOptions{}); err != nil {
		panic(err)
	}
	// Output:
	// polling the inbox, run 1
	// polling the inbox, run 2
	// polling the inbox, run 3
}

// The fencing token in use: an external system that remembers the highest
// token it has seen per job refuses writes from a worker whose lease has
// since passed to another (see docs/fencing.md). The job id is the
// idempotency key: it stays the same across retries.
func ExampleJob_fencingToken() {
	c, done := exampleClient(skiplock.Config{})
	defer done()
	ctx := context.Background()

	// A stand-in for the external service: compare-and-set on the token.
	var mu sync.Mutex
	highest := map[int64]int64{}
	applied := map[int64]string{}
	write := func(jobID, token int64, value string) error {
		mu.Lock()
		defer mu.Unlock()
		if token < highest[jobID] {
			return errors.New("stale fencing token")
		}
		highest[jobID] = token
		applied[jobID] = value // idempotent per job id: a retry overwrites
		return nil
	}

	var stale *skiplock.Job[struct{}]
	_ = skiplock.Handle(c, "crm.update", func(ctx context.Context, j *skiplock.Job[struct{}]) error {
		if j.Attempt == 1 {
			stale = j // this worker will freeze; its lease will pass to another
			return errors.New("frozen")
		}
		return write(j.ID, j.LeaseToken, fmt.Sprintf("attempt %d", j.Attempt))
	}, skiplock.WithBackoff(func(int) time.Duration { return 0 }))
	r, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "crm.update"})
	if err != nil {
		panic(err)
	}
	if _, err := c.Drain(ctx, skiplock.DrainOptions{}); err != nil {
		panic(err)
	}
	// The frozen worker wakes up and tries its write with its old token.
	fmt.Println("stale write:", write(stale.ID, stale.LeaseToken, "attempt 1"))
	fmt.Println("applied:", applied[r.ID])
	// Output:
	// stale write: stale fencing token
	// applied: attempt 2
}

// Drain runs due jobs synchronously through the registered handlers, without
// Start: the way to run jobs in tests (see package skiplocktest).
func ExampleClient_Drain() {
	c, done := exampleClient(skiplock.Config{})
	defer done()
	ctx := context.Background()

	_ = skiplock.Handle(c, "user.signup", func(ctx context.Context, j *skiplock.Job[struct{}]) error {
		// Jobs enqueued by a handler run in the same Drain.
		_, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "email.welcome"})
		return err
	})
	_ = skiplock.Handle(c, "email.welcome", func(ctx context.Context, j *skiplock.Job[struct{}]) error {
		return errors.New("smtp: connection refused")
	})
	if _, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "user.signup"}); err != nil {
		panic(err)
	}
	res, err := c.Drain(ctx, skiplock.DrainOptions{})
	if err != nil {
		panic(err)
	}
	for _, j := range res.Jobs {
		fmt.Println(strings.TrimSpace(fmt.Sprintf("%s %s %s", j.Kind, j.Outcome, j.Error)))
	}
	// Output:
	// user.signup completed
	// email.welcome retried smtp: connection refused
}

// WelcomeArgs names its kind, so the producer and the handler cannot
// disagree about it: both refer to the type.
type WelcomeArgs struct {
	UserID int64 `json:"user_id"`
}

// Kind is the job kind of every WelcomeArgs.
func (WelcomeArgs) Kind() string { return "welcome" }

// Typed kinds: HandleArgs registers the handler under the kind its args
// type names, and a payload of that type needs no Kind when enqueued.
// JobGet then answers what happened to the job.
func ExampleHandleArgs() {
	c, done := exampleClient(skiplock.Config{PollInterval: 20 * time.Millisecond})
	defer done()
	ctx := context.Background()

	sent := make(chan int64, 1)
	if err := skiplock.HandleArgs(c, func(ctx context.Context, j *skiplock.Job[WelcomeArgs]) error {
		sent <- j.Args.UserID
		return nil
	}); err != nil {
		panic(err)
	}
	res, err := c.Enqueue(ctx, skiplock.EnqueueParams{Payload: WelcomeArgs{UserID: 4711}})
	if err != nil {
		panic(err)
	}
	if err := c.Start(ctx); err != nil {
		panic(err)
	}
	fmt.Println("welcomed user", <-sent)

	for {
		job, err := c.JobGet(ctx, res.ID)
		if err != nil {
			panic(err)
		}
		if job.State == skiplock.JobStateCompleted {
			fmt.Println(job.Kind, job.State, "after", job.Attempt, "attempt(s)")
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Output:
	// welcomed user 4711
	// welcome completed after 1 attempt(s)
}
