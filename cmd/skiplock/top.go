package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/skiplock/skiplock/internal/health"
)

func init() { register(newTopCmd) }

// topFrame is one refresh of `skiplock top` (one JSON line with --json).
type topFrame struct {
	At          time.Time             `json:"at"`
	Queues      []health.QueueStat    `json:"queues"`
	Workers     topWorkers            `json:"workers"`
	LongRunners []health.LongRunner   `json:"long_runners"`
	DeadLetters health.DeadLetterSize `json:"dead_letters"`
	Vacuum      health.VacuumState    `json:"vacuum"`
	// Replica says how stale the frame's figures are when they were read
	// on --replica-url (all but Vacuum, which only the primary knows).
	Replica *health.ReplicaStatus `json:"replica,omitempty"`
}

// topWorkers is the workers table: totals over every process it holds
// (health.WorkerTotalsOf) and what the live ones report.
type topWorkers struct {
	health.WorkerTotals
	// Running is the jobs the live processes were running at their last beat.
	Running int `json:"running"`
	// ClaimRate is claims per second over the last rateWindow or so (nil on
	// the first frame): the counters move only when a process beats.
	ClaimRate *float64 `json:"claim_rate_per_s"`
	// ClaimP99MS is the worst claim p99 of the live processes (nil when none
	// has claimed yet).
	ClaimP99MS *float64 `json:"claim_p99_ms"`
}

// rateWindow is how far back top reaches for the claim rate: several
// worker beats, so the rate neither reads 0 between beats nor jumps at one.
const rateWindow = 30 * time.Second

// keepRateWindow drops the oldest frames while the next one is already
// rateWindow older than the newest: the first frame left is the rate's base.
func keepRateWindow(h []topFrame) []topFrame {
	now := h[len(h)-1].At
	for len(h) > 1 && now.Sub(h[1].At) >= rateWindow {
		h = h[1:]
	}
	return h
}

