package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/health"
)

func newQueueCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "queue pause|resume|aging|weight|weights Q",
		Short: "Pause or resume a queue in every worker process, set its priority aging or its tenants' fair-share weights",
	}
	cmd.AddCommand(g.newQueuePauseCmd(true), g.newQueuePauseCmd(false), newQueueAgingCmd(g), newQueueWeightCmd(g), newQueueWeightsCmd(g))
	return cmd
}

func newQueueAgingCmd(g *globals) *cobra.Command {
	var after time.Duration
	var to int
	var off bool
	cmd := &cobra.Command{
		Use:   "aging QUEUE (--after DUR --to PRIORITY | --off)",
		Short: "Promote ready jobs that have waited too long, so higher priorities cannot starve them",
		Long: `Priority aging for one queue: a ready job that has been due for longer than --after is
promoted to priority --to (jobs at or above it keep theirs). Every running worker process
applies it every 10 seconds, at most 1,000 jobs per queue per pass, the longest-waiting first.`,
		Example: `  skiplock queue aging reports --after 10m --to 100
  skiplock queue aging reports --off`,
		Args: oneName("QUEUE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case off && (cmd.Flags().Changed("after") || cmd.Flags().Changed("to")):
				return usageError("--off: not with --after or --to")
			case !off && !cmd.Flags().Changed("after"):
				return usageError("--after: required (or --off)")
			case !off && !cmd.Flags().Changed("to"):
				return usageError("--to: required (or --off)")
			case off:
				after, to = 0, 0
			}
			c, closePool, err := g.clientForCLI(cmd)
			if err != nil {
				return err
			}
			defer closePool()
			if err := c.QueueAgingSet(cmd.Context(), args[0], after, to); err != nil {
				var fe *skiplock.FieldError
				if errors.As(err, &fe) {
					flag := "--" + fe.Field
					if fe.Field == "queue" {
						flag = "QUEUE"
					}
					return usageError("%s: %s", flag, fe.Message)
				}
				return err
			}
			if g.jsonOut {
				return printJSON(cmd.OutOrStdout(), map[string]any{"queue": args[0], "after_seconds": after.Seconds(), "to": to, "off": off})
			}
			if off {
				fmt.Fprintf(cmd.OutOrStdout(), "queue %s: aging off\n", args[0])
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "queue %s: jobs due for over %s are promoted to priority %d\n", args[0], after, to)
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&after, "after", 0, "promote jobs due for longer than this (at least 1s)")
	cmd.Flags().IntVar(&to, "to", 0, fmt.Sprintf("the priority they are promoted to (%d..%d)", skiplock.MinPriority, skiplock.MaxPriority))
	cmd.Flags().BoolVar(&off, "off", false, "turn aging off")
	g.addJSON(cmd)
	return cmd
}

func newQueueWeightCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "weight QUEUE TENANT WEIGHT",
		Short: "Give a tenant a fair-share weight in a queue (1, the default, removes it)",
		Long: `In worker pools with a tenant cap (round-robin fair share), a tenant of weight W takes W jobs
in each round where other tenants take one, and up to W times the cap of a batch. Weight 1 is
every tenant's default; at most 100. Stored in the database: every worker uses it from its
next claim.`,
		Example: `  skiplock queue weight sync carrier-a 5
  skiplock queue weight sync carrier-a 1    # back to the default`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 3 {
				return usageError("QUEUE TENANT WEIGHT: exactly three arguments expected, got %d", len(args))
			}
			weight, err := strconv.Atoi(args[2])
			if err != nil {
				return usageError("WEIGHT: not a whole number: %q", args[2])
			}
			c, closePool, err := g.clientForCLI(cmd)
			if err != nil {
				return err
			}
			defer closePool()
			if err := c.TenantWeightSet(cmd.Context(), args[0], args[1], weight); err != nil {
				var fe *skiplock.FieldError
				if errors.As(err, &fe) {
					return usageError("%s: %s", strings.ToUpper(fe.Field), fe.Message)
				}
				return err
			}
			if g.jsonOut {
				return printJSON(cmd.OutOrStdout(), map[string]any{"queue": args[0], "tenant": args[1], "weight": weight})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "queue %s: tenant %s has weight %d\n", args[0], args[1], weight)
			return nil
		},
	}
	g.addJSON(cmd)
	return cmd
}

func newQueueWeightsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "weights [QUEUE]",
		Short: "List the tenants' fair-share weights (of one queue, or of all)",
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageError("QUEUE: at most one expected, got %d arguments", len(args))
			}
			queue := ""
			if len(args) == 1 {
				queue = args[0]
			}
			c, closePool, err := g.clientForCLI(cmd)
			if err != nil {
				return err
			}
			defer closePool()
			ws, err := c.TenantWeightList(cmd.Context(), queue)
			if err != nil {
				return err
			}
			if g.jsonOut {
				out := make([]map[string]any, len(ws))
				for i, w := range ws {
					out[i] = map[string]any{"queue": w.Queue, "tenant": w.Tenant, "weight": w.Weight, "updated_at": w.UpdatedAt}
				}
				return printJSON(cmd.OutOrStdout(), out)
			}
			for _, w := range ws {
				fmt.Fprintf(cmd.OutOrStdout(), "%s\t%s\t%d\n", termSafe(w.Queue), termSafe(w.Tenant), w.Weight)
			}
			return nil
		},
	}
	g.addJSON(cmd)
	return cmd
}

func (g *globals) newQueuePauseCmd(pause bool) *cobra.Command {
	use, short := "resume QUEUE", "Let every process claim from the queue again"
	if pause {
		use, short = "pause QUEUE", "Stop every process from claiming from the queue (running jobs finish)"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long: short + `.
The flag is stored in the database: every worker honours it from its next claim, within
one poll interval. Jobs can still be enqueued into a paused queue. Pausing a queue nothing
has seen yet (no job, dead letter, schedule or worker names it) works, so a queue can be
paused before its first job, but warns on stderr in case the name is a typo.`,
		Args: oneName("QUEUE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			queue := args[0]
			v, err := g.validatingClient(cmd.Context())
			if err != nil {
				return err
			}
			err = v.Validate(skiplock.EnqueueParams{Queue: queue, Kind: "x"})
			v.Pool().Close()
			if err != nil {
				return queueUsage(err)
			}
			c, closePool, err := g.clientForCLI(cmd)
			if err != nil {
				return err
			}
			defer closePool()
			if pause {
				if err := g.warnUnseen(cmd, c.Pool(), queue); err != nil {
					return err
				}
				err = c.QueuePause(cmd.Context(), queue)
			} else {
				err = c.QueueResume(cmd.Context(), queue)
			}
			if err != nil {
				return queueUsage(err)
			}
			if g.jsonOut {
				return printJSON(cmd.OutOrStdout(), map[string]any{"queue": queue, "paused": pause})
			}
			state := "resumed"
			if pause {
				state = "paused"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "queue %s %s\n", queue, state)
			return nil
		},
	}
	g.addJSON(cmd)
	return cmd
}

// warnUnseen warns on stderr when nothing has ever named queue. It warns
// rather than refuses: pausing a queue before the deploy that first feeds
// it is legitimate, and a refusal would need a --force flag for that case.
func (g *globals) warnUnseen(cmd *cobra.Command, db health.DBTX, queue string) error {
	ctx, cancel := context.WithTimeout(cmd.Context(), opsStatementTimeout)
	defer cancel()
	seen, err := health.QueueSeen(ctx, db, g.schema, queue)
	if err != nil {
		return err
	}
	if !seen {
		g.say(cmd.ErrOrStderr(), fmt.Sprintf("skiplock: warning: queue %q has no jobs, dead letters, schedules or workers yet (a typo?); pausing it anyway", queue),
			slog.String("queue", queue))
	}
	return nil
}

func queueUsage(err error) error {
	var fe *skiplock.FieldError
	if errors.As(err, &fe) {
		return usageError("QUEUE: %s", fe.Message)
	}
	return err
}
