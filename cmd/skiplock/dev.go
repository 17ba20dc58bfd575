package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/devdb"
	"github.com/skiplock/skiplock/internal/health"
)

type devFlags struct {
	httpAddr  string
	rate      int
	keep      bool
	listenURL string
}

func newDevCmd(g *globals) *cobra.Command {
	var f devFlags
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Local playground: a throwaway PostgreSQL (unless one is configured), migrations, a demo workload, workers and the dashboard",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return g.runDev(cmd, f) },
	}
	cmd.Flags().StringVar(&f.httpAddr, "http-addr", "127.0.0.1:8080", "dashboard address")
	cmd.Flags().IntVar(&f.rate, "rate", 200, "demo jobs enqueued per second")
	cmd.Flags().BoolVar(&f.keep, "keep", false, "keep the throwaway cluster's data directory on exit")
	listenURLFlag(cmd, &f.listenURL)
	return cmd
}

func (g *globals) runDev(cmd *cobra.Command, f devFlags) error {
	if f.rate < 1 || f.rate > 100000 {
		return usageError("--rate: must be between 1 and 100000")
	}
	ctx, stop := g.notifyContext(context.WithoutCancel(cmd.Context()), os.Interrupt, syscall.SIGTERM)
	defer stop()
	stderr := cmd.ErrOrStderr()
	log := g.logger(stderr)

	throwaway := g.databaseURL() == ""
	if throwaway {
		g.say(stderr, "dev: no DATABASE_URL configured; starting a throwaway PostgreSQL cluster")
		cl, err := devdb.Start(ctx, devdb.Options{Logger: log})
		if err != nil {
			return fmt.Errorf("dev: %w (or set DATABASE_URL to use an existing server)", err)
		}
		defer func() {
			if f.keep {
				_ = cl.Stop(context.Background())
				g.say(stderr, "dev: cluster data kept in "+cl.Dir(), slog.String("dir", cl.Dir()))
				return
			}
			_ = cl.Remove()
		}()
		g.databaseURLs = []string{cl.URL("postgres")}
		g.say(stderr, "dev: PostgreSQL running: "+g.databaseURL(), slog.String("url", g.databaseURL()))
	}
	pool, err := g.connect(ctx, 20)
	if err != nil {
		return err
	}
	defer pool.Close()
	ran, err := skiplock.Migrate(ctx, pool, g.schema)
	if err != nil {
		return err
	}
	g.say(stderr, fmt.Sprintf("dev: schema %q migrated (%d applied)", g.schema, len(ran)),
		slog.String("schema", g.schema), slog.Int("applied", len(ran)))

	c, err := skiplock.NewClient(pool, skiplock.Config{
		Schema: g.schema, Logger: slog.New(devClientLog{g.loggerAt(stderr, slog.LevelWarn).Handler()}),
		ListenURL: g.listenURL(f.listenURL),
		Pools: []skiplock.WorkerPool{
			{Name: "interactive", Queues: []string{"default"}, Concurrency: 16},
			{Name: "bulk", Queues: []string{"bulk"}, Concurrency: 4, TenantCap: 5},
		},
	})
	if err != nil {
		return err
	}
	if err := registerDemoHandlers(c); err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Stop(sctx)
	}()
	stopServe, err := g.startDevDashboard(stderr, pool, f.httpAddr, throwaway, log)
	if err != nil {
		return err
	}
	defer stopServe()

	go produceDemo(ctx, c, f.rate, log)
	g.say(stderr, fmt.Sprintf("dev: demo workload running at ~%d jobs/s; Ctrl-C to stop", f.rate), slog.Int("rate", f.rate))
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	var last skiplock.Stats
	for {
		select {
		case <-ctx.Done():
			g.say(stderr, "dev: stopping")
			return nil
		case <-t.C:
			s := c.Stats()
			g.printDevProgress(cmd.OutOrStdout(), ctx, pool, s, last)
			last = s
		}
	}
}

// devClientLog keeps the demo's expected failures (retries) out of the way:
// the playground's client logs errors only, but for the one warning its
// user must see: workers poll because the URL leads
// to a pooler and no --listen-url was given.
type devClientLog struct{ slog.Handler }

