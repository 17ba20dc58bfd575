package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"

	"github.com/skiplock/skiplock/internal/migrations"
)

func newMigrateCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "migrate", Short: "Apply, revert, inspect or export skiplock's schema migrations"}
	var target int
	up := &cobra.Command{
		Use:   "up",
		Short: "Apply pending migrations (a no-op when current; concurrent runs serialize)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := migrations.CheckUpTarget(target); err != nil {
				return usageError("--to: %v", err)
			}
			pool, err := g.connect(cmd.Context(), 2)
			if err != nil {
				return err
			}
			defer pool.Close()
			var ran []int
			err = pgx.BeginFunc(cmd.Context(), pool, func(tx pgx.Tx) error {
				var err error
				ran, err = migrations.UpTx(cmd.Context(), tx, g.schema, target)
				return err
			})
			if err != nil {
				return explainUp(err)
			}
			if g.jsonOut {
				return printJSON(cmd.OutOrStdout(), map[string]any{"schema": g.schema, "applied": nonNil(ran)})
			}
			if len(ran) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "schema %s is current (version %d)\n", g.schema, migrations.Latest())
			}
			for _, v := range ran {
				fmt.Fprintf(cmd.OutOrStdout(), "applied %03d\n", v)
			}
			return nil
		},
	}
	up.Flags().IntVar(&target, "to", 0, fmt.Sprintf("stop at this version (default latest); below the latest only 1 to %d: "+
		"this binary carries the latest version's function bodies, so a later version is reached by migrate down",
		migrations.FunctionFilesSince-1))
	g.addJSON(up)

	var downTo int
	var yes bool
	down := &cobra.Command{
		Use:   "down",
		Short: "Revert migrations down to --to (0 removes skiplock's schema and its data)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if downTo == 0 && !yes {
				return usageError("migrate down --to 0 drops every job; add --yes to confirm")
			}
			pool, err := g.connect(cmd.Context(), 2)
			if err != nil {
				return err
			}
			defer pool.Close()
			var ran []int
			err = pgx.BeginFunc(cmd.Context(), pool, func(tx pgx.Tx) error {
				var err error
				ran, err = migrations.DownTx(cmd.Context(), tx, g.schema, downTo)
				return err
			})
			if err != nil {
				return err
			}
			if g.jsonOut {
				return printJSON(cmd.OutOrStdout(), map[string]any{"schema": g.schema, "reverted": nonNil(ran)})
			}
			for _, v := range ran {
				fmt.Fprintf(cmd.OutOrStdout(), "reverted %03d\n", v)
			}
			return nil
		},
	}
	down.Flags().IntVar(&downTo, "to", 0, "target version")
	down.Flags().BoolVar(&yes, "yes", false, "confirm a destructive revert")
	g.addJSON(down)

	var check bool
	status := &cobra.Command{
		Use:   "status",
		Short: "List migrations and whether each is applied (--check exits 3 when any is pending)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pool, err := g.connect(cmd.Context(), 2)
			if err != nil {
				return err
			}
			defer pool.Close()
			st, err := migrations.StatusOf(cmd.Context(), pool, g.schema)
			if err != nil {
				return err
			}
			pending := 0
			type row struct {
				Version   int        `json:"version"`
				Name      string     `json:"name"`
				AppliedAt *time.Time `json:"applied_at"`
			}
			rows := make([]row, 0, len(st))
			for _, s := range st {
				if s.AppliedAt == nil {
					pending++
				}
				rows = append(rows, row{s.Version, s.Name, s.AppliedAt})
			}
			if g.jsonOut {
				if err := printJSON(cmd.OutOrStdout(), map[string]any{"schema": g.schema, "migrations": rows, "pending": pending}); err != nil {
					return err
				}
			} else {
				for _, r := range rows {
					state := "pending"
					if r.AppliedAt != nil {
						state = "applied " + r.AppliedAt.UTC().Format(time.RFC3339)
					}
					fmt.Fprintf(cmd.OutOrStdout(), "%03d_%-20s %s\n", r.Version, r.Name, state)
				}
			}
			if check && pending > 0 {
				return checkFailed(fmt.Errorf("%d migration(s) pending", pending))
			}
			return nil
		},
	}
	status.Flags().BoolVar(&check, "check", false, "exit 3 if any migration is pending")
	g.addJSON(status)

	var downSQL bool
	var from, to int
	sqlCmd := &cobra.Command{
		Use:   "sql",
		Short: "Print migrations as plain SQL for your own migration tool",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := migrations.SQL(g.schema, !downSQL, from, to)
			if errors.Is(err, migrations.ErrNoFunctionsForTarget) {
				return usageError("--to: %v", err)
			}
			if err != nil {
				return usageError("%v", err)
			}
			_, err = fmt.Fprint(cmd.OutOrStdout(), s)
			return err
		},
	}
	sqlCmd.Flags().BoolVar(&downSQL, "down", false, "print the down migrations (newest first)")
	sqlCmd.Flags().IntVar(&from, "from", 1, "first version")
	sqlCmd.Flags().IntVar(&to, "to", 0, fmt.Sprintf("last version (default latest); an up script below the latest stops at 1 to %d, as migrate up --to",
		migrations.FunctionFilesSince-1))

	cmd.AddCommand(up, down, status, sqlCmd)
	return cmd
}

// warnNotMigrated logs once that the schema lacks migrations, for the
// long-running commands: they keep retrying (a deploy may migrate while
// workers start), and their retries would only say "relation does not exist".
func (g *globals) warnNotMigrated(ctx context.Context, db migrations.Executor, log *slog.Logger) {
	st, err := migrations.StatusOf(ctx, db, g.schema)
	if err != nil {
		return // the command's own errors say what is wrong with the connection
	}
	pending := 0
	for _, s := range st {
		if s.AppliedAt == nil {
			pending++
		}
	}
	if pending > 0 {
		log.Warn("skiplock: schema is not fully migrated; retrying until it is", "schema", g.schema,
			"pending", pending, "fix", "skiplock migrate up")
	}
}

// explainUp adds the way out to the error of an up that found skiplock's
// tables already there but not their versions: the schema was applied by
// another tool from an export that did not record them.
func explainUp(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42P07" {
		return fmt.Errorf("%w: the schema holds skiplock's tables without their recorded versions "+
			"(applied by your own tool from an older `skiplock migrate sql`?): record the versions it holds, "+
			"see docs/migrations.md", err)
	}
	return err
}

func nonNil(v []int) []int {
	if v == nil {
		return []int{}
	}
	return v
}
