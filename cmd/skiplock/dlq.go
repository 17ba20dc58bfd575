package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/health"
)

func newDLQCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq list|replay|purge",
		Short: "Triage the dead-letter table: group by kind and error signature, replay in a trickle, purge",
		Long: `Triage the dead-letter table. A growing dead-letter table is a broken handler:
list groups dead letters by kind and error signature (errors normalised so that ids and numbers
do not split groups), then fix the cause and replay them at a controlled rate, or purge them.
Payloads are never printed: look a sample id up in the jobs_dead table under access control.`,
	}
	cmd.AddCommand(newDLQListCmd(g), newDLQReplayCmd(g), newDLQPurgeCmd(g))
	return cmd
}

// dlqListOut is `skiplock dlq list --json`.
type dlqListOut struct {
	Size   health.DeadLetterSize      `json:"size"`
	Groups []skiplock.DeadLetterGroup `json:"groups"`
}

func newDLQListCmd(g *globals) *cobra.Command {
	var kind string
	var limit int
	cmd := &cobra.Command{
		Use:   "list",
		Short: "Group dead letters by kind and error signature, biggest group first (no payloads)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 || limit > 10000 {
				return usageError("--limit: must be between 1 and 10000, got %d", limit)
			}
			c, closePool, err := g.clientForCLI(cmd)
			if err != nil {
				return err
			}
			defer closePool()
			ctx, cancel := context.WithTimeout(cmd.Context(), opsStatementTimeout)
			defer cancel()
			size, err := health.DeadLetterSizeOf(ctx, c.Pool(), g.schema)
			if err != nil {
				return err
			}
			groups, err := c.DeadLetterList(ctx, kind, limit)
			if err != nil {
				return err
			}
			if g.jsonOut {
				return printJSON(cmd.OutOrStdout(), dlqListOut{Size: size, Groups: groups})
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "%d dead letter(s); %d died in the last 24h, %d in the 24h before (%s)\n",
				size.Total, size.Last24h, size.Prev24h, trend(size.Last24h, size.Prev24h))
			if len(groups) == 0 {
				return nil
			}
			return printDeadGroups(w, groups)
		},
	}
	cmd.Flags().StringVar(&kind, "kind", "", "only this kind")
	cmd.Flags().IntVar(&limit, "limit", 100, "most groups to print")
	g.addJSON(cmd)
	return cmd
}

func trend(last, prev int64) string {
	switch {
	case last > prev:
		return "growing"
	case last < prev:
		return "shrinking"
	default:
		return "flat"
	}
}

func printDeadGroups(w io.Writer, groups []skiplock.DeadLetterGroup) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "COUNT\tKIND\tFIRST\tLAST\tSAMPLE ID\tSIGNATURE")
	for _, gr := range groups {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\n", gr.Count, termSafe(gr.Kind), fmtTime(gr.First), fmtTime(gr.Last),
			gr.SampleID, oneLine(gr.Signature))
	}
	return tw.Flush()
}

// dlqFilterFlags are the selection flags replay and purge share.
type dlqFilterFlags struct {
	kind, signature string
	ids             []int64
	limit           int
	olderThan       time.Duration
	yes             bool
}

func (f *dlqFilterFlags) add(cmd *cobra.Command, purge bool) {
	fl := cmd.Flags()
	fl.StringVar(&f.kind, "kind", "", "only dead letters of this kind")
	fl.StringVar(&f.signature, "signature", "", "only dead letters with this error `signature` (as dlq list prints it; a raw error works too)")
	fl.Int64SliceVar(&f.ids, "id", nil, "only these job ids (repeat the flag or separate with commas)")
	fl.IntVar(&f.limit, "limit", 0, "at most this many (default all that match)")
	if purge {
		fl.Var(ageValue{&f.olderThan}, "older-than", "only dead letters that died longer ago than this (e.g. 30d, 12h)")
	}
	fl.BoolVar(&f.yes, "yes", false, "do it (without --yes: a dry run that prints what would be done, changes nothing and exits 0)")
}

