package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/skiplock/skiplock/internal/health"
)

// doctorOut is `skiplock doctor --json`.
type doctorOut struct {
	// Database is host:port/name when --database-url is repeated.
	Database string         `json:"database,omitempty"`
	Schema   string         `json:"schema"`
	OK       bool           `json:"ok"`
	Failed   []string       `json:"failed"`
	Warn     []string       `json:"warn"`
	Checks   []health.Check `json:"checks"`
}

func newDoctorCmd(g *globals) *cobra.Command {
	var o health.DoctorOptions
	var replicaFlag string
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Run the vacuum-debt runbook as checks: each prints its status, figure and fix (exit 3 when one fails)",
		Long: `Run the operations runbook as checks against the database: schema version, queue lag,
dead tuples and autovacuum lag on the hot table, its per-table settings (fillfactor, autovacuum),
the claim's partial index (present, valid and used by the real claim plan), transactions pinning
the xmin horizon, NOTIFY queue usage, jobs stuck running past their lease, live workers and
dead-letter growth. Every check prints its status (ok, warn, fail), the figure behind it and,
when not ok, the fix. It only reads. Exit 3 when any check fails; warnings exit 0.
See docs/operations.md for what each check means.

With --replica-url the checks that read table contents (queue_lag, stuck_jobs,
workers, unhandled_kinds, orphan_schedules, dead_letters) run on that streaming replica, their
figures say how far behind it is, and a replica_lag check judges that lag;
the checks of the primary's own statistics, sessions, settings and plans stay
on --database-url.

With --database-url repeated, every database is checked in turn (a section per
database; {"ok":..,"databases":[...]} with --json, each element the one-database
report with its database); exit 3 when any check of any database fails.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, f := range []struct {
				name string
				d    time.Duration
			}{{"lag-warn", o.LagWarn}, {"lag-fail", o.LagFail}, {"xact-warn", o.XactWarn}, {"xact-fail", o.XactFail},
				{"stuck-after", o.StuckAfter}, {"statement-timeout", o.StatementTimeout},
				{"replica-lag-warn", o.ReplicaLagWarn}, {"replica-lag-fail", o.ReplicaLagFail}} {
				if f.d < 0 {
					return usageError("--%s: must not be negative, got %s", f.name, f.d)
				}
			}
			if len(g.databaseURLs) > 1 {
				if g.replicaURL(replicaFlag) != "" {
					return usageError("--replica-url: not with several --database-url")
				}
				return g.runDoctorMany(cmd, g.databaseURLs, o)
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
				o.Replica = replica
			}
			checks, err := health.DoctorWith(cmd.Context(), pool, g.schema, o)
			if err != nil {
				return err
			}
			out := g.newDoctorOut(checks)
			if g.jsonOut {
				if err := printJSON(cmd.OutOrStdout(), out); err != nil {
					return err
				}
			} else {
				printDoctor(cmd.OutOrStdout(), out)
			}
			if !out.OK {
				return checkFailed(fmt.Errorf("doctor: %d check(s) failed: %s", len(out.Failed), strings.Join(out.Failed, ", ")))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.DurationVar(&o.LagWarn, "lag-warn", 0, "warn when the oldest due job has waited longer (default 1m)")
	f.DurationVar(&o.LagFail, "lag-fail", 0, "fail when the oldest due job has waited longer (default 2m, the SLO)")
	f.DurationVar(&o.XactWarn, "xact-warn", 0, "warn when a transaction has held back the xmin horizon longer (default 2m)")
	f.DurationVar(&o.XactFail, "xact-fail", 0, "fail when a transaction has held back the xmin horizon longer (default 10m)")
	f.DurationVar(&o.StuckAfter, "stuck-after", 0, "fail when a running job's lease expired longer ago (default 5m)")
	f.DurationVar(&o.StatementTimeout, "statement-timeout", 0, "bound on each check's queries (default 10s)")
	f.DurationVar(&o.ReplicaLagWarn, "replica-lag-warn", 0, "with --replica-url: warn when the replica is further behind (default 30s)")
	f.DurationVar(&o.ReplicaLagFail, "replica-lag-fail", 0, "with --replica-url: fail when the replica is further behind (default 5m)")
	replicaURLFlag(cmd, &replicaFlag)
	g.addJSON(cmd)
	return cmd
}

// newDoctorOut summarises one database's checks.
func (g *globals) newDoctorOut(checks []health.Check) doctorOut {
	out := doctorOut{Schema: g.schema, OK: !health.Failed(checks), Failed: []string{}, Warn: []string{}, Checks: checks}
	for _, c := range checks {
		switch c.Status {
		case health.StatusFail:
			out.Failed = append(out.Failed, c.Name)
		case health.StatusWarn:
			out.Warn = append(out.Warn, c.Name)
		}
	}
	return out
}

// doctorManyOut is `skiplock doctor --json` over several databases.
type doctorManyOut struct {
	OK        bool        `json:"ok"`
	Databases []doctorOut `json:"databases"`
}

// runDoctorMany checks every database in turn.
func (g *globals) runDoctorMany(cmd *cobra.Command, urls []string, o health.DoctorOptions) error {
	ctx := cmd.Context()
	all := doctorManyOut{OK: true}
	var failed []string
	for _, u := range urls {
		pool, err := connectTo(ctx, u, "--database-url", 2, nil)
		if err != nil {
			return err
		}
		label := databaseLabel(pool)
		checks, err := health.DoctorWith(ctx, pool, g.schema, o)
		pool.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", label, err)
		}
		out := g.newDoctorOut(checks)
		out.Database = label
		all.Databases = append(all.Databases, out)
		if !out.OK {
			all.OK = false
			failed = append(failed, label+" ("+strings.Join(out.Failed, ", ")+")")
		}
	}
	w := cmd.OutOrStdout()
	if g.jsonOut {
		if err := printJSON(w, all); err != nil {
			return err
		}
	} else {
		for i, out := range all.Databases {
			if i > 0 {
				fmt.Fprintln(w)
			}
			fmt.Fprintf(w, "database %s\n", out.Database)
			printDoctor(w, out)
		}
	}
	if !all.OK {
		return checkFailed(fmt.Errorf("doctor: checks failed in %d of %d databases: %s", len(failed), len(urls), strings.Join(failed, "; ")))
	}
	return nil
}

// printDoctor prints one block per check:
//
//	[ ok ] schema: schema skiplock at version 2 (latest)
//	[FAIL] claim_index: the partial index jobs_ready is missing ...
//	       fix: recreate it: CREATE INDEX jobs_ready ON ...
func printDoctor(w io.Writer, out doctorOut) {
	var ok, warn, fail int
	for _, c := range out.Checks {
		tag := "[ ok ]"
		switch c.Status {
		case health.StatusWarn:
			tag = "[warn]"
			warn++
		case health.StatusFail:
			tag = "[FAIL]"
			fail++
		default:
			ok++
		}
		fmt.Fprintf(w, "%s %s: %s\n", tag, c.Name, c.Figure)
		if c.Fix != "" {
			fmt.Fprintf(w, "       fix: %s\n", c.Fix)
		}
	}
	fmt.Fprintf(w, "schema %s: %d check(s): %d ok, %d warn, %d fail\n", out.Schema, len(out.Checks), ok, warn, fail)
}