func newTopCmd() *cobra.Command {
	var interval time.Duration
	var once bool
	var runners int
	var replicaFlag string
	cmd := &cobra.Command{
		Use:   "top",
		Short: "A live view of the five panels: lag per queue, claim rate and p99, running, dead letters, vacuum state",
		Long: `A live terminal view of the queue's health, refreshed every --interval: per-queue backlog and
lag, claim rate and claim p99 of the worker processes, running jobs and the longest runners,
dead letters and their daily delta, and the hot table's vacuum state (dead tuples, last
autovacuum, the oldest transaction holding back the xmin horizon). Ctrl-C quits. When stdout is
not a terminal, or with --once, it prints one frame and exits; with --json each frame is one
line of JSON.

With --replica-url every figure but the vacuum state (the primary's own
statistics) is read on that streaming replica, and each frame says how far
behind the primary it is (replica in --json).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if interval < 100*time.Millisecond {
				return usageError("--interval: must be at least 100ms, got %s", interval)
			}
			if runners < 0 || runners > 1000 {
				return usageError("--runners: must be between 0 and 1000, got %d", runners)
			}
			pool, err := connect(cmd.Context(), 2)
			if err != nil {
				return err
			}
			defer pool.Close()
			replica, err := connectReplica(cmd.Context(), replicaFlag, 2)
			if err != nil {
				return err
			}
			if replica != nil {
				defer replica.Close()
			}
			out := cmd.OutOrStdout()
			tty := false
			if f, ok := out.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
				tty = true
			}
			return runTop(cmd.Context(), pool, replica, out, interval, runners, once || !tty, tty && !g.jsonOut && !once)
		},
	}
	cmd.Flags().DurationVar(&interval, "interval", 2*time.Second, "refresh interval")
	cmd.Flags().BoolVar(&once, "once", false, "print one frame and exit")
	cmd.Flags().IntVar(&runners, "runners", 5, "longest-running jobs to show")
	replicaURLFlag(cmd, &replicaFlag)
	addJSON(cmd)
	return cmd
}

// runTop draws frames; replica, when not nil, is where the figures other
// than the vacuum state are read.
func runTop(ctx context.Context, pool, replica *pgxpool.Pool, w io.Writer, interval time.Duration, runners int, once, screen bool) error {
	if screen {
		fmt.Fprint(w, "\x1b[?1049h\x1b[?25l") // alternate screen, hide the cursor
		defer fmt.Fprint(w, "\x1b[?25h\x1b[?1049l")
	}
	var history []topFrame // frames back to about rateWindow ago, oldest first
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		var base *topFrame
		if len(history) > 0 {
			base = &history[0]
		}
		f, err := readTopFrame(ctx, pool, replica, runners, base)
		if err != nil {
			if ctx.Err() != nil && !once {
				return nil // Ctrl-C
			}
			return err
		}
		switch {
		case g.jsonOut:
			if err := printJSON(w, f); err != nil {
				return err
			}
		default:
			var b bytes.Buffer
			if screen {
				b.WriteString("\x1b[H\x1b[2J")
			}
			printTopFrame(&b, f, interval, screen)
			if _, err := w.Write(b.Bytes()); err != nil {
				return err
			}
		}
		if once {
			return nil
		}
		history = keepRateWindow(append(history, f))
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// readTopFrame reads one frame; base (an earlier frame, may be nil) gives
// the claim rate. The vacuum state comes from primary (its own
// statistics), everything else from replica when it is not nil.
func readTopFrame(ctx context.Context, primary, replica *pgxpool.Pool, runners int, base *topFrame) (topFrame, error) {
	ctx, cancel := context.WithTimeout(ctx, opsStatementTimeout)
	defer cancel()
	f := topFrame{At: time.Now().UTC()}
	var err error
	pool := primary
	if replica != nil {
		pool = replica
		if f.Replica, err = readReplicaStatus(ctx, replica); err != nil {
			return f, err
		}
	}
	if f.Queues, err = health.QueueStats(ctx, pool, g.schema); err != nil {
		return f, err
	}
	if f.Queues == nil {
		f.Queues = []health.QueueStat{}
	}
	if f.Workers.WorkerTotals, err = health.WorkerTotalsOf(ctx, pool, g.schema); err != nil {
		return f, err
	}
	ws, err := health.Workers(ctx, pool, g.schema)
	if err != nil {
		return f, err
	}
	for _, w := range ws {
		if !w.Live {
			continue
		}
		f.Workers.Running += w.Running
		if w.ClaimP99MS != nil && (f.Workers.ClaimP99MS == nil || *w.ClaimP99MS > *f.Workers.ClaimP99MS) {
			v := *w.ClaimP99MS
			f.Workers.ClaimP99MS = &v
		}
	}
	if base != nil {
		if secs := f.At.Sub(base.At).Seconds(); secs > 0 {
			r := max(float64(f.Workers.Claimed-base.Workers.Claimed), 0) / secs
			f.Workers.ClaimRate = &r
		}
	}
	f.LongRunners = []health.LongRunner{}
	if runners > 0 {
		if f.LongRunners, err = health.LongRunners(ctx, pool, g.schema, runners); err != nil {
			return f, err
		}
		if f.LongRunners == nil {
			f.LongRunners = []health.LongRunner{}
		}
	}
	if f.DeadLetters, err = health.DeadLetterSizeOf(ctx, pool, g.schema); err != nil {
		return f, err
	}
	f.Vacuum, err = health.Vacuum(ctx, primary, g.schema)
	return f, err
}

func printTopFrame(w io.Writer, f topFrame, interval time.Duration, live bool) {
	hint := ""
	if live {
		hint = fmt.Sprintf(" (every %s; Ctrl-C quits)", interval)
	}
	fmt.Fprintf(w, "skiplock top: schema %s at %s%s\n", g.schema, f.At.Format(time.RFC3339), hint)
	if f.Replica != nil {
		fmt.Fprintf(w, "figures %s; the vacuum state is the primary's\n", f.Replica.Describe())
	}
	fmt.Fprintln(w)

	fmt.Fprintln(w, "QUEUES (lag = oldest ready job; SLO under 2m)")
	if len(f.Queues) == 0 {
		fmt.Fprintln(w, "  no queue has jobs, dead letters or a pause flag")
	} else {
		_ = printQueueTable(w, f.Queues)
	}

	wk := f.Workers
	rate, p99 := "-", "-"
	if wk.ClaimRate != nil {
		rate = fmt.Sprintf("%.1f/s", *wk.ClaimRate)
	}
	if wk.ClaimP99MS != nil {
		p99 = fmt.Sprintf("%.2fms", *wk.ClaimP99MS)
	}
	fmt.Fprintf(w, "\nWORKERS  %d live process(es), %d job(s) running; claim rate %s, claim p99 %s; totals: %d claimed, %d completed, %d failed\n",
		wk.Live, wk.Running, rate, p99, wk.Claimed, wk.Completed, wk.Failed)

	if len(f.LongRunners) > 0 {
		fmt.Fprintln(w, "\nLONGEST RUNNING")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tQUEUE\tKIND\tATTEMPT\tRUNTIME\tLEASE\tWORKER")
		for _, r := range f.LongRunners {
			lease := "ok"
			if r.LeaseExpired {
				lease = "EXPIRED"
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", r.ID, r.Queue, r.Kind, r.Attempt, r.MaxAttempts,
				humanSeconds(r.RuntimeSeconds), lease, r.LockedBy)
		}
		_ = tw.Flush()
	}

	d := f.DeadLetters
	fmt.Fprintf(w, "\nDEAD LETTERS  %d kept; %d in the last 24h, %d in the 24h before (%s)\n",
		d.Total, d.Last24h, d.Prev24h, trend(d.Last24h, d.Prev24h))

	v := f.Vacuum
	last := "never (since statistics were reset)"
	if v.LastAutovacuum != nil {
		last = humanDuration(time.Since(*v.LastAutovacuum)) + " ago"
	}
	fmt.Fprintf(w, "\nVACUUM (jobs)  %d live, %d dead tuples (%.0f%% dead; autovacuum starts at %.0f); last autovacuum %s; HOT updates %d of %d\n",
		v.LiveTuples, v.DeadTuples, 100*v.DeadRatio, v.AutovacuumThreshold, last, v.HOTUpdates, v.Updates)
	if v.OldestXminAgeSeconds > 0 {
		who := fmt.Sprintf("pid %d", v.OldestXminPID)
		if v.OldestXminApp != "" {
			who += " (" + v.OldestXminApp + ")"
		}
		fmt.Fprintf(w, "               oldest transaction holding back the xmin horizon: %s, open %s\n", who, humanSeconds(v.OldestXminAgeSeconds))
	} else {
		fmt.Fprintln(w, "               no transaction holds back the xmin horizon")
	}
}