func (f *dlqFilterFlags) filter(purge bool) (skiplock.DeadLetterFilter, error) {
	if f.limit < 0 {
		return skiplock.DeadLetterFilter{}, usageError("--limit: must not be negative, got %d", f.limit)
	}
	if f.olderThan < 0 {
		return skiplock.DeadLetterFilter{}, usageError("--older-than: must not be negative, got %s", f.olderThan)
	}
	for _, id := range f.ids {
		if id <= 0 {
			return skiplock.DeadLetterFilter{}, usageError("--id: job ids are positive, got %d", id)
		}
	}
	hf := skiplock.DeadLetterFilter{Kind: f.kind, Signature: f.signature, IDs: f.ids, Limit: f.limit, OlderThan: f.olderThan}
	if hf.Kind == "" && hf.Signature == "" && len(hf.IDs) == 0 && !(purge && hf.OlderThan > 0) {
		if purge {
			return hf, usageError("select what to purge with --kind, --signature, --id or --older-than")
		}
		return hf, usageError("select what to replay with --kind, --signature or --id")
	}
	return hf, nil
}

// describe prints the filter for people: kind=mail signature="smtp <n>".
func (f *dlqFilterFlags) describe() string {
	var parts []string
	if f.kind != "" {
		parts = append(parts, "kind="+f.kind)
	}
	if f.signature != "" {
		parts = append(parts, fmt.Sprintf("signature=%q", f.signature))
	}
	if len(f.ids) > 0 {
		parts = append(parts, fmt.Sprintf("%d id(s)", len(f.ids)))
	}
	if f.olderThan > 0 {
		parts = append(parts, "older than "+humanDuration(f.olderThan))
	}
	if f.limit > 0 {
		parts = append(parts, fmt.Sprintf("at most %d", f.limit))
	}
	return strings.Join(parts, ", ")
}

// matchingGroups returns the dead-letter groups a kind/signature filter
// selects (nil when the filter also selects by id or age: the groups'
// counts would not be what it selects).
func (g *globals) matchingGroups(ctx context.Context, c *skiplock.Client, f skiplock.DeadLetterFilter) ([]skiplock.DeadLetterGroup, error) {
	if len(f.IDs) > 0 || f.OlderThan > 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, opsStatementTimeout)
	defer cancel()
	groups, err := c.DeadLetterList(ctx, f.Kind, skiplock.MaxDeadLetterListLimit)
	if err != nil {
		return nil, err
	}
	if f.Signature == "" {
		return groups, nil
	}
	sig, err := health.ErrorSignature(ctx, c.Pool(), g.schema, f.Signature)
	if err != nil {
		return nil, fmt.Errorf("normalise --signature: %w", err)
	}
	var out []skiplock.DeadLetterGroup
	for _, gr := range groups {
		if gr.Signature == sig {
			out = append(out, gr)
		}
	}
	return out, nil
}

// dlqPreviewOut is what replay and purge print without --yes.
type dlqPreviewOut struct {
	DryRun bool                       `json:"dry_run"`
	Action string                     `json:"action"`
	Count  int64                      `json:"count"`
	Groups []skiplock.DeadLetterGroup `json:"groups,omitempty"`
}

// preview is the dry run: it prints what replay or purge would do (data on
// stdout), says on stderr that nothing was done and how to do it, and exits
// 0, so a script can tell a preview from a mistake (exit 2).
func (g *globals) preview(cmd *cobra.Command, c *skiplock.Client, f *dlqFilterFlags, hf skiplock.DeadLetterFilter, action string, n int64, extra string) error {
	groups, err := g.matchingGroups(cmd.Context(), c, hf)
	if err != nil {
		return err
	}
	if g.jsonOut {
		if err := printJSON(cmd.OutOrStdout(), dlqPreviewOut{DryRun: true, Action: action, Count: n, Groups: groups}); err != nil {
			return err
		}
	} else {
		w := cmd.OutOrStdout()
		fmt.Fprintf(w, "would %s %d dead letter(s) (%s)%s\n", action, n, f.describe(), extra)
		if len(groups) > 0 {
			if err := printDeadGroups(w, groups); err != nil {
				return err
			}
		}
	}
	g.say(cmd.ErrOrStderr(), fmt.Sprintf("skiplock: dry run, nothing done: pass --yes to %s these %d dead letter(s)", action, n),
		slog.Bool("dry_run", true), slog.Int64("dead_letters", int64(n)))
	return nil
}

