package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/skiplock/skiplock/internal/health"
)

// opsStatementTimeout bounds each query of the operations commands (stats,
// top, doctor, dlq list) so a wedged database cannot hang a terminal.
const opsStatementTimeout = 10 * time.Second

// statsOut is `skiplock stats --json` (PRODUCT §2).
type statsOut struct {
	Queues []health.QueueStat `json:"queues"`
	// UnhandledKinds are due ready jobs per queue and kind that no live
	// worker handles (they wait forever); empty when there are none.
	UnhandledKinds []health.UnhandledKind `json:"unhandled_kinds"`
	// Replica says how stale the figures are when they were read on
	// --replica-url (absent otherwise).
	Replica *health.ReplicaStatus `json:"replica,omitempty"`
	// Limits are the concurrency limits and their use (empty when none).
	Limits []limitStat `json:"limits"`
	// Databases is the per-database breakdown when --database-url is
	// repeated (absent otherwise); Queues and UnhandledKinds are then their
	// sums.
	Databases []statsDatabase `json:"databases,omitempty"`
}

// limitStat is one concurrency limit in stats --json.
type limitStat struct {
	Name          string  `json:"name"`
	Queue         string  `json:"queue,omitempty"`
	Kind          string  `json:"kind,omitempty"`
	Partition     string  `json:"partition,omitempty"`
	Concurrency   int     `json:"concurrency,omitempty"`
	Rate          int     `json:"rate,omitempty"`
	PerSeconds    float64 `json:"per_seconds,omitempty"`
	Used          int64   `json:"used"`
	MaxUsed       int64   `json:"max_used"`
	ValuesAtLimit int64   `json:"values_at_limit"`
}

// statsDatabase is one database's part of `skiplock stats` over several.
type statsDatabase struct {
	// Database is host:port/name (never the URL).
	Database       string                 `json:"database"`
	Queues         []health.QueueStat     `json:"queues"`
	UnhandledKinds []health.UnhandledKind `json:"unhandled_kinds"`
}

