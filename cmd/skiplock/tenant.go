package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/migrations"
)

func newTenantCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tenant",
		Short: "Work on one tenant's jobs across databases (move)",
	}
	cmd.AddCommand(newTenantMoveCmd(g))
	return cmd
}

func newTenantMoveCmd(g *globals) *cobra.Command {
	var tenant, fromURL, toURL string
	var batch int
	cmd := &cobra.Command{
		Use:   "move --tenant T --from URL --to URL",
		Short: "Move a tenant's ready and scheduled jobs to another database, losing and doubling none",
		Long: `Moves the tenant's ready and scheduled jobs from the --from database to the --to
database (each with its own migrated skiplock schema, --schema in both), in batches of
--batch: each batch is locked in the source (no worker claims it), inserted held in the
target and committed there, deleted in the source and committed there, then released in
the target. At every moment a job is runnable in exactly one database; it keeps its
attempts, budget, priority, run_at, unique key, entity and metadata, and gets a new id.

If the move stops (a crash, Ctrl-C, a database down), run the same command again: it
settles what was left half-moved first and loses or doubles no job. Route the tenant's new
enqueues to the target first (docs/scaling.md §4). Running jobs, workflow tasks and dead
letters stay in the source and are counted; a job whose queue and unique key are live in
the target already is merged into that one.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case tenant == "":
				return usageError("--tenant: required")
			case fromURL == "":
				return usageError("--from: required (the source database's URL)")
			case toURL == "":
				return usageError("--to: required (the target database's URL)")
			case batch < 1 || batch > 10000:
				return usageError("--batch: must be between 1 and 10000")
			case fromURL == toURL:
				return usageError("--to: the same URL as --from")
			}
			ctx := cmd.Context()
			from, err := connectTo(ctx, fromURL, "--from", 2, nil)
			if err != nil {
				return err
			}
			defer from.Close()
			to, err := connectTo(ctx, toURL, "--to", 2, nil)
			if err != nil {
				return err
			}
			defer to.Close()
			for _, db := range []struct {
				flag string
				pool *pgxpool.Pool
			}{{"--from", from}, {"--to", to}} {
				if err := g.requireMigrated(ctx, db.pool, db.flag); err != nil {
					return err
				}
			}
			res, err := skiplock.TenantMove(ctx, from, to, skiplock.TenantMoveOptions{Tenant: tenant, Schema: g.schema, BatchSize: batch})
			var fe *skiplock.FieldError
			if errors.As(err, &fe) && fe.Field == "to" {
				return usageError("--to: %s", fe.Message)
			}
			if err != nil {
				return fmt.Errorf("%w (run the same command again: a re-run finishes the move and loses or doubles no job)", err)
			}
			if g.jsonOut {
				return printJSON(cmd.OutOrStdout(), res)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "moved %d job(s) of tenant %q from %s to %s in %d batch(es)\n", res.Moved, tenant,
				databaseLabel(from), databaseLabel(to), res.Batches)
			if res.Merged > 0 {
				fmt.Fprintf(w, "merged %d job(s) into live jobs with the same queue and unique key in the target\n", res.Merged)
			}
			if res.Recovered > 0 || res.Discarded > 0 {
				fmt.Fprintf(w, "an interrupted move: %d job(s) released in the target, %d held copies discarded (their source job ran in the source)\n",
					res.Recovered, res.Discarded)
			}
			if res.LeftRunning+res.LeftWorkflowTasks+res.LeftDead > 0 {
				fmt.Fprintf(w, "left in the source: %d running (run the move again once they finish, for any retry), %d workflow task(s), %d dead letter(s)\n",
					res.LeftRunning, res.LeftWorkflowTasks, res.LeftDead)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&tenant, "tenant", "", "the tenant whose jobs move (required)")
	fl.StringVar(&fromURL, "from", "", "the source database's URL (required)")
	fl.StringVar(&toURL, "to", "", "the target database's URL (required)")
	fl.IntVar(&batch, "batch", 500, "jobs per batch (one transaction in each database)")
	g.addJSON(cmd)
	return cmd
}

// requireMigrated refuses a database whose skiplock schema has migrations
// pending (a move needs migration 012's tables in both).
func (g *globals) requireMigrated(ctx context.Context, pool *pgxpool.Pool, flag string) error {
	st, err := migrations.StatusOf(ctx, pool, g.schema)
	if err != nil {
		return fmt.Errorf("%s: %w", flag, err)
	}
	pending := 0
	for _, s := range st {
		if s.AppliedAt == nil {
			pending++
		}
	}
	if pending > 0 {
		return fmt.Errorf("%s: schema %s has %d migration(s) pending: run skiplock migrate up on that database first", flag, g.schema, pending)
	}
	return nil
}
