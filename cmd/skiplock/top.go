package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/skiplock/skiplock/internal/health"
)

// topFrame is one refresh of `skiplock top` (one JSON line with --json).
type topFrame struct {
	At          time.Time             `json:"at"`
	Queues      []health.QueueStat    `json:"queues"`
	Workers     topWorkers            `json:"workers"`
	LongRunners []topRunner           `json:"long_runners"`
	DeadLetters health.DeadLetterSize `json:"dead_letters"`
	Vacuum      health.VacuumState    `json:"vacuum"`
	// Replica says how stale the frame's figures are when they were read
	// on --replica-url (all but Vacuum, which only the primary knows).
	Replica *health.ReplicaStatus `json:"replica,omitempty"`
	// Databases is the per-database breakdown when --database-url is
	// repeated (absent otherwise). The frame's figures are then the sums:
	// counts and rates added, lags and claim p99 the worst, the longest
	// runners of all (each naming its database), and Vacuum the database
	// with the most dead tuples (VacuumDatabase).
	Databases      []topDatabase `json:"databases,omitempty"`
	VacuumDatabase string        `json:"vacuum_database,omitempty"`
}

// topDatabase is one database's line in a frame over several.
type topDatabase struct {
	// Database is host:port/name (never the URL).
	Database string `json:"database"`
	// Ready, Scheduled, Running and Dead sum its queues; LagSeconds is its
	// oldest ready job's wait.
	Ready      int64   `json:"ready"`
	Scheduled  int64   `json:"scheduled"`
	Running    int64   `json:"running"`
	Dead       int64   `json:"dead"`
	LagSeconds float64 `json:"lag_seconds"`
	// Workers is its workers table, as in the frame.
	Workers topWorkers `json:"workers"`
	// DeadLast24h is its dead letters of the last 24 hours; DeadTuples its
	// hot table's.
	DeadLast24h int64 `json:"dead_last_24h"`
	DeadTuples  int64 `json:"dead_tuples"`
	// frame is the database's own frame: the base of its next claim rate.
	frame topFrame
}

// topRunner is a long-running job; Database names its database in a frame
// over several (job ids are per database).
type topRunner struct {
	health.LongRunner
	Database string `json:"database,omitempty"`
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

func newTopCmd(g *globals) *cobra.Command {
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
behind the primary it is (replica in --json).

With --database-url repeated, each frame starts with a line per database
(databases in --json: ready, scheduled, running, dead, lag, live workers,
claim rate and p99, dead letters, dead tuples) and every figure below adds
them up: counts and rates summed, lags and claim p99 the worst, the longest
runners of all (naming their database), the vacuum state of the database
with the most dead tuples. Not with --replica-url.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if interval < 100*time.Millisecond {
				return usageError("--interval: must be at least 100ms, got %s", interval)
			}
			if runners < 0 || runners > 1000 {
				return usageError("--runners: must be between 0 and 1000, got %d", runners)
			}
			out := cmd.OutOrStdout()
			tty := false
			if f, ok := out.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
				tty = true
			}
			if len(g.databaseURLs) > 1 {
				if g.replicaURL(replicaFlag) != "" {
					return usageError("--replica-url: not with several --database-url")
				}
				dbs, closeAll, err := connectDatabases(cmd.Context(), g.databaseURLs, 2)
				if err != nil {
					return err
				}
				defer closeAll()
				return g.runTop(cmd.Context(), dbs, nil, out, interval, runners, once || !tty, tty && !g.jsonOut && !once)
			}
			pool, err := g.connect(cmd.Context(), 2)
			if err != nil {
				return err
			}
			defer pool.Close()
			replica, err := g.connectReplica(cmd.Context(), replicaFlag, 2)
			if err != nil {
				return err
			}
			if replica != nil {
				defer replica.Close()
			}
			return g.runTop(cmd.Context(), []database{{pool: pool}}, replica, out, interval, runners, once || !tty, tty && !g.jsonOut && !once)
		},
	}
	cmd.Flags().DurationVar(&interval, "interval", 2*time.Second, "refresh interval")
	cmd.Flags().BoolVar(&once, "once", false, "print one frame and exit")
	cmd.Flags().IntVar(&runners, "runners", 5, "longest-running jobs to show")
	replicaURLFlag(cmd, &replicaFlag)
	g.addJSON(cmd)
	return cmd
}

