package main

import (
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

func newWorkflowCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "workflow get|list|cancel|retry",
		Short: "Look up, cancel or retry workflows (task graphs) and batches",
		Long: `Workflows are graphs of tasks, each a job that runs once every task it depends on has
completed; batches are workflows whose callback runs once every member finished. Outputs are
shown only by 'workflow get --outputs': like payloads, they may hold personal data.`,
	}
	cmd.AddCommand(newWorkflowGetCmd(g), newWorkflowListCmd(g), g.newWorkflowActionCmd("cancel"),
		g.newWorkflowActionCmd("retry"))
	return cmd
}

func workflowID(args []string) (int64, error) {
	if len(args) != 1 {
		return 0, usageError("ID: exactly one workflow id expected, got %d arguments", len(args))
	}
	id, err := strconv.ParseInt(args[0], 10, 64)
	if err != nil || id <= 0 {
		return 0, usageError("ID: must be a positive workflow id, got %q", args[0])
	}
	return id, nil
}

func newWorkflowGetCmd(g *globals) *cobra.Command {
	var outputs bool
	cmd := &cobra.Command{
		Use:   "get ID",
		Short: "Show one workflow: its state, tasks per state, and each task with its parents and error",
		Long: `Shows the workflow with this id and every task in the order they were added: state
(pending, enqueued, completed, dead, cancelled), the job that runs it, its parents, times and
error. Outputs only with --outputs. Exit 1 when no such workflow exists.`,
		Example: `  skiplock workflow get 42
  skiplock workflow get 42 --outputs --json`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := workflowID(args)
			if err != nil {
				return err
			}
			c, closePool, err := g.clientForCLI(cmd)
			if err != nil {
				return err
			}
			defer closePool()
			st, err := c.WorkflowGet(cmd.Context(), id, outputs)
			if errors.Is(err, skiplock.ErrWorkflowNotFound) {
				return fmt.Errorf("workflow %d: %w", id, err)
			} else if err != nil {
				return err
			}
			if g.jsonOut {
				return printJSON(cmd.OutOrStdout(), st)
			}
			return printWorkflow(cmd.OutOrStdout(), st)
		},
	}
	cmd.Flags().BoolVar(&outputs, "outputs", false, "also show the tasks' outputs (may hold personal data; sealed ones opened with --encryption-keys)")
	g.addJSON(cmd)
	g.addEncryptionKeys(cmd)
	return cmd
}

func ts(t *time.Time) string {
	if t == nil {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func printWorkflow(w io.Writer, st skiplock.WorkflowStatus) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "id\t%d\n", st.ID)
	fmt.Fprintf(tw, "name\t%s\n", termSafe(st.Name))
	fmt.Fprintf(tw, "state\t%s\n", termSafe(string(st.State)))
	kind := "workflow"
	if st.Batch {
		kind = "batch"
	}
	fmt.Fprintf(tw, "kind\t%s (on failure: %s)\n", kind, termSafe(string(st.OnFailure)))
	fmt.Fprintf(tw, "tasks\t%d: %d open, %d completed, %d dead, %d cancelled\n", st.Tasks, st.Open, st.Completed, st.Dead, st.Cancelled)
	fmt.Fprintf(tw, "created_at\t%s\n", ts(&st.CreatedAt))
	if st.FinishedAt != nil {
		fmt.Fprintf(tw, "finished_at\t%s\n", ts(st.FinishedAt))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	withOutputs := false
	for _, t := range st.TaskList {
		if t.Output != nil {
			withOutputs = true
		}
	}
	header := "TASK\tSTATE\tKIND\tJOB\tDEPENDS ON\tFINISHED\tERROR"
	if withOutputs {
		header += "\tOUTPUT"
	}
	fmt.Fprintln(tw, header)
	for _, t := range st.TaskList {
		job := ""
		if t.JobID != nil {
			job = strconv.FormatInt(*t.JobID, 10)
		}
		fin := ""
		if t.FinishedAt != nil {
			fin = t.FinishedAt.UTC().Format(time.RFC3339)
		}
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s", termSafe(t.Name), termSafe(string(t.State)), termSafe(t.Kind), job,
			termSafe(strings.Join(t.DependsOn, ",")), fin, oneLine(t.Error))
		if withOutputs {
			line += "\t" + oneLine(string(t.Output))
		}
		fmt.Fprintln(tw, line)
	}
	return tw.Flush()
}

