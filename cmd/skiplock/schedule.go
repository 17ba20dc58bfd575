package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/skiplock/skiplock"
)

func newScheduleCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedule add|list|remove",
		Short: "Manage recurring jobs (cron or fixed-interval schedules)",
		Long: `Recurring jobs are stored in the database; every worker process (skiplock work, or a started
Go client) runs the scheduler, and each fire time is enqueued exactly once however many run it.`,
	}
	cmd.AddCommand(newScheduleAddCmd(g), newScheduleListCmd(g), newScheduleRemoveCmd(g))
	return cmd
}

// oneName is an Args validator that names the missing argument.
func oneName(what string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		switch {
		case len(args) == 0:
			return syntaxError(fmt.Errorf("%s: required", what))
		case len(args) > 1:
			return syntaxError(fmt.Errorf("%s: exactly one expected, got %d arguments", what, len(args)))
		}
		return nil
	}
}

// scheduleFlags maps Schedule field names to the flags that set them.
var scheduleFlags = map[string]string{
	"name": "NAME", "cron": "--cron", "every": "--every", "timezone": "--tz", "queue": "--queue",
	"kind": "--kind", "payload": "--payload", "priority": "--priority", "max_attempts": "--max-attempts",
}

// validatingClient is a Client whose pool never connects: it validates input
// before anything touches the database, so bad input exits 2 even without one.
func (g *globals) validatingClient(ctx context.Context) (*skiplock.Client, error) {
	pool, err := pgxpool.New(ctx, "") // lazy: no connection is opened
	if err != nil {
		return nil, err
	}
	return skiplock.NewClient(pool, skiplock.Config{Schema: g.schema})
}

// clientForCLI opens a small pool and a never-started Client over it.
func (g *globals) clientForCLI(cmd *cobra.Command) (*skiplock.Client, func(), error) {
	pool, err := g.connect(cmd.Context(), 2)
	if err != nil {
		return nil, nil, err
	}
	keys, err := g.keyring()
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	c, err := skiplock.NewClient(pool, skiplock.Config{Schema: g.schema, Logger: g.logger(cmd.ErrOrStderr()), Encryption: keys})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return c, pool.Close, nil
}

