package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/importer"
)

// importOptions are the flags both import commands share.
type importOptions struct {
	queues []string
	batch  int
	dryRun bool
}

func (o *importOptions) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringArrayVar(&o.queues, "queue", nil, "import only this queue (repeatable)")
	f.IntVar(&o.batch, "batch", importer.DefaultBatchSize, "jobs per transaction")
	f.BoolVar(&o.dryRun, "dry-run", false, "count what would move, by state and kind, and write nothing")
}

func (o *importOptions) check() error {
	if o.batch < 1 || o.batch > 100000 {
		return usageError("--batch: must be between 1 and 100000")
	}
	return nil
}

func newImportCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "import",
		Short: "Move the jobs waiting in River or asynq into skiplock, each exactly once",
	}
	cmd.AddCommand(newImportRiverCmd(g), newImportAsynqCmd(g))
	return cmd
}

func newImportRiverCmd(g *globals) *cobra.Command {
	var (
		o              importOptions
		fromURL        string
		fromSchema     string
		kinds          []string
		includeRunning bool
	)
	cmd := &cobra.Command{
		Use:   "river [--from-url URL] [--from-schema S] [--dry-run]",
		Short: "Move River's available, scheduled and retryable jobs into skiplock",
		Long: `Moves River's waiting jobs (available, scheduled, retryable) into skiplock, in
batches. In skiplock's own database each batch is locked, enqueued and deleted
from river_job in one transaction: a crash or a re-run moves every job exactly
once. From another database (--from-url) skiplock's transaction commits first,
inside River's, and each job carries a unique key so a re-run enqueues nothing
twice while it is in flight. Running jobs stay unless --include-running, which
refuses while a River client holds the leadership. See docs/coming-from-river.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if err := o.check(); err != nil {
				return err
			}
			dest, client, err := g.importTarget(ctx, cmd)
			if err != nil {
				return err
			}
			defer dest.Close()
			src := dest
			if fromURL != "" {
				if src, err = connectTo(ctx, fromURL, "--from-url", 4, nil); err != nil {
					return err
				}
				defer src.Close()
			}
			opts := importer.RiverOptions{Source: src, Dest: dest, Client: client, Schema: fromSchema, Kinds: kinds,
				Queues: o.queues, IncludeRunning: includeRunning, BatchSize: o.batch, DryRun: true}
			// The dry run's count is the progress bar's total.
			sum, err := importer.River(ctx, opts)
			if err == nil && !o.dryRun {
				bar := g.newProgress(cmd.ErrOrStderr(), int(sum.MovedTotal), "import river")
				opts.DryRun, opts.Progress = false, bar.Add
				sum, err = importer.River(ctx, opts)
				bar.Finish()
			}
			if errors.Is(err, importer.ErrRiverAlive) {
				return checkFailed(fmt.Errorf("--include-running: %w; stop River's workers first", err))
			}
			if err != nil {
				return fmt.Errorf("import river (moved %d jobs before the error; a re-run moves the rest): %w", sum.MovedTotal, err)
			}
			return g.printImport(cmd.OutOrStdout(), sum)
		},
	}
	o.flags(cmd)
	f := cmd.Flags()
	f.StringVar(&fromURL, "from-url", "", "River's database, when it is not skiplock's (default: skiplock's)")
	f.StringVar(&fromSchema, "from-schema", "public", "schema holding River's tables")
	f.StringArrayVar(&kinds, "kind", nil, "import only this kind (repeatable)")
	f.BoolVar(&includeRunning, "include-running", false, "move running jobs too; refused while a River client holds the leadership")
	g.addJSON(cmd)
	return cmd
}

func newImportAsynqCmd(g *globals) *cobra.Command {
	var (
		o        importOptions
		redisURL string
		archived bool
	)
	cmd := &cobra.Command{
		Use:   "asynq --redis-url URL [--dry-run]",
		Short: "Move asynq's pending, scheduled and retry tasks from Redis into skiplock",
		Long: `Moves asynq's waiting tasks (pending, scheduled, retry; archived with
--archived) into skiplock, in batches: each batch is taken out of asynq's reach
in one Redis script, enqueued in one PostgreSQL transaction (whose id is kept
with the held tasks), then removed from Redis. A re-run settles what a crash
left held: committed batches are only removed, the others imported again. The
task id is the job's unique key. A payload that is not a JSON object arrives as
{"$asynq_bytes": "<base64>"}. See docs/coming-from-asynq.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if err := o.check(); err != nil {
				return err
			}
			if redisURL == "" {
				return usageError("--redis-url: required (e.g. redis://127.0.0.1:6379/0)")
			}
			ropts, err := redis.ParseURL(redisURL)
			if err != nil {
				return usageError("--redis-url: cannot parse the URL")
			}
			rdb := redis.NewClient(ropts)
			defer rdb.Close()
			if err := rdb.Ping(ctx).Err(); err != nil {
				return fmt.Errorf("connect to redis at %s: %w", ropts.Addr, err)
			}
			dest, client, err := g.importTarget(ctx, cmd)
			if err != nil {
				return err
			}
			defer dest.Close()
			opts := importer.AsynqOptions{Redis: rdb, Dest: dest, Client: client, Queues: o.queues, Archived: archived,
				BatchSize: o.batch, DryRun: true}
			sum, err := importer.Asynq(ctx, opts)
			if err == nil && !o.dryRun {
				bar := g.newProgress(cmd.ErrOrStderr(), int(sum.MovedTotal), "import asynq")
				opts.DryRun, opts.Progress = false, bar.Add
				sum, err = importer.Asynq(ctx, opts)
				bar.Finish()
			}
			if err != nil {
				return fmt.Errorf("import asynq (moved %d tasks before the error; a re-run settles and moves the rest): %w", sum.MovedTotal, err)
			}
			return g.printImport(cmd.OutOrStdout(), sum)
		},
	}
	o.flags(cmd)
	f := cmd.Flags()
	f.StringVar(&redisURL, "redis-url", "", "asynq's Redis, e.g. redis://127.0.0.1:6379/0")
	f.BoolVar(&archived, "archived", false, "move archived tasks (retries exhausted) too")
	g.addJSON(cmd)
	return cmd
}