// runTop draws frames of one database or of several (added up, with a
// line per database); replica, when not nil, is where the figures of the
// one database other than the vacuum state are read.
func (g *globals) runTop(ctx context.Context, dbs []database, replica *pgxpool.Pool, w io.Writer, interval time.Duration, runners int, once, screen bool) error {
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
		var f topFrame
		var err error
		if len(dbs) == 1 {
			f, err = g.readTopFrame(ctx, dbs[0].pool, replica, runners, base)
		} else {
			f, err = g.readTopFrameMany(ctx, dbs, runners, base)
		}
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
			g.printTopFrame(&b, f, interval, screen)
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
func (g *globals) readTopFrame(ctx context.Context, primary, replica *pgxpool.Pool, runners int, base *topFrame) (topFrame, error) {
	ctx, cancel := context.WithTimeout(ctx, opsStatementTimeout)
	defer cancel()
	f := topFrame{At: time.Now().UTC()}
	var err error
	pool := primary
	if replica != nil {
		pool = replica
		if f.Replica, err = g.readReplicaStatus(ctx, replica); err != nil {
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
	f.LongRunners = []topRunner{}
	if runners > 0 {
		rs, err := health.LongRunners(ctx, pool, g.schema, runners)
		if err != nil {
			return f, err
		}
		for _, r := range rs {
			f.LongRunners = append(f.LongRunners, topRunner{LongRunner: r})
		}
	}
	if f.DeadLetters, err = health.DeadLetterSizeOf(ctx, pool, g.schema); err != nil {
		return f, err
	}
	f.Vacuum, err = health.Vacuum(ctx, primary, g.schema)
	return f, err
}

// readTopFrameMany reads every database's frame and adds them up (see
// topFrame.Databases); base (may be nil) is the frame the claim rates are
// reckoned from.
func (g *globals) readTopFrameMany(ctx context.Context, dbs []database, runners int, base *topFrame) (topFrame, error) {
	sum := topFrame{At: time.Now().UTC(), LongRunners: []topRunner{}}
	var queues [][]health.QueueStat
	for i, db := range dbs {
		var b *topFrame
		if base != nil && i < len(base.Databases) {
			b = &base.Databases[i].frame
		}
		f, err := g.readTopFrame(ctx, db.pool, nil, runners, b)
		if err != nil {
			return sum, fmt.Errorf("%s: %w", db.name, err)
		}
		d := topDatabase{Database: db.name, Workers: f.Workers, DeadLast24h: f.DeadLetters.Last24h,
			DeadTuples: f.Vacuum.DeadTuples, frame: f}
		for _, q := range f.Queues {
			d.Ready += q.Ready
			d.Scheduled += q.Scheduled
			d.Running += q.Running
			d.Dead += q.Dead
			if !q.Paused {
				d.LagSeconds = max(d.LagSeconds, q.OldestReadyAgeSeconds)
			}
		}
		sum.Databases = append(sum.Databases, d)
		queues = append(queues, f.Queues)

		w := &sum.Workers
		w.Live += f.Workers.Live
		w.Stale += f.Workers.Stale
		w.Stopped += f.Workers.Stopped
		w.Claimed += f.Workers.Claimed
		w.Completed += f.Workers.Completed
		w.Failed += f.Workers.Failed
		w.Running += f.Workers.Running
		if r := f.Workers.ClaimRate; r != nil {
			w.ClaimRate = ptr(*r + deref0(w.ClaimRate))
		}
		if p := f.Workers.ClaimP99MS; p != nil && (w.ClaimP99MS == nil || *p > *w.ClaimP99MS) {
			w.ClaimP99MS = ptr(*p)
		}
		for _, r := range f.LongRunners {
			r.Database = db.name
			sum.LongRunners = append(sum.LongRunners, r)
		}
		sum.DeadLetters.Total += f.DeadLetters.Total
		sum.DeadLetters.Last24h += f.DeadLetters.Last24h
		sum.DeadLetters.Prev24h += f.DeadLetters.Prev24h
		if i == 0 || f.Vacuum.DeadTuples > sum.Vacuum.DeadTuples {
			sum.Vacuum, sum.VacuumDatabase = f.Vacuum, db.name
		}
	}
	sum.Queues = health.SumQueueStats(queues...)
	sort.SliceStable(sum.LongRunners, func(i, j int) bool {
		return sum.LongRunners[i].RuntimeSeconds > sum.LongRunners[j].RuntimeSeconds
	})
	sum.LongRunners = sum.LongRunners[:min(len(sum.LongRunners), runners)]
	return sum, nil
}

func ptr(v float64) *float64 { return &v }

func deref0(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}

func (g *globals) printTopFrame(w io.Writer, f topFrame, interval time.Duration, live bool) {
	hint := ""
	if live {
		hint = fmt.Sprintf(" (every %s; Ctrl-C quits)", interval)
	}
	fmt.Fprintf(w, "skiplock top: schema %s at %s%s\n", g.schema, f.At.Format(time.RFC3339), hint)
	if f.Replica != nil {
		fmt.Fprintf(w, "figures %s; the vacuum state is the primary's\n", f.Replica.Describe())
	}
	fmt.Fprintln(w)

	if len(f.Databases) > 0 {
		fmt.Fprintf(w, "DATABASES (%d; every figure below adds them up)\n", len(f.Databases))
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "DATABASE\tREADY\tSCHEDULED\tRUNNING\tDEAD\tLAG\tLIVE\tCLAIM/S\tCLAIM P99\tDEAD 24H\tDEAD TUPLES\t")
		for _, d := range f.Databases {
			rate, p99 := claimFigures(d.Workers)
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%d\t%s\t%s\t%d\t%d\t\n", d.Database, d.Ready, d.Scheduled, d.Running, d.Dead,
				humanSeconds(d.LagSeconds), d.Workers.Live, rate, p99, d.DeadLast24h, d.DeadTuples)
		}
		_ = tw.Flush()
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "QUEUES (lag = oldest ready job; SLO under 2m)")
	if len(f.Queues) == 0 {
		fmt.Fprintln(w, "  no queue has jobs, dead letters or a pause flag")
	} else {
		_ = printQueueTable(w, f.Queues)
	}

	wk := f.Workers
	rate, p99 := claimFigures(wk)
	fmt.Fprintf(w, "\nWORKERS  %d live process(es), %d job(s) running; claim rate %s, claim p99 %s; totals: %d claimed, %d completed, %d failed\n",
		wk.Live, wk.Running, rate, p99, wk.Claimed, wk.Completed, wk.Failed)

	if len(f.LongRunners) > 0 {
		fmt.Fprintln(w, "\nLONGEST RUNNING")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		many := len(f.Databases) > 0
		if many {
			fmt.Fprint(tw, "DATABASE\t")
		}
		fmt.Fprintln(tw, "ID\tQUEUE\tKIND\tATTEMPT\tRUNTIME\tLEASE\tWORKER")
		for _, r := range f.LongRunners {
			lease := "ok"
			if r.LeaseExpired {
				lease = "EXPIRED"
			}
			if many {
				fmt.Fprintf(tw, "%s\t", r.Database)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", r.ID, termSafe(r.Queue), termSafe(r.Kind), r.Attempt, r.MaxAttempts,
				humanSeconds(r.RuntimeSeconds), lease, termSafe(r.LockedBy))
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
	vacuumOf := ""
	if f.VacuumDatabase != "" {
		vacuumOf = " of " + f.VacuumDatabase + ", the most dead tuples"
	}
	fmt.Fprintf(w, "\nVACUUM (jobs%s)  %d live, %d dead tuples (%.0f%% dead; autovacuum starts at %.0f); last autovacuum %s; HOT updates %d of %d\n",
		vacuumOf, v.LiveTuples, v.DeadTuples, 100*v.DeadRatio, v.AutovacuumThreshold, last, v.HOTUpdates, v.Updates)
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

// claimFigures prints a workers table's claim rate and p99 ("-" when
// unknown).
func claimFigures(wk topWorkers) (rate, p99 string) {
	rate, p99 = "-", "-"
	if wk.ClaimRate != nil {
		rate = fmt.Sprintf("%.1f/s", *wk.ClaimRate)
	}
	if wk.ClaimP99MS != nil {
		p99 = fmt.Sprintf("%.2fms", *wk.ClaimP99MS)
	}
	return rate, p99
}
