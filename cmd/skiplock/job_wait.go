package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/skiplock/skiplock"
)

// The exit codes of `skiplock job wait` beyond the CLI's own (0 ok, 1
// runtime error, 2 usage error).
const (
	exitWaitFailed   = 4 // a job ended in the dead-letter table
	exitWaitTimedOut = 5 // --timeout passed before every job ended
	exitWaitGone     = 6 // a job is in no table (deleted on completion, or its history dropped)
)

func newJobWaitCmd(g *globals) *cobra.Command {
	var (
		timeout   time.Duration
		progress  bool
		listenURL string
		pollOnly  bool
		poll      time.Duration
	)
	cmd := &cobra.Command{
		Use:   "wait ID... [--timeout DUR] [--progress]",
		Short: "Wait for jobs to end and print their results",
		Long: `Waits until every job ID has ended and prints each one's result: what its handler set
(SetResult; an --exec handler's stdout), or, for a failed job, its dead-letter reason and last
error. Results may hold what the handler put there: they are printed, never logged.

It is woken by NOTIFY (the workers announce the jobs they finish when they commit) and polls
every --poll-interval as well, so it is correct behind a transaction-mode pooler: give
--listen-url a direct URL for LISTEN, or --poll-only. --progress prints each running job's
progress reports to stderr as they change (read every --poll-interval).

Exit codes: 0 every job completed; 4 at least one job failed (ended in the dead-letter table);
5 --timeout passed first (the jobs that ended are printed); 6 a job is in no table (deleted on
completion with DeleteCompleted, or its history dropped); 1 runtime error; 2 usage error.
When several apply, the highest wins.`,
		Example: `  skiplock job wait 4711
  skiplock job wait 4711 4712 --timeout 30s --json
  skiplock job wait 4711 --progress`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError("ID: at least one job id expected")
			}
			ids := make([]int64, len(args))
			for i, a := range args {
				id, err := strconv.ParseInt(a, 10, 64)
				if err != nil || id <= 0 {
					return usageError("ID: must be a positive job id, got %q", a)
				}
				ids[i] = id
			}
			if timeout < 0 {
				return usageError("--timeout: must not be negative, got %s", timeout)
			}
			if poll <= 0 {
				return usageError("--poll-interval: must be positive, got %s", poll)
			}
			pool, err := g.connect(cmd.Context(), 4)
			if err != nil {
				return err
			}
			defer pool.Close()
			c, err := skiplock.NewClient(pool, skiplock.Config{Schema: g.schema, Logger: g.logger(cmd.ErrOrStderr()),
				ListenURL: g.listenURL(listenURL), PollOnly: pollOnly, PollInterval: poll})
			if err != nil {
				var fe *skiplock.FieldError
				if errors.As(err, &fe) {
					return usageError("--%s: %s", map[string]string{"ListenURL": "listen-url", "PollInterval": "poll-interval"}[fe.Field], fe.Message)
				}
				return err
			}
			ctx := cmd.Context()
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			if progress {
				stop := watchProgress(ctx, c, ids, poll, cmd.ErrOrStderr())
				defer stop()
			}
			ends, err := c.Wait(ctx, ids...)
			timedOut := err != nil && errors.Is(err, context.DeadlineExceeded) && cmd.Context().Err() == nil
			if err != nil && !timedOut {
				return jobUsage(err)
			}
			if g.jsonOut {
				if err := printJSON(cmd.OutOrStdout(), ends); err != nil {
					return err
				}
			} else {
				printEnds(cmd.OutOrStdout(), ends)
			}
			code := 0
			for _, e := range ends {
				switch e.State {
				case skiplock.JobStateDead:
					code = max(code, exitWaitFailed)
				case skiplock.JobStateGone:
					code = max(code, exitWaitGone)
				}
			}
			if timedOut {
				code = max(code, exitWaitTimedOut)
				return &exitError{code: code, err: fmt.Errorf("--timeout %s passed: %w", timeout, err)}
			}
			if code != 0 {
				return &exitError{code: code}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.DurationVar(&timeout, "timeout", 0, "give up after this long (exit 5); 0 waits until every job ends")
	fl.BoolVar(&progress, "progress", false, "print running jobs' progress reports to stderr")
	fl.BoolVar(&pollOnly, "poll-only", false, "no LISTEN: poll only (a pooler is detected without it)")
	fl.DurationVar(&poll, "poll-interval", time.Second, "how often to look the jobs up besides NOTIFY")
	listenURLFlag(cmd, &listenURL)
	g.addJSON(cmd)
	return cmd
}

// printEnds prints one line per job: its id, how it ended and its result
// (or its reason and last error).
func printEnds(w io.Writer, ends []skiplock.JobEnd) {
	for _, e := range ends {
		state := string(e.State)
		if state == "" {
			state = "waiting"
		}
		switch {
		case e.State == skiplock.JobStateCompleted && e.Result != nil:
			fmt.Fprintf(w, "%d\t%s\t%s\n", e.ID, state, termSafe(string(e.Result)))
		case e.State == skiplock.JobStateDead:
			fmt.Fprintf(w, "%d\t%s\t%s: %s\n", e.ID, state, e.Reason, termSafe(oneLine(e.Error)))
		default:
			fmt.Fprintf(w, "%d\t%s\n", e.ID, state)
		}
	}
}

// watchProgress prints the jobs' progress reports to w as they change,
// reading them every interval, until stop.
func watchProgress(ctx context.Context, c *skiplock.Client, ids []int64, interval time.Duration, w io.Writer) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := map[int64]time.Time{}
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			for _, id := range ids {
				rec, err := c.JobGet(ctx, id)
				if err != nil || rec.Progress == nil || !rec.Progress.At.After(last[id]) {
					continue
				}
				last[id] = rec.Progress.At
				fmt.Fprintln(w, progressLine(id, rec.Progress))
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}

func progressLine(id int64, p *skiplock.Progress) string {
	s := fmt.Sprintf("job %d: %d", id, p.Done)
	if p.Total > 0 {
		s += fmt.Sprintf(" of %d (%.1f%%)", p.Total, 100*float64(p.Done)/float64(p.Total))
	}
	if p.Note != "" {
		s += " " + termSafe(p.Note)
	}
	return s
}
