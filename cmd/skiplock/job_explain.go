package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/skiplock/skiplock"
)

func newJobExplainCmd(g *globals) *cobra.Command {
	var task bool
	cmd := &cobra.Command{
		Use:   "explain ID | --task TASK_ID",
		Short: "Say why a job is not running: every reason that holds it, or that it is next",
		Long: `For a ready or scheduled job, lists every reason it is held, tested with the claim's own
conditions: its run time, a durable sleep or signal wait, a paused queue, the running job that
holds its entity, a full concurrency or rate limit (with the jobs that hold it and its next free
slot), no live worker for its queue or its kind. Then its place: the due jobs before it in claim
order and, for a job with a tenant, in its tenant and among the queue's tenants. "would be
claimed next" when nothing holds it and nothing comes before it. For a running, dead or
completed job it says so. With --task, ID is a workflow task's id (skiplock workflow get shows
them): a pending task is held by the parents it waits for; an enqueued one is explained by its job.
Exit 1 when no such job (or task) exists.`,
		Example: `  skiplock job explain 4711
  skiplock job explain 4711 --json
  skiplock job explain --task 812`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := jobID(args)
			if err != nil {
				return err
			}
			c, closePool, err := g.clientForCLI(cmd)
			if err != nil {
				return err
			}
			defer closePool()
			var e *skiplock.JobExplanation
			if task {
				e, err = c.WorkflowTaskExplain(cmd.Context(), id)
			} else {
				e, err = c.JobExplain(cmd.Context(), id)
			}
			if err != nil {
				return jobUsage(err)
			}
			if g.jsonOut {
				return printJSON(cmd.OutOrStdout(), e)
			}
			return printExplanation(cmd.OutOrStdout(), e)
		},
	}
	cmd.Flags().BoolVar(&task, "task", false, "ID is a workflow task's id")
	g.addJSON(cmd)
	return cmd
}

func printExplanation(w io.Writer, e *skiplock.JobExplanation) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if e.TaskID != 0 {
		fmt.Fprintf(tw, "workflow\t%d\n", e.WorkflowID)
		fmt.Fprintf(tw, "task\t%d (%s)\n", e.TaskID, e.TaskState)
	}
	if e.ID != 0 {
		fmt.Fprintf(tw, "job\t%d\n", e.ID)
		fmt.Fprintf(tw, "state\t%s\n", e.State)
	}
	fmt.Fprintf(tw, "queue\t%s\n", termSafe(e.Queue))
	fmt.Fprintf(tw, "kind\t%s\n", termSafe(e.Kind))
	if e.Tenant != "" {
		fmt.Fprintf(tw, "tenant\t%s\n", termSafe(e.Tenant))
	}
	if e.State == skiplock.JobStateReady || e.State == skiplock.JobStateScheduled {
		fmt.Fprintf(tw, "ahead\t%d due job(s) before it in claim order\n", e.Ahead)
		if e.Tenant != "" {
			fmt.Fprintf(tw, "fair share\t%d of its tenant before it; %d tenant(s) with due jobs; weight %d\n",
				e.TenantAhead, e.Tenants, e.TenantWeight)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(e.Holds) == 0 {
		_, err := fmt.Fprintf(w, "\n%s\n", termSafe(e.Summary))
		return err
	}
	fmt.Fprintf(w, "\nheld by %d reason(s):\n", len(e.Holds))
	for _, h := range e.Holds {
		fmt.Fprintf(w, "  %-18s %s\n", h.Reason, termSafe(strings.TrimSpace(h.Detail)))
	}
	return nil
}