func newScheduleAddCmd(g *globals) *cobra.Command {
	var (
		s       skiplock.Schedule
		payload string
	)
	cmd := &cobra.Command{
		Use:   "add NAME (--cron EXPR [--tz ZONE] | --every DUR) --queue Q --kind K [--payload JSON]",
		Short: "Add a schedule, or replace the one with the same name",
		Long: `Adds a schedule, or replaces the definition of the one with the same name. A new schedule
first fires at its first fire time after now; re-adding an unchanged schedule changes nothing.

--cron takes five fields (minute hour day-of-month month day-of-week), six with a leading
seconds field, or @hourly, @daily, @weekly, @monthly, @yearly; --tz is an IANA zone
(default UTC). --every takes a whole number of seconds (90s, 15m, 1h); its fires are aligned
to the Unix epoch.`,
		Example: `  skiplock schedule add nightly-report --cron "30 2 * * *" --tz Europe/Berlin --queue reports --kind report
  skiplock schedule add poll-carriers --every 1m --queue carriers --kind carrier_poll --payload '{"all":true}'`,
		Args: oneName("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			s.Name = args[0]
			fl := cmd.Flags()
			if !fl.Changed("cron") && !fl.Changed("every") {
				return usageError("--cron or --every: one is required")
			}
			if fl.Changed("cron") && fl.Changed("every") {
				return usageError("--cron and --every: give one, not both")
			}
			if fl.Changed("tz") && !fl.Changed("cron") {
				return usageError("--tz: applies to --cron only")
			}
			if fl.Changed("every") && s.Every <= 0 {
				return usageError("--every: must be positive, got %s", s.Every)
			}
			if !fl.Changed("kind") {
				return usageError("--kind: required")
			}
			if s.Queue == "" {
				return usageError("--queue: must not be empty")
			}
			if fl.Changed("max-attempts") && s.MaxAttempts == 0 {
				return usageError("--max-attempts: must be between 1 and %d, got 0", skiplock.MaxAttemptsLimit)
			}
			if fl.Changed("payload") {
				s.Payload = json.RawMessage(payload)
			}
			// Validate before connecting, naming the flag.
			v, err := g.validatingClient(cmd.Context())
			if err != nil {
				return err
			}
			err = v.ValidateSchedule(s)
			v.Pool().Close()
			if err != nil {
				return scheduleUsage(err)
			}
			c, closePool, err := g.clientForCLI(cmd)
			if err != nil {
				return err
			}
			defer closePool()
			if err := c.ScheduleAdd(cmd.Context(), s); err != nil {
				return scheduleUsage(err)
			}
			info, err := findSchedule(cmd.Context(), c, s.Name)
			if err != nil {
				return err
			}
			if g.jsonOut {
				return printJSON(cmd.OutOrStdout(), scheduleJSON(info))
			}
			next := "never"
			if !info.NextFireAt.IsZero() {
				next = info.NextFireAt.Format(time.RFC3339)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "schedule %s: %s; next fire %s\n", info.Name, describeSpec(info), next)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&s.Cron, "cron", "", "cron expression (5 or 6 fields, or a descriptor such as @daily)")
	f.StringVar(&s.Timezone, "tz", "", "IANA time zone of --cron (default UTC)")
	f.DurationVar(&s.Every, "every", 0, "fixed interval (whole seconds, e.g. 30s, 15m, 1h)")
	f.StringVar(&s.Queue, "queue", skiplock.DefaultQueue, "queue of the enqueued jobs")
	f.StringVar(&s.Kind, "kind", "", "kind of the enqueued jobs (required)")
	f.StringVar(&payload, "payload", "{}", "payload of every enqueued job: a JSON object")
	f.IntVar(&s.Priority, "priority", 0, fmt.Sprintf("priority, %d..%d (larger runs earlier)", skiplock.MinPriority, skiplock.MaxPriority))
	f.IntVar(&s.MaxAttempts, "max-attempts", 0, fmt.Sprintf("attempts before the dead-letter table (default %d)", skiplock.DefaultMaxAttempts))
	g.addJSON(cmd)
	return cmd
}

// scheduleUsage turns a schedule's FieldError into a usage error (exit 2)
// that names the flag.
func scheduleUsage(err error) error {
	var fe *skiplock.FieldError
	if errors.As(err, &fe) {
		flag, ok := scheduleFlags[fe.Field]
		if !ok {
			flag = "--" + strings.ReplaceAll(fe.Field, "_", "-")
		}
		return usageError("%s: %s", flag, fe.Message)
	}
	return err
}

func findSchedule(ctx context.Context, c *skiplock.Client, name string) (skiplock.ScheduleInfo, error) {
	all, err := c.ScheduleList(ctx)
	if err != nil {
		return skiplock.ScheduleInfo{}, err
	}
	for _, s := range all {
		if s.Name == name {
			return s, nil
		}
	}
	return skiplock.ScheduleInfo{}, fmt.Errorf("schedule %q: %w", name, skiplock.ErrScheduleNotFound)
}

func describeSpec(s skiplock.ScheduleInfo) string {
	if s.Every > 0 {
		return "every " + s.Every.String()
	}
	return fmt.Sprintf("cron %q in %s", s.Cron, s.Timezone)
}

// scheduleOut is one schedule in --json output.
type scheduleOut struct {
	Name         string          `json:"name"`
	Cron         string          `json:"cron,omitempty"`
	EverySeconds int64           `json:"every_seconds,omitempty"`
	Timezone     string          `json:"timezone"`
	Queue        string          `json:"queue"`
	Kind         string          `json:"kind"`
	Payload      json.RawMessage `json:"payload"`
	Priority     int             `json:"priority"`
	MaxAttempts  int             `json:"max_attempts,omitempty"`
	NextFireAt   *time.Time      `json:"next_fire_at"`
	LastFireAt   *time.Time      `json:"last_fire_at"`
	Owner        string          `json:"owner,omitempty"`
}

func scheduleJSON(s skiplock.ScheduleInfo) scheduleOut {
	o := scheduleOut{Name: s.Name, Cron: s.Cron, EverySeconds: int64(s.Every / time.Second), Timezone: s.Timezone,
		Queue: s.Queue, Kind: s.Kind, Payload: s.Payload, Priority: s.Priority, MaxAttempts: s.MaxAttempts, Owner: s.Owner}
	if !s.NextFireAt.IsZero() {
		t := s.NextFireAt
		o.NextFireAt = &t
	}
	if !s.LastFireAt.IsZero() {
		t := s.LastFireAt
		o.LastFireAt = &t
	}
	return o
}

func newScheduleListCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List schedules with their next and last fire times (UTC)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, closePool, err := g.clientForCLI(cmd)
			if err != nil {
				return err
			}
			defer closePool()
			all, err := c.ScheduleList(cmd.Context())
			if err != nil {
				return err
			}
			if g.jsonOut {
				out := struct {
					Schedules []scheduleOut `json:"schedules"`
				}{Schedules: make([]scheduleOut, 0, len(all))}
				for _, s := range all {
					out.Schedules = append(out.Schedules, scheduleJSON(s))
				}
				return printJSON(cmd.OutOrStdout(), out)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSCHEDULE\tTIMEZONE\tQUEUE\tKIND\tNEXT FIRE\tLAST FIRE\tOWNER")
			for _, s := range all {
				spec := s.Cron
				if s.Every > 0 {
					spec = "@every " + s.Every.String()
				}
				owner := s.Owner
				if owner == "" {
					owner = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", termSafe(s.Name), termSafe(spec), termSafe(s.Timezone), termSafe(s.Queue), termSafe(s.Kind),
					fmtTime(s.NextFireAt), fmtTime(s.LastFireAt), termSafe(owner))
			}
			return tw.Flush()
		},
	}
	g.addJSON(cmd)
	return cmd
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func newScheduleRemoveCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove a schedule (jobs it already enqueued stay)",
		Args:  oneName("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, closePool, err := g.clientForCLI(cmd)
			if err != nil {
				return err
			}
			defer closePool()
			if err := c.ScheduleRemove(cmd.Context(), args[0]); err != nil {
				if errors.Is(err, skiplock.ErrScheduleNotFound) {
					return fmt.Errorf("schedule %q: not found", args[0])
				}
				return scheduleUsage(err)
			}
			if g.jsonOut {
				return printJSON(cmd.OutOrStdout(), map[string]any{"name": args[0], "removed": true})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "schedule %s removed\n", args[0])
			return nil
		},
	}
	g.addJSON(cmd)
	return cmd
}