func (h devClientLog) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError || strings.Contains(r.Message, "POLLING ONLY") {
		return h.Handler.Handle(ctx, r)
	}
	return nil
}

func (h devClientLog) WithAttrs(as []slog.Attr) slog.Handler {
	return devClientLog{h.Handler.WithAttrs(as)}
}

func (h devClientLog) WithGroup(name string) slog.Handler {
	return devClientLog{h.Handler.WithGroup(name)}
}

type demoArgs struct {
	User  int    `json:"user"`
	Email string `json:"email"` // PII: shown nowhere unless revealed in the dashboard
}

func registerDemoHandlers(c *skiplock.Client) error {
	sleep := func(ctx context.Context, lo, hi time.Duration) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(lo + time.Duration(rand.Int64N(int64(hi-lo)))):
			return nil
		}
	}
	err := errors.Join(
		skiplock.Handle(c, "email.send", func(ctx context.Context, j *skiplock.Job[demoArgs]) error {
			return sleep(ctx, 5*time.Millisecond, 40*time.Millisecond)
		}),
		skiplock.Handle(c, "webhook.deliver", func(ctx context.Context, j *skiplock.Job[demoArgs]) error {
			if err := sleep(ctx, 10*time.Millisecond, 80*time.Millisecond); err != nil {
				return err
			}
			if rand.IntN(10) == 0 {
				return fmt.Errorf("POST https://hooks.example.com/%d: 503 Service Unavailable", rand.IntN(1000))
			}
			return nil
		}),
		skiplock.Handle(c, "report.build", func(ctx context.Context, j *skiplock.Job[demoArgs]) error {
			if j.Attempt == 1 && rand.IntN(4) == 0 {
				return skiplock.Snooze(2 * time.Second) // waiting on data; does not spend an attempt
			}
			return sleep(ctx, 100*time.Millisecond, 400*time.Millisecond)
		}),
		skiplock.Handle(c, "carrier.sync", func(ctx context.Context, j *skiplock.Job[demoArgs]) error {
			if rand.IntN(200) == 0 {
				return skiplock.Discard(errors.New("carrier rejected tracking number format"))
			}
			return sleep(ctx, 20*time.Millisecond, 60*time.Millisecond)
		}),
	)
	return err
}

func produceDemo(ctx context.Context, c *skiplock.Client, rate int, log *slog.Logger) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	per := max(1, rate/10)
	n := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		batch := make([]skiplock.EnqueueParams, 0, per)
		for i := 0; i < per; i++ {
			n++
			args := demoArgs{User: n, Email: fmt.Sprintf("user%d@example.com", n)}
			p := skiplock.EnqueueParams{Kind: "email.send", Payload: args, MaxAttempts: 5}
			switch r := rand.IntN(10); {
			case r < 3:
				p.Kind = "webhook.deliver"
			case r < 4:
				p.Kind, p.Priority = "report.build", -10
			case r < 6:
				p.Queue, p.Kind, p.Tenant = "bulk", "carrier.sync", fmt.Sprintf("carrier-%d", rand.IntN(8))
				p.Entity = fmt.Sprintf("parcel-%d", rand.IntN(500))
			}
			batch = append(batch, p)
		}
		if _, err := c.EnqueueMany(ctx, batch); err != nil && ctx.Err() == nil {
			log.Warn("dev: enqueue failed", slog.String("error", err.Error()))
		}
	}
}

func (g *globals) printDevProgress(w io.Writer, ctx context.Context, pool *pgxpool.Pool, s, last skiplock.Stats) {
	n, _ := health.CountJobs(ctx, pool, g.schema)
	ready, running, dead := n.Ready, n.Running, n.Dead
	fmt.Fprintf(w, "completed %-8d (%5.0f/s)  failed %-6d  ready %-6d  running %-4d  dead %-5d  claim p99 %s\n",
		s.Completed, float64(s.Completed-last.Completed)/2, s.Failed, ready, running, dead, s.ClaimP99.Round(10*time.Microsecond))
}
