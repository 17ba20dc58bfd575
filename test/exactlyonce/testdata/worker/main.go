// Command worker is the exactly-once test's worker process: a skiplock
// client whose handler writes one business row and completes its job with
// CompleteTx in the same transaction, pausing in between so that SIGKILL and
// SIGSTOP land mid-transaction. The test kills, freezes and restarts it.
//
// Environment: EO_DATABASE_URL, EO_WORKER_ID.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock"
)

type args struct {
	N int `json:"n"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	cfg, err := pgxpool.ParseConfig(os.Getenv("EO_DATABASE_URL"))
	if err != nil {
		return err
	}
	cfg.MaxConns = 12
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := skiplock.NewClient(pool, skiplock.Config{
		WorkerID:      os.Getenv("EO_WORKER_ID"),
		LeaseDuration: time.Second, HeartbeatInterval: 250 * time.Millisecond,
		PollInterval: 50 * time.Millisecond, ReaperInterval: 500 * time.Millisecond,
		Pools:  []skiplock.WorkerPool{{Concurrency: 3}},
		Logger: logger,
	})
	if err != nil {
		return err
	}
	err = skiplock.Handle(c, "eo.write", func(ctx context.Context, j *skiplock.Job[args]) (err error) {
		committing := false
		defer func() {
			// Evidence for the test that a lease was lost and its stale
			// completion refused: CompleteTx said so, or the heartbeat
			// found the lease gone first and cancelled the handler before
			// the commit. (A commit cut off by that cancellation may have
			// committed: the heartbeat then saw the completed job as gone.)
			if err != nil && !committing &&
				(errors.Is(err, skiplock.ErrLeaseLost) || errors.Is(context.Cause(ctx), skiplock.ErrLeaseLost)) {
				_, _ = pool.Exec(context.WithoutCancel(ctx), "INSERT INTO lease_lost (n, worker, token) VALUES ($1, $2, $3)",
					j.Args.N, j.WorkerID, j.LeaseToken)
			}
		}()
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
		if _, err := tx.Exec(ctx, "INSERT INTO effects (n, job_id, worker, token) VALUES ($1, $2, $3, $4)",
			j.Args.N, j.ID, j.WorkerID, j.LeaseToken); err != nil {
			return err
		}
		time.Sleep(time.Duration(20+rand.IntN(80)) * time.Millisecond) // the window for SIGKILL and SIGSTOP
		if err := skiplock.CompleteTx(ctx, c, tx, j); err != nil {
			return err // the deferred Rollback undoes the business row
		}
		committing = true
		return tx.Commit(ctx)
	})
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	return c.Stop(context.Background())
}