func newWorkflowListCmd(g *globals) *cobra.Command {
	var f skiplock.WorkflowFilter
	cmd := &cobra.Command{
		Use:   "list [--state S] [--name N] [--limit N] [--before ID]",
		Short: "List workflows newest first, with their task counts",
		Example: `  skiplock workflow list --state failed
  skiplock workflow list --name order --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch f.State {
			case "", "running", "completed", "failed", "cancelled":
			default:
				return usageError("--state: must be running, completed, failed or cancelled, got %q", f.State)
			}
			if f.Limit < 1 || f.Limit > 1000 {
				return usageError("--limit: must be between 1 and 1000, got %d", f.Limit)
			}
			if f.BeforeID < 0 {
				return usageError("--before: must be a positive workflow id, got %d", f.BeforeID)
			}
			c, closePool, err := g.clientForCLI(cmd)
			if err != nil {
				return err
			}
			defer closePool()
			ws, err := c.WorkflowList(cmd.Context(), f)
			if err != nil {
				return err
			}
			if g.jsonOut {
				if ws == nil {
					ws = []skiplock.WorkflowStatus{}
				}
				return printJSON(cmd.OutOrStdout(), ws)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tSTATE\tTASKS\tOPEN\tCOMPLETED\tDEAD\tCANCELLED\tCREATED")
			for _, w := range ws {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", w.ID, termSafe(w.Name), termSafe(string(w.State)), w.Tasks, w.Open, w.Completed,
					w.Dead, w.Cancelled, w.CreatedAt.UTC().Format(time.RFC3339))
			}
			return tw.Flush()
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.State, "state", "", "only this state: running, completed, failed or cancelled")
	fl.StringVar(&f.Name, "name", "", "only workflows of this name")
	fl.IntVar(&f.Limit, "limit", 50, "most workflows listed (1 to 1000)")
	fl.Int64Var(&f.BeforeID, "before", 0, "only ids below this one (the next page)")
	g.addJSON(cmd)
	return cmd
}

func (g *globals) newWorkflowActionCmd(action string) *cobra.Command {
	short := map[string]string{
		"cancel": "Cancel a running workflow: pending tasks never run, running ones are cancelled",
		"retry":  "Run a finished workflow's dead and cancelled tasks again",
	}[action]
	long := map[string]string{
		"cancel": `Pending tasks are cancelled, ready jobs go to the dead-letter table as cancelled, and the
handlers of running ones have their context cancelled. Completed tasks keep their outputs.`,
		"retry": `Dead and cancelled tasks become pending again; those whose parents all completed are
enqueued at once. Completed tasks do not run again. A running workflow is refused.`,
	}[action]
	cmd := &cobra.Command{
		Use:   action + " ID",
		Short: short,
		Long:  short + ".\n" + long,
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := workflowID(args)
			if err != nil {
				return err
			}
			c, closePool, err := g.clientForCLI(cmd)
			if err != nil {
				return err
			}
			defer closePool()
			var n int
			if action == "cancel" {
				n, err = c.WorkflowCancel(cmd.Context(), id)
			} else {
				n, err = c.WorkflowRetry(cmd.Context(), id)
			}
			if err != nil {
				return err
			}
			if g.jsonOut {
				return printJSON(cmd.OutOrStdout(), map[string]any{"id": id, "action": action, "tasks": n})
			}
			verb := map[string]string{"cancel": "cancelled", "retry": "retried"}[action]
			fmt.Fprintf(cmd.OutOrStdout(), "workflow %d: %d tasks %s\n", id, n, verb)
			return nil
		},
	}
	g.addJSON(cmd)
	return cmd
}

func newSignalCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "signal send NAME (--workflow ID | --job ID) [--payload JSON]",
		Short: "Send a signal to a waiting workflow task or job",
	}
	var (
		wf, job int64
		payload string
	)
	send := &cobra.Command{
		Use:   "send NAME (--workflow ID | --job ID) [--payload JSON]",
		Short: "Send a signal to a workflow (any of its tasks waiting for NAME) or a job",
		Long: `Stores the signal until a wait for NAME receives it (a signal sent before the wait
begins is kept), and wakes a task that sleeps in its wait. Prints the signal's id.
The same as SQL: SELECT skiplock.signal(name => 'NAME', workflow_id => ID, payload => '{}').`,
		Example: `  skiplock signal send payment_confirmed --workflow 42 --payload '{"amount": 1200}'
  skiplock signal send approve --job 4711`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError("NAME: exactly one signal name expected, got %d arguments", len(args))
			}
			if (wf == 0) == (job == 0) {
				return usageError("--workflow, --job: give exactly one")
			}
			if wf < 0 || job < 0 {
				return usageError("--workflow, --job: must be a positive id")
			}
			var raw json.RawMessage
			if payload != "" {
				raw = json.RawMessage(payload)
			}
			c, closePool, err := g.clientForCLI(cmd)
			if err != nil {
				return err
			}
			defer closePool()
			id, err := c.SignalSend(cmd.Context(), args[0], skiplock.SignalTarget{WorkflowID: wf, JobID: job}, raw)
			var fe *skiplock.FieldError
			if errors.As(err, &fe) {
				flag := map[string]string{"name": "NAME", "payload": "--payload", "workflow_id": "--workflow",
					"job_id": "--job"}[fe.Field]
				if flag == "" {
					flag = fe.Field
				}
				if flag == "--workflow" || flag == "--job" {
					return fmt.Errorf("%s: %s", flag, fe.Message)
				}
				return usageError("%s: %s", flag, fe.Message)
			} else if err != nil {
				return err
			}
			if g.jsonOut {
				return printJSON(cmd.OutOrStdout(), map[string]any{"id": id, "name": args[0]})
			}
			fmt.Fprintln(cmd.OutOrStdout(), id)
			return nil
		},
	}
	fl := send.Flags()
	fl.Int64Var(&wf, "workflow", 0, "the workflow to signal")
	fl.Int64Var(&job, "job", 0, "the job to signal")
	fl.StringVar(&payload, "payload", "", "the signal's payload, a JSON object (default {}; sealed with --encryption-keys)")
	g.addJSON(send)
	g.addEncryptionKeys(send)
	cmd.AddCommand(send)
	return cmd
}