// importTarget connects to skiplock's database and makes the client the
// import enqueues through.
func (g *globals) importTarget(ctx context.Context, cmd *cobra.Command) (*pgxpool.Pool, *skiplock.Client, error) {
	pool, err := g.connect(ctx, 4)
	if err != nil {
		return nil, nil, err
	}
	c, err := skiplock.NewClient(pool, skiplock.Config{Schema: g.schema, Logger: g.logger(cmd.ErrOrStderr())})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, c, nil
}

// printImport writes the summary: JSON with --json, else a few lines.
func (g *globals) printImport(w io.Writer, s importer.Summary) error {
	if g.jsonOut {
		return printJSON(w, s)
	}
	verb := "moved"
	if s.DryRun {
		verb = "would move"
	}
	fmt.Fprintf(w, "%s %d jobs from %s", verb, s.MovedTotal, s.Source)
	if !s.DryRun {
		fmt.Fprintf(w, " in %.1fs (%.0f jobs/s, %d batches; source held %.1f ms per batch, at most %.1f ms)",
			s.Seconds, s.JobsPerS, s.Batches, s.LockMeanMS, s.LockMaxMS)
	}
	fmt.Fprintln(w)
	for _, state := range sortedKeys(s.Moved) {
		kinds := s.Moved[state]
		for _, kind := range sortedKeys(kinds) {
			fmt.Fprintf(w, "  %-10s %-40s %d\n", state, kind, kinds[kind])
		}
	}
	if s.Recovered > 0 {
		fmt.Fprintf(w, "settled %d jobs an interrupted run had left half-moved\n", s.Recovered)
	}
	if len(s.Left) > 0 {
		var parts []string
		for _, reason := range sortedKeys(s.Left) {
			parts = append(parts, fmt.Sprintf("%s %d", reason, s.Left[reason]))
		}
		fmt.Fprintf(w, "left in %s: %s\n", s.Source, strings.Join(parts, ", "))
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
