package main

import (
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/skiplock/skiplock"
)

func newLimitCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "limit set|list|remove",
		Short: "Concurrency and rate limits obeyed by every worker process",
		Long: `Limits cap the jobs of a queue or of a kind across every process, in total or per partition
value (the job's tenant, its entity, or a top-level field of its payload): at most N running
at once (--concurrency), or at most N started within any window of DUR (--rate N --per DUR).
They are stored in the database and enforced by the claim itself, exactly; workers re-read
them every 2 seconds.`,
	}
	cmd.AddCommand(newLimitSetCmd(g), newLimitListCmd(g), newLimitRemoveCmd(g))
	return cmd
}

func newLimitSetCmd(g *globals) *cobra.Command {
	var l skiplock.Limit
	cmd := &cobra.Command{
		Use:   "set NAME (--queue Q | --kind K) [--partition tenant|entity|arg:FIELD] (--concurrency N | --rate N --per DUR)",
		Short: "Create or replace a limit",
		Example: `  skiplock limit set email --kind send-email --concurrency 5
  skiplock limit set per-customer --kind sync --partition arg:customer_id --concurrency 1
  skiplock limit set reports --queue reports --partition tenant --concurrency 2
  skiplock limit set partner --kind partner-call --rate 100 --per 1m`,
		Args: oneName("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			l.Name = args[0]
			if !cmd.Flags().Changed("concurrency") && !cmd.Flags().Changed("rate") {
				return usageError("--concurrency: required (or --rate and --per)")
			}
			if err := l.Validate(); err != nil {
				return limitUsage(err)
			}
			c, closePool, err := g.clientForCLI(cmd)
			if err != nil {
				return err
			}
			defer closePool()
			if err := c.LimitSet(cmd.Context(), l); err != nil {
				return limitUsage(err)
			}
			if g.jsonOut {
				return printJSON(cmd.OutOrStdout(), limitJSON(skiplock.LimitStatus{Limit: l}))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "limit %s set: %s\n", l.Name, describeLimit(l))
			return nil
		},
	}
	cmd.Flags().StringVar(&l.Queue, "queue", "", "limit the jobs of this queue")
	cmd.Flags().StringVar(&l.Kind, "kind", "", "limit the jobs of this kind, in any queue")
	cmd.Flags().StringVar(&l.Partition, "partition", "", "count per value: tenant, entity or arg:FIELD (a top-level payload field)")
	cmd.Flags().IntVar(&l.Concurrency, "concurrency", 0, "most running jobs at once (per partition value)")
	cmd.Flags().IntVar(&l.Rate, "rate", 0, "most job starts within any window of --per (per partition value)")
	cmd.Flags().DurationVar(&l.Per, "per", 0, "the rate limit's sliding window (1s to 24h)")
	g.addJSON(cmd)
	return cmd
}

func newLimitListCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the limits and their use now",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, closePool, err := g.clientForCLI(cmd)
			if err != nil {
				return err
			}
			defer closePool()
			ls, err := c.LimitList(cmd.Context())
			if err != nil {
				return err
			}
			if g.jsonOut {
				out := make([]map[string]any, len(ls))
				for i, l := range ls {
					out[i] = limitJSON(l)
				}
				return printJSON(cmd.OutOrStdout(), out)
			}
			if len(ls) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "no limits")
				return nil
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tCOVERS\tPARTITION\tCAP\tUSED\tFULLEST\tAT LIMIT\tREADY\tTOO HEAVY")
			for _, l := range ls {
				covers := "queue " + l.Queue
				if l.Kind != "" {
					covers = "kind " + l.Kind
				}
				part := l.Partition
				if part == "" {
					part = "-"
				}
				capText := fmt.Sprintf("%d running", l.Concurrency)
				if l.Rate > 0 {
					capText = fmt.Sprintf("%d per %s", l.Rate, l.Per)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\n", termSafe(l.Name), termSafe(covers), termSafe(part), capText,
					l.Used, l.MaxUsed, l.FullValues, l.Ready, l.TooHeavy)
			}
			return w.Flush()
		},
	}
	g.addJSON(cmd)
	return cmd
}

func newLimitRemoveCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove a limit (the jobs it held back are claimed within 2 seconds)",
		Args:  oneName("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, closePool, err := g.clientForCLI(cmd)
			if err != nil {
				return err
			}
			defer closePool()
			err = c.LimitRemove(cmd.Context(), args[0])
			if errors.Is(err, skiplock.ErrLimitNotFound) {
				return &exitError{code: 1, err: fmt.Errorf("limit %s: not found", args[0])}
			}
			if err != nil {
				return err
			}
			if g.jsonOut {
				return printJSON(cmd.OutOrStdout(), map[string]any{"name": args[0], "removed": true})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "limit %s removed\n", args[0])
			return nil
		},
	}
	g.addJSON(cmd)
	return cmd
}

func limitUsage(err error) error {
	var fe *skiplock.FieldError
	if errors.As(err, &fe) {
		flag := "--" + fe.Field
		if fe.Field == "name" {
			flag = "NAME"
		}
		return usageError("%s: %s", flag, fe.Message)
	}
	return err
}

func describeLimit(l skiplock.Limit) string {
	covers := "jobs of queue " + l.Queue
	if l.Kind != "" {
		covers = "jobs of kind " + l.Kind
	}
	per := ""
	switch {
	case l.Partition == "tenant", l.Partition == "entity":
		per = " per " + l.Partition
	case l.Partition != "":
		per = " per payload " + l.Partition[len("arg:"):]
	}
	if l.Rate > 0 {
		return fmt.Sprintf("at most %d %s started per %s%s", l.Rate, covers, l.Per, per)
	}
	return fmt.Sprintf("at most %d running %s%s", l.Concurrency, covers, per)
}

func limitJSON(l skiplock.LimitStatus) map[string]any {
	return map[string]any{
		"name": l.Name, "queue": l.Queue, "kind": l.Kind, "partition": l.Partition,
		"concurrency": l.Concurrency, "rate": l.Rate, "per_seconds": l.Per.Seconds(), "used": l.Used, "max_used": l.MaxUsed,
		"values_at_limit": l.FullValues, "ready": l.Ready, "too_heavy": l.TooHeavy,
	}
}