func newDLQReplayCmd(g *globals) *cobra.Command {
	var f dlqFilterFlags
	var rate float64
	cmd := &cobra.Command{
		Use:   "replay (--kind K | --signature S | --id N...) [--rate N] --yes",
		Short: "Re-enqueue dead letters as new jobs at a controlled rate (exactly one new job per dead letter)",
		Long: `Re-enqueue the dead letters the flags select (oldest first) as new jobs, at most --rate per
second, in small batches: a trickle, not a burst that would crowd out live work. Each dead letter
becomes exactly one new job, even when two replays race; one whose unique key is in flight again
stays dead. Without --yes it is a dry run: it prints what it would replay and exits 0.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if math.IsNaN(rate) || math.IsInf(rate, 0) || rate <= 0 || rate > 100000 {
				return usageError("--rate: must be a number of jobs per second greater than 0 and at most 100000, got %v", rate)
			}
			hf, err := f.filter(false)
			if err != nil {
				return err
			}
			c, closePool, err := g.clientForCLI(cmd)
			if err != nil {
				return err
			}
			defer closePool()
			n, err := g.countDead(cmd.Context(), c, hf)
			if err != nil {
				return err
			}
			if !f.yes {
				eta := ""
				if n > 0 {
					eta = fmt.Sprintf(", at %g/s: about %s", rate, humanDuration(time.Duration(float64(n)/rate*float64(time.Second))))
				}
				return g.preview(cmd, c, &f, hf, "replay", n, eta)
			}
			progress := g.newProgress(cmd.ErrOrStderr(), int(n), "replay")
			last := 0
			done, err := c.DeadLetterReplay(cmd.Context(), hf, skiplock.DeadLetterReplayOptions{PerSecond: rate, Progress: func(d int) {
				progress.Add(d - last)
				last = d
			}})
			progress.Finish()
			if err != nil {
				if errors.Is(err, context.Canceled) {
					err = errors.New("interrupted")
				}
				return fmt.Errorf("dlq replay: %w after %d job(s) replayed", err, done)
			}
			if g.jsonOut {
				return printJSON(cmd.OutOrStdout(), map[string]any{"replayed": done, "matched": n})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "replayed %d of %d dead letter(s) as new jobs\n", done, n)
			if int64(done) < n {
				fmt.Fprintf(cmd.OutOrStdout(), "%d left dead (their unique key is in flight again, or another replay took them)\n", n-int64(done))
			}
			return nil
		},
	}
	f.add(cmd, false)
	cmd.Flags().Float64Var(&rate, "rate", 10, "most jobs replayed per second")
	g.addJSON(cmd)
	return cmd
}

func newDLQPurgeCmd(g *globals) *cobra.Command {
	var f dlqFilterFlags
	cmd := &cobra.Command{
		Use:   "purge (--kind K | --signature S | --id N... | --older-than DUR) --yes",
		Short: "Delete dead letters for good, in bounded batches",
		Long: `Delete the dead letters the flags select, oldest first, in bounded batches. The retention
service already purges dead letters older than Config.DeadLetterRetention (30 days by default).
Without --yes it is a dry run: it prints what it would delete and exits 0.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			hf, err := f.filter(true)
			if err != nil {
				return err
			}
			c, closePool, err := g.clientForCLI(cmd)
			if err != nil {
				return err
			}
			defer closePool()
			n, err := g.countDead(cmd.Context(), c, hf)
			if err != nil {
				return err
			}
			if !f.yes {
				return g.preview(cmd, c, &f, hf, "purge", n, "")
			}
			purged, err := c.DeadLetterPurge(cmd.Context(), hf)
			if err != nil {
				return fmt.Errorf("dlq purge: %w after %d purged", err, purged)
			}
			if g.jsonOut {
				return printJSON(cmd.OutOrStdout(), map[string]any{"purged": purged, "matched": n})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "purged %d dead letter(s)\n", purged)
			return nil
		},
	}
	f.add(cmd, true)
	g.addJSON(cmd)
	return cmd
}

// countDead counts what a filter selects, capped by its Limit.
func (g *globals) countDead(ctx context.Context, c *skiplock.Client, hf skiplock.DeadLetterFilter) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, opsStatementTimeout)
	defer cancel()
	n, err := c.DeadLetterCount(ctx, hf)
	if err != nil {
		return 0, err
	}
	if hf.Limit > 0 && n > int64(hf.Limit) {
		n = int64(hf.Limit)
	}
	return n, nil
}
