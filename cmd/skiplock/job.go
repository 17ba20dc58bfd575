package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/skiplock/skiplock"
)

func newJobCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "job get|list|explain|retry|cancel|delete|wait",
		Short: "Look up, explain, retry, cancel, delete or await jobs by id or filter",
		Long: `Jobs by id or filter, wherever they are: ready, scheduled, running, dead, or completed.
Completed jobs are kept for Config.CompletedRetention (24 hours by default) unless the workers
run with Config.DeleteCompleted. Payloads are shown only by 'job get --payload'.`,
	}
	cmd.AddCommand(newJobGetCmd(g), newJobListCmd(g), newJobExplainCmd(g), g.newJobActionCmd("retry"), g.newJobActionCmd("cancel"),
		g.newJobActionCmd("delete"), newJobWaitCmd(g))
	return cmd
}

// jobID parses the ID argument, a usage error naming it otherwise.
func jobID(args []string) (int64, error) {
	if len(args) != 1 {
		return 0, usageError("ID: exactly one job id expected, got %d arguments", len(args))
	}
	id, err := strconv.ParseInt(args[0], 10, 64)
	if err != nil || id <= 0 {
		return 0, usageError("ID: must be a positive job id, got %q", args[0])
	}
	return id, nil
}

// jobUsage turns a *skiplock.FieldError of a job call into exit 2 naming
// the flag or argument.
func jobUsage(err error) error {
	var fe *skiplock.FieldError
	if errors.As(err, &fe) {
		name := map[string]string{"id": "ID", "state": "--state", "queue": "--queue", "kind": "--kind",
			"limit": "--limit", "before_id": "--before"}[fe.Field]
		if name == "" {
			name = fe.Field
		}
		return usageError("%s: %s", name, fe.Message)
	}
	return err
}

func newJobGetCmd(g *globals) *cobra.Command {
	var payload bool
	cmd := &cobra.Command{
		Use:   "get ID",
		Short: "Show one job: its state, attempts, times, outcome and last error",
		Long: `Shows the job with this id wherever it is: ready, scheduled, running, dead (with its reason)
or completed (kept for 24 hours by default). The payload is shown only with --payload: it may
hold personal data. A running job's last progress report and a completed job's result
(what its handler set; an --exec handler's stdout) are shown too. Exit 1 when no such job
exists.`,
		Example: `  skiplock job get 4711
  skiplock job get 4711 --json
  skiplock job get 4711 --payload`,
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
			rec, err := c.JobGet(cmd.Context(), id)
			if err != nil {
				return jobUsage(err)
			}
			var result json.RawMessage
			if rec.State == skiplock.JobStateCompleted {
				end, err := c.JobResult(cmd.Context(), id)
				if err != nil {
					return jobUsage(err)
				}
				result = end.Result
			}
			var raw json.RawMessage
			if payload {
				if raw, err = c.JobPayload(cmd.Context(), id); err != nil {
					return jobUsage(err)
				}
			}
			if g.jsonOut {
				if payload {
					return printJSON(cmd.OutOrStdout(), struct {
						*skiplock.JobRecord
						Result  json.RawMessage `json:"result,omitempty"`
						Payload json.RawMessage `json:"payload"`
					}{rec, result, raw})
				}
				return printJSON(cmd.OutOrStdout(), struct {
					*skiplock.JobRecord
					Result json.RawMessage `json:"result,omitempty"`
				}{rec, result})
			}
			return printJob(cmd.OutOrStdout(), rec, result, raw)
		},
	}
	cmd.Flags().BoolVar(&payload, "payload", false, "also show the payload (may hold personal data; a sealed one opened with --encryption-keys)")
	g.addJSON(cmd)
	g.addEncryptionKeys(cmd)
	return cmd
}