func newStatsCmd(g *globals) *cobra.Command {
	var replicaFlag string
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Per queue: ready, scheduled, running and dead jobs and the queue lag (oldest ready job)",
		Long: `Per queue: ready jobs (due now), scheduled jobs (due later), running jobs, dead letters
and the age of the oldest ready job in seconds (the queue lag; the SLO is under two minutes).
Read from the queue_stats view through the partial indexes; payloads are never read.
Below the table, a warning names every kind with due jobs that no live worker handles
(unhandled_kinds in --json).

With --replica-url the figures are read on that streaming replica only (the
primary is not contacted), and a line below them (replica in --json) says how
far behind the primary they are.

With --database-url repeated (one per database a worker fleet serves), each
database's table is printed, then the sums over all of them (databases in
--json is the breakdown; queues and unhandled_kinds are the sums: counts
added, the oldest ready age the largest, paused when paused in any).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(g.databaseURLs) > 1 {
				if g.replicaURL(replicaFlag) != "" {
					return usageError("--replica-url: not with several --database-url")
				}
				return g.runStatsMany(cmd, g.databaseURLs)
			}
			pool, err := g.connectReplica(cmd.Context(), replicaFlag, 2)
			if err != nil {
				return err
			}
			if pool == nil {
				if pool, err = g.connect(cmd.Context(), 2); err != nil {
					return err
				}
			}
			defer pool.Close()
			var replica *health.ReplicaStatus
			if g.replicaURL(replicaFlag) != "" {
				if replica, err = g.readReplicaStatus(cmd.Context(), pool); err != nil {
					return err
				}
			}
			stats, err := g.readQueueStats(cmd.Context(), pool)
			if err != nil {
				return err
			}
			unhandled, err := g.readUnhandledKinds(cmd.Context(), pool)
			if err != nil {
				return err
			}
			ls, err := health.Limits(cmd.Context(), pool, g.schema, false)
			if err != nil {
				return err
			}
			limits := make([]limitStat, len(ls))
			for i, l := range ls {
				limits[i] = limitStat{Name: l.Name, Queue: l.Queue, Kind: l.Kind, Partition: l.Partition,
					Concurrency: l.Concurrency, Rate: l.Rate, PerSeconds: l.Per.Seconds(), Used: l.Used,
					MaxUsed: l.MaxUsed, ValuesAtLimit: l.FullValues}
			}
			if g.jsonOut {
				return printJSON(cmd.OutOrStdout(), statsOut{Queues: stats, UnhandledKinds: unhandled, Replica: replica, Limits: limits})
			}
			if replica != nil {
				defer fmt.Fprintf(cmd.OutOrStdout(), "(%s)\n", replica.Describe())
			}
			if len(stats) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "no queue has jobs, dead letters or a pause flag")
				return nil
			}
			if err := printQueueTable(cmd.OutOrStdout(), stats); err != nil {
				return err
			}
			for _, u := range unhandled {
				fmt.Fprintf(cmd.OutOrStdout(), "warning: no live worker handles kind %q in queue %s: %s job(s) ready, oldest %s\n",
					u.Kind, termSafe(u.Queue), u.ReadyText(), humanSeconds(u.OldestReadyAgeSeconds))
			}
			for _, l := range limits {
				if l.Rate > 0 {
					fmt.Fprintf(cmd.OutOrStdout(), "limit %s: %d started in the last %gs (fullest value %d of %d), %d value(s) at the limit\n",
						termSafe(l.Name), l.Used, l.PerSeconds, l.MaxUsed, l.Rate, l.ValuesAtLimit)
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "limit %s: %d running (fullest value %d of %d), %d value(s) at the limit\n",
					termSafe(l.Name), l.Used, l.MaxUsed, l.Concurrency, l.ValuesAtLimit)
			}
			return nil
		},
	}
	replicaURLFlag(cmd, &replicaFlag)
	g.addJSON(cmd)
	return cmd
}

// runStatsMany is `stats` over several databases: each one's figures,
// then their sums.
func (g *globals) runStatsMany(cmd *cobra.Command, urls []string) error {
	ctx := cmd.Context()
	out := statsOut{Queues: []health.QueueStat{}, UnhandledKinds: []health.UnhandledKind{}, Limits: []limitStat{}}
	for _, u := range urls {
		pool, err := connectTo(ctx, u, "--database-url", 2, nil)
		if err != nil {
			return err
		}
		d := statsDatabase{Database: databaseLabel(pool)}
		d.Queues, err = g.readQueueStats(ctx, pool)
		if err == nil {
			d.UnhandledKinds, err = g.readUnhandledKinds(ctx, pool)
		}
		pool.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", d.Database, err)
		}
		out.Databases = append(out.Databases, d)
	}
	out.Queues, out.UnhandledKinds = sumStats(out.Databases)
	w := cmd.OutOrStdout()
	if g.jsonOut {
		return printJSON(w, out)
	}
	for _, d := range out.Databases {
		fmt.Fprintf(w, "database %s\n", d.Database)
		if len(d.Queues) == 0 {
			fmt.Fprintln(w, "no queue has jobs, dead letters or a pause flag")
		} else if err := printQueueTable(w, d.Queues); err != nil {
			return err
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "all %d databases\n", len(out.Databases))
	if len(out.Queues) == 0 {
		fmt.Fprintln(w, "no queue has jobs, dead letters or a pause flag")
	} else if err := printQueueTable(w, out.Queues); err != nil {
		return err
	}
	for _, d := range out.Databases {
		for _, u := range d.UnhandledKinds {
			fmt.Fprintf(w, "warning: no live worker handles kind %q in queue %s of %s: %d job(s) ready, oldest %s\n",
				u.Kind, termSafe(u.Queue), termSafe(d.Database), u.Ready, humanSeconds(u.OldestReadyAgeSeconds))
		}
	}
	return nil
}

// sumStats adds the databases' figures per queue (and per queue and kind):
// counts summed, the oldest ready age the largest, paused when paused in
// any database. Both lists are sorted like one database's (queue name;
// unhandled kinds most jobs first).
func sumStats(dbs []statsDatabase) ([]health.QueueStat, []health.UnhandledKind) {
	qs := make([][]health.QueueStat, len(dbs))
	us := make([][]health.UnhandledKind, len(dbs))
	for i, d := range dbs {
		qs[i], us[i] = d.Queues, d.UnhandledKinds
	}
	return health.SumQueueStats(qs...), health.SumUnhandledKinds(us...)
}

// readQueueStats reads queue_stats with a statement timeout; never nil.
func (g *globals) readQueueStats(ctx context.Context, pool *pgxpool.Pool) ([]health.QueueStat, error) {
	qctx, cancel := context.WithTimeout(ctx, opsStatementTimeout)
	defer cancel()
	stats, err := health.QueueStats(qctx, pool, g.schema)
	if err != nil {
		return nil, err
	}
	if stats == nil {
		stats = []health.QueueStat{}
	}
	return stats, nil
}

// readUnhandledKinds reads the kinds no live worker handles; never nil.
func (g *globals) readUnhandledKinds(ctx context.Context, pool *pgxpool.Pool) ([]health.UnhandledKind, error) {
	qctx, cancel := context.WithTimeout(ctx, opsStatementTimeout)
	defer cancel()
	u, err := health.UnhandledKinds(qctx, pool, g.schema)
	if err != nil {
		return nil, err
	}
	if u == nil {
		u = []health.UnhandledKind{}
	}
	return u, nil
}

// printQueueTable prints queue stats as an aligned table.
func printQueueTable(w io.Writer, stats []health.QueueStat) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "QUEUE\tREADY\tSCHEDULED\tRUNNING\tDEAD\tLAG\tPAUSED\t")
	var tot health.QueueStat
	var lag float64
	for _, s := range stats {
		paused := ""
		if s.Paused {
			paused = "paused"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t\n", termSafe(s.Queue), s.Ready, s.Scheduled, s.Running, s.Dead,
			humanSeconds(s.OldestReadyAgeSeconds), paused)
		tot.Ready += s.Ready
		tot.Scheduled += s.Scheduled
		tot.Running += s.Running
		tot.Dead += s.Dead
		lag = math.Max(lag, s.OldestReadyAgeSeconds)
	}
	if len(stats) > 1 {
		fmt.Fprintf(tw, "(all)\t%d\t%d\t%d\t%d\t%s\t\t\n", tot.Ready, tot.Scheduled, tot.Running, tot.Dead, humanSeconds(lag))
	}
	return tw.Flush()
}

// humanSeconds prints an age for people: "-" for none, 850ms, 42s, 3m12s,
// 5h3m, 2d4h.
func humanSeconds(s float64) string {
	if s <= 0 || math.IsNaN(s) {
		return "-"
	}
	return humanDuration(time.Duration(s * float64(time.Second)))
}

func humanDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	case d < 48*time.Hour:
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	default:
		days := int(d / (24 * time.Hour))
		return fmt.Sprintf("%dd%dh", days, int((d-time.Duration(days)*24*time.Hour)/time.Hour))
	}
}

// ageValue is a duration flag that also takes days: "30d", "1d12h", "90m".
type ageValue struct{ d *time.Duration }

func (a ageValue) String() string {
	if a.d == nil || *a.d == 0 {
		return "0s"
	}
	return a.d.String()
}

func (a ageValue) Set(s string) error {
	d, err := parseAge(s)
	if err != nil {
		return err
	}
	*a.d = d
	return nil
}

func (a ageValue) Type() string { return "duration" }

// parseAge parses a Go duration with an optional leading whole number of
// days ("30d", "1d12h").
func parseAge(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	var days int64
	if i := strings.IndexByte(s, 'd'); i > 0 {
		n, err := strconv.ParseInt(s[:i], 10, 64)
		if err != nil || n < 0 || n > 100000 {
			return 0, fmt.Errorf("not a duration (e.g. 30d, 12h, 90m): %q", s)
		}
		days, s = n, s[i+1:]
		if s == "" {
			return time.Duration(days) * 24 * time.Hour, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("not a duration (e.g. 30d, 12h, 90m): %q", s)
	}
	if days > 0 && d < 0 {
		return 0, fmt.Errorf("not a duration (e.g. 30d, 12h, 90m): %q", s)
	}
	return time.Duration(days)*24*time.Hour + d, nil
}
