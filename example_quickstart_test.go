package skiplock_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock"
)

// The README's Go quick start, compiled here so it cannot drift from the
// API: TestDocsCompile checks the README shows exactly the code between the
// docs: markers.

// docs:readme-quickstart
type Welcome struct {
	UserID int64 `json:"user_id"`
}

func run(ctx context.Context) error {
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := skiplock.Migrate(ctx, pool, "skiplock"); err != nil { // or: skiplock migrate up
		return err
	}

	client, err := skiplock.NewClient(pool, skiplock.Config{
		Pools: []skiplock.WorkerPool{
			{Queues: []string{"default"}, Concurrency: 20},
			{Name: "backfill", Queues: []string{"bulk"}, Concurrency: 4, TenantCap: 5},
		},
	})
	if err != nil {
		return err
	}
	err = skiplock.Handle(client, "welcome", func(ctx context.Context, j *skiplock.Job[Welcome]) error {
		return sendWelcome(ctx, j.Args.UserID)
	})
	if err != nil {
		return err
	}

	// In your own transaction: the job exists if and only if it commits.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO users (email) VALUES ($1)`, "ann@example.com"); err != nil {
			return err
		}
		_, err := client.EnqueueTx(ctx, tx, skiplock.EnqueueParams{Kind: "welcome", Payload: Welcome{UserID: 7}})
		return err
	})
	if err != nil {
		return err
	}

	if err := client.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()                             // until SIGTERM
	return client.Stop(context.Background()) // drains: running jobs get Config.ShutdownTimeout
}

// docs:end

func sendWelcome(context.Context, int64) error { return nil }

// Example_quickStart is the README's program (compiled, not run: it serves
// until SIGTERM).
func Example_quickStart() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		log.Fatal(err)
	}
}