func printJob(w io.Writer, j *skiplock.JobRecord, result, payload json.RawMessage) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	line := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s\t%s\n", k, termSafe(v))
		}
	}
	ts := func(t *time.Time) string {
		if t == nil {
			return ""
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	line("id", strconv.FormatInt(j.ID, 10))
	line("state", string(j.State))
	line("queue", j.Queue)
	line("kind", j.Kind)
	line("priority", strconv.Itoa(j.Priority))
	attempts := strconv.Itoa(j.Attempt)
	if j.MaxAttempts > 0 {
		attempts += " of " + strconv.Itoa(j.MaxAttempts)
	}
	line("attempts", attempts)
	line("created_at", ts(&j.CreatedAt))
	line("run_at", ts(&j.RunAt))
	line("attempted_at", ts(j.AttemptedAt))
	line("finished_at", ts(j.FinishedAt))
	line("outcome", j.Outcome)
	line("lease_expires_at", ts(j.LeaseExpiresAt))
	if j.CancelRequested {
		line("cancel", "requested")
	}
	line("locked_by", j.LockedBy)
	line("unique_key", j.UniqueKey)
	line("tenant", j.Tenant)
	line("entity", j.Entity)
	if j.LimitWeight > 1 {
		line("limit_weight", strconv.Itoa(j.LimitWeight))
	}
	line("last_error", oneLine(j.LastError))
	if len(j.Metadata) > 0 {
		if b, err := json.Marshal(j.Metadata); err == nil {
			line("metadata", string(b))
		}
	}
	if j.Progress != nil {
		line("progress", strings.TrimPrefix(progressLine(j.ID, j.Progress), fmt.Sprintf("job %d: ", j.ID)))
	}
	if result != nil {
		line("result", string(result))
	}
	if payload != nil {
		line("payload", string(payload))
	}
	return tw.Flush()
}

func newJobListCmd(g *globals) *cobra.Command {
	var (
		p      skiplock.JobListParams
		state  string
		before int64
	)
	cmd := &cobra.Command{
		Use:   "list [--queue Q] [--kind K] [--tenant T] [--state S] [--limit N] [--before ID]",
		Short: "List jobs by queue, kind and state, newest first",
		Long: `Lists jobs newest id first, without payloads. Without --state: every job in flight
(ready, scheduled, running) and every dead letter. --state completed lists the jobs
completed in the last 24 hours. --before ID continues a listing below that id.`,
		Example: `  skiplock job list --state dead --kind welcome
  skiplock job list --queue emails --state completed --limit 20 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if state != "" {
				st, err := skiplock.ParseJobState(state)
				if err != nil {
					return jobUsage(err)
				}
				p.State = st
			}
			if p.Limit <= 0 {
				return usageError("--limit: must be between 1 and %d, got %d", skiplock.MaxJobListLimit, p.Limit)
			}
			p.BeforeID = before
			c, closePool, err := g.clientForCLI(cmd)
			if err != nil {
				return err
			}
			defer closePool()
			jobs, err := c.JobList(cmd.Context(), p)
			if err != nil {
				return jobUsage(err)
			}
			if g.jsonOut {
				if jobs == nil {
					jobs = []skiplock.JobRecord{}
				}
				return printJSON(cmd.OutOrStdout(), jobs)
			}
			return printJobs(cmd.OutOrStdout(), jobs)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&p.Queue, "queue", "", "only this queue")
	fl.StringVar(&p.Kind, "kind", "", "only this kind")
	fl.StringVar(&p.Tenant, "tenant", "", "only this tenant's jobs")
	fl.StringVar(&state, "state", "", "only this state: ready, scheduled, running, dead or completed")
	fl.IntVar(&p.Limit, "limit", skiplock.DefaultJobListLimit, fmt.Sprintf("most jobs listed (1 to %d)", skiplock.MaxJobListLimit))
	fl.Int64Var(&before, "before", 0, "only ids below this one (the next page)")
	g.addJSON(cmd)
	return cmd
}

func printJobs(w io.Writer, jobs []skiplock.JobRecord) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tQUEUE\tKIND\tATTEMPTS\tFINISHED\tOUTCOME\tLAST ERROR")
	for _, j := range jobs {
		finished := ""
		if j.FinishedAt != nil {
			finished = j.FinishedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", j.ID, termSafe(string(j.State)), termSafe(j.Queue), termSafe(j.Kind),
			j.Attempt, finished, termSafe(j.Outcome), oneLine(j.LastError))
	}
	return tw.Flush()
}

func (g *globals) newJobActionCmd(action string) *cobra.Command {
	short := map[string]string{
		"retry":  "Give a dead or completed job a new attempt (one new ready job)",
		"cancel": "Cancel a ready or running job (a running handler's context is cancelled)",
		"delete": "Delete a ready or scheduled job or a dead letter",
	}[action]
	long := map[string]string{
		"retry": `Creates exactly one new ready job, due now, from a dead or completed job (same queue, kind,
payload, priority and attempt budget) and prints its id. A dead job leaves the dead-letter
table; a completed job's history stays. Jobs in flight are refused. Idempotent: run again
(or twice at once) it prints the same new id and makes no second copy; to run the job once
more, retry that copy.`,
		"cancel": `A ready (or scheduled) job goes to the dead-letter table with reason cancelled. A running
job's worker is told at once (NOTIFY, and again by its next heartbeat), cancels the handler's
context and dead-letters the job when the handler returns. Prints the state the job had, as
job list shows it; run again, it prints the same.`,
		"delete": `Removes a ready or scheduled job, or a dead letter, for good. A running job must be
cancelled instead; completed jobs leave the history only when their day's partition is dropped.
Run again, it prints the state the first call found.`,
	}[action]
	cmd := &cobra.Command{
		Use:   action + " ID",
		Short: short,
		Long:  short + ".\n" + long,
		Args:  cobra.ArbitraryArgs,
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
			out, err := jobAction(cmd.Context(), c, action, id)
			if err != nil {
				return jobUsage(err)
			}
			if g.jsonOut {
				return printJSON(cmd.OutOrStdout(), out)
			}
			switch action {
			case "retry":
				fmt.Fprintf(cmd.OutOrStdout(), "job %d retried as job %d\n", id, out["new_id"])
			case "cancel":
				fmt.Fprintf(cmd.OutOrStdout(), "job %d cancelled (was %s)\n", id, out["was"])
			default:
				fmt.Fprintf(cmd.OutOrStdout(), "job %d deleted (was %s)\n", id, out["was"])
			}
			return nil
		},
	}
	g.addJSON(cmd)
	return cmd
}

func jobAction(ctx context.Context, c *skiplock.Client, action string, id int64) (map[string]any, error) {
	switch action {
	case "retry":
		newID, err := c.JobRetry(ctx, id)
		if err != nil {
			return nil, err
		}
		return map[string]any{"id": id, "action": action, "new_id": newID}, nil
	case "cancel":
		was, err := c.JobCancel(ctx, id)
		if err != nil {
			return nil, err
		}
		return map[string]any{"id": id, "action": action, "was": was}, nil
	default:
		was, err := c.JobDelete(ctx, id)
		if err != nil {
			return nil, err
		}
		return map[string]any{"id": id, "action": action, "was": was}, nil
	}
}
