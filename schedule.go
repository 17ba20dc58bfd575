package skiplock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/internal/cron"
	"github.com/skiplock/skiplock/internal/maintenance"
	"github.com/skiplock/skiplock/internal/service"
	"github.com/skiplock/skiplock/internal/store"
)

// ErrInvalidSchedule is the sentinel behind every validation failure of a
// Schedule; the concrete error is a *FieldError naming the field.
var ErrInvalidSchedule = errors.New("skiplock: invalid schedule")

// ErrScheduleNotFound is returned by ScheduleRemove for an unknown name.
var ErrScheduleNotFound = errors.New("skiplock: schedule not found")

// Schedule is a recurring job: a cron expression (in a time zone) or a fixed
// interval, and the job each fire enqueues. Every started Client runs the
// scheduler; each fire time is enqueued exactly once however many processes
// run it, as a job with the unique key "schedule:<Name>:<fire time in UTC,
// RFC 3339>" and run_at equal to the fire time. See docs/scheduling.md.
type Schedule struct {
	// Name identifies the schedule; adding a schedule with an existing name
	// replaces its definition.
	Name string
	// Cron is a cron expression: five fields (minute hour day-of-month month
	// day-of-week), six with a leading seconds field, a descriptor (@hourly,
	// @daily, @weekly, @monthly, @yearly) or "@every DURATION". Set Cron or
	// Every, not both.
	Cron string
	// Every is a fixed interval of whole seconds (at least 1s). Fires are
	// aligned to the Unix epoch: every hour fires on the hour (UTC).
	Every time.Duration
	// Timezone is the IANA zone Cron is read in ("" = UTC). Daylight-saving
	// changes follow the cron package's policy: a time skipped by spring
	// forward fires once, shifted by the gap; a time repeated by fall back
	// fires once. Not allowed with Every.
	Timezone string
	// Queue of the enqueued jobs. Default "default".
	Queue string
	// Kind of the enqueued jobs. It may be left empty when Payload is a
	// JobArgs, whose Kind() names it (as EnqueueParams.Kind); when both are
	// set they must agree.
	Kind string
	// Payload of every enqueued job: a value marshalled to a JSON object, or
	// raw JSON as json.RawMessage or []byte. nil means {}.
	Payload any
	// Priority of the enqueued jobs (MinPriority..MaxPriority, larger runs earlier).
	Priority int
	// MaxAttempts of the enqueued jobs; 0 uses the client's default.
	MaxAttempts int
}

// ScheduleInfo is a stored schedule with its firing state.
type ScheduleInfo struct {
	Name        string
	Cron        string        // "" for an interval schedule
	Every       time.Duration // 0 for a cron schedule
	Timezone    string
	Queue       string
	Kind        string
	Payload     json.RawMessage
	Priority    int
	MaxAttempts int
	// NextFireAt is the next fire time the scheduler will enqueue (zero: not
	// computed yet, or the schedule never fires again).
	NextFireAt time.Time
	// LastFireAt is the most recent fire time enqueued (zero: none yet).
	LastFireAt time.Time
	CreatedAt  time.Time
	UpdatedAt  time.Time
	// Owner is the code that declared it with ScheduleSync ("" for a
	// schedule added one by one, which no sync prunes).
	Owner string
}

// Spec is the schedule's expression: Cron, or "@every D" for an interval.
func (s ScheduleInfo) Spec() string {
	if s.Every > 0 {
		return "@every " + s.Every.String()
	}
	return s.Cron
}

func invalidSchedule(field, format string, args ...any) error {
	return &FieldError{Field: field, Message: fmt.Sprintf(format, args...), base: ErrInvalidSchedule}
}

// scheduleRow is a validated Schedule ready for the schedules table.
type scheduleRow struct {
	name, timezone, queue, kind, payload string
	cron                                 *string
	everySeconds                         *int64
	priority                             int
	maxAttempts                          int
	sched                                *cron.Schedule
}

// prepareSchedule validates s; errors are *FieldError naming the field.
func (c *Client) prepareSchedule(s Schedule) (scheduleRow, error) {
	var r scheduleRow
	if err := validateName("name", s.Name); err != nil {
		return r, asScheduleError(err)
	}
	switch {
	case s.Cron == "" && s.Every == 0:
		return r, invalidSchedule("cron", "set cron or every")
	case s.Cron != "" && s.Every != 0:
		return r, invalidSchedule("every", "set cron or every, not both")
	case s.Every != 0 && s.Timezone != "":
		return r, invalidSchedule("timezone", "applies to cron schedules only; every is an interval of real time")
	}
	if _, err := cron.Parse("@every 1s", s.Timezone); err != nil {
		return r, invalidSchedule("timezone", "%s", cronMessage(err))
	}
	var err error
	if s.Every != 0 {
		if s.Every < time.Second || s.Every%time.Second != 0 {
			return r, invalidSchedule("every", "must be a whole number of seconds, at least 1s, got %s", s.Every)
		}
		if r.sched, err = cron.Parse(fmt.Sprintf("@every %ds", s.Every/time.Second), ""); err != nil {
			return r, invalidSchedule("every", "%s", cronMessage(err))
		}
		secs := int64(s.Every / time.Second)
		r.everySeconds = &secs
	} else {
		if r.sched, err = cron.Parse(s.Cron, s.Timezone); err != nil {
			return r, invalidSchedule("cron", "%s", cronMessage(err))
		}
		expr := strings.TrimSpace(s.Cron)
		r.cron = &expr
	}
	if s.Queue == "" {
		s.Queue = DefaultQueue
	}
	if err := validateName("queue", s.Queue); err != nil {
		return r, asScheduleError(err)
	}
	kind, err := kindOfPayload(s.Kind, s.Payload)
	if err != nil {
		return r, asScheduleError(err)
	}
	s.Kind = kind
	if err := validateName("kind", s.Kind); err != nil {
		return r, asScheduleError(err)
	}
	raw, err := marshalPayload(s.Payload)
	if err != nil {
		return r, asScheduleError(err)
	}
	if err := ValidatePayload(raw, c.cfg.MaxPayloadBytes); err != nil {
		return r, asScheduleError(err)
	}
	if s.Priority < MinPriority || s.Priority > MaxPriority {
		return r, invalidSchedule("priority", "must be between %d and %d, got %d", MinPriority, MaxPriority, s.Priority)
	}
	r.maxAttempts = s.MaxAttempts
	if r.maxAttempts == 0 {
		r.maxAttempts = c.cfg.MaxAttempts
	}
	if r.maxAttempts < 1 || r.maxAttempts > MaxAttemptsLimit {
		return r, invalidSchedule("max_attempts", "must be between 1 and %d, got %d", MaxAttemptsLimit, s.MaxAttempts)
	}
	r.timezone = s.Timezone
	if r.timezone == "" {
		r.timezone = "UTC"
	}
	r.name, r.queue, r.kind, r.payload, r.priority = s.Name, s.Queue, s.Kind, string(raw), s.Priority
	return r, nil
}

// asScheduleError re-bases a job FieldError onto ErrInvalidSchedule.
func asScheduleError(err error) error {
	var fe *FieldError
	if errors.As(err, &fe) {
		return &FieldError{Field: fe.Field, Message: fe.Message, base: ErrInvalidSchedule}
	}
	return err
}

// cronMessage strips the cron package's sentinel prefix: the field already
// says what was invalid.
func cronMessage(err error) string {
	return strings.TrimPrefix(err.Error(), cron.ErrInvalidCron.Error()+": ")
}

// ValidateSchedule checks s exactly as ScheduleAdd would, without touching
// the database.
func (c *Client) ValidateSchedule(s Schedule) error {
	_, err := c.prepareSchedule(s)
	return err
}

// ScheduleAdd stores s, replacing the definition of a schedule with the same
// name. A new schedule first fires at its first fire time after now (by the
// database clock). Re-adding an unchanged schedule changes nothing; changing
// its cron, interval or time zone recomputes the next fire time from now;
// changing only the job (queue, kind, payload, ...) keeps it. A Client that
// was never started can add schedules; a started one runs them.
func (c *Client) ScheduleAdd(ctx context.Context, s Schedule) error {
	return c.ScheduleDeclare(ctx, s)
}

// ScheduleDeclare adds every schedule in ss (as ScheduleAdd) in one
// transaction: all or none. Call it at start-up, before or after Start, to
// keep schedules declared in code; it is idempotent, so every process may
// call it. It never removes schedules missing from ss (other code or the CLI
// may own them); use ScheduleRemove, or ScheduleSync, which gives the set an
// owner and deletes what the owner no longer declares. An invalid schedule rejects the call,
// and its error names the index and field ("schedules[2].cron").
func (c *Client) ScheduleDeclare(ctx context.Context, ss ...Schedule) error {
	rows, err := c.prepareSchedules(ss)
	if err != nil || len(rows) == 0 {
		return err
	}
	err = pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error { return c.upsertSchedules(ctx, tx, rows) })
	if err != nil {
		return fmt.Errorf("skiplock: add schedule: %w", err)
	}
	return nil
}

// prepareSchedules validates ss; an error names the index and field
// ("schedules[2].cron") when there are several.
func (c *Client) prepareSchedules(ss []Schedule) ([]scheduleRow, error) {
	rows := make([]scheduleRow, len(ss))
	for i, s := range ss {
		r, err := c.prepareSchedule(s)
		if err != nil {
			var fe *FieldError
			if len(ss) > 1 && errors.As(err, &fe) {
				return nil, &FieldError{Field: fmt.Sprintf("schedules[%d].%s", i, fe.Field), Message: fe.Message, base: ErrInvalidSchedule}
			}
			return nil, err
		}
		rows[i] = r
	}
	return rows, nil
}

// upsertSchedules stores rows in tx, each next fire time computed from the
// database clock.
func (c *Client) upsertSchedules(ctx context.Context, tx pgx.Tx, rows []scheduleRow) error {
	now, err := c.store.Now(ctx, tx)
	if err != nil {
		return err
	}
	for _, r := range rows {
		var next *time.Time
		if n := r.sched.Next(now); !n.IsZero() {
			next = &n
		}
		maxAttempts := r.maxAttempts
		if err := c.store.UpsertSchedule(ctx, tx, store.ScheduleRow{Name: r.name, Cron: r.cron,
			EverySeconds: r.everySeconds, Timezone: r.timezone, Queue: r.queue, Kind: r.kind,
			Payload: []byte(r.payload), Priority: r.priority, MaxAttempts: &maxAttempts, NextFireAt: next}); err != nil {
			return err
		}
	}
	return nil
}

// ErrScheduleOwned is returned by ScheduleSync for a schedule another owner
// declared; the error names the schedule and its owner.
var ErrScheduleOwned = errors.New("skiplock: schedule owned by another owner")

// ScheduleSync makes ss the whole set of schedules owner declares, in one
// transaction: each is stored as ScheduleAdd stores it and marked as
// owner's (a schedule of that name that had no owner is adopted), and
// every schedule of owner's that ss no longer holds is deleted (fires
// already enqueued stay). It returns the names it deleted. Call it at
// start-up with every schedule the service's code defines, under a name
// for the service ("billing"); an empty ss deletes all of owner's. It is
// idempotent and serialized per owner, so every process of the service
// may call it. A schedule another owner declared is refused
// (ErrScheduleOwned): remove it first, or rename one of them.
//
// During a rolling deploy, processes of the old and the new version
// declare different sets; the last to start wins until the old ones are
// gone, and each fire time is still enqueued once.
func (c *Client) ScheduleSync(ctx context.Context, owner string, ss ...Schedule) (pruned []string, err error) {
	if err := validateName("owner", owner); err != nil {
		return nil, asScheduleError(err)
	}
	rows, err := c.prepareSchedules(ss)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(rows))
	seen := map[string]int{}
	for i, r := range rows {
		if j, dup := seen[r.name]; dup {
			return nil, invalidSchedule(fmt.Sprintf("schedules[%d].name", i), "%q is declared twice (also schedules[%d])", r.name, j)
		}
		seen[r.name] = i
		names[i] = r.name
	}
	err = pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if err := c.store.LockScheduleOwner(ctx, tx, owner); err != nil {
			return err
		}
		taken, err := c.store.SchedulesOwnedElsewhere(ctx, tx, names, owner)
		if err != nil {
			return err
		}
		for _, name := range names {
			if other, ok := taken[name]; ok {
				return fmt.Errorf("%w: %q is declared by %q", ErrScheduleOwned, name, other)
			}
		}
		if pruned, err = c.store.PruneSchedules(ctx, tx, owner, names); err != nil {
			return err
		}
		if err := c.upsertSchedules(ctx, tx, rows); err != nil {
			return err
		}
		return c.store.OwnSchedules(ctx, tx, names, owner)
	})
	if err != nil {
		return nil, fmt.Errorf("skiplock: schedule sync %q: %w", owner, err)
	}
	return pruned, nil
}

// ScheduleRemove deletes a schedule; fires already enqueued stay. It returns
// ErrScheduleNotFound when no schedule has that name. A schedule declared in
// code comes back the next time ScheduleDeclare runs.
func (c *Client) ScheduleRemove(ctx context.Context, name string) error {
	if err := validateName("name", name); err != nil {
		return asScheduleError(err)
	}
	removed, err := c.store.RemoveSchedule(ctx, c.pool, name)
	if err != nil {
		return fmt.Errorf("skiplock: remove schedule: %w", err)
	}
	if !removed {
		return ErrScheduleNotFound
	}
	return nil
}

// ScheduleList returns every stored schedule, by name.
func (c *Client) ScheduleList(ctx context.Context) ([]ScheduleInfo, error) {
	rows, err := c.store.ListSchedules(ctx, c.pool)
	if err != nil {
		return nil, fmt.Errorf("skiplock: list schedules: %w", err)
	}
	out := make([]ScheduleInfo, len(rows))
	for i, r := range rows {
		s := ScheduleInfo{Name: r.Name, Timezone: r.Timezone, Queue: r.Queue, Kind: r.Kind,
			Payload: json.RawMessage(r.Payload), Priority: r.Priority,
			CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC()}
		if r.Cron != nil {
			s.Cron = *r.Cron
		}
		if r.EverySeconds != nil {
			s.Every = time.Duration(*r.EverySeconds) * time.Second
		}
		if r.MaxAttempts != nil {
			s.MaxAttempts = *r.MaxAttempts
		}
		if r.NextFireAt != nil {
			s.NextFireAt = r.NextFireAt.UTC()
		}
		if r.LastFireAt != nil {
			s.LastFireAt = r.LastFireAt.UTC()
		}
		if r.Owner != nil {
			s.Owner = *r.Owner
		}
		out[i] = s
	}
	return out, nil
}

// schedulerServices returns the recurring-job scheduler every started client
// runs: once a second it enqueues the due fires of every schedule, exactly
// once per fire time across all processes.
func (c *Client) schedulerServices() []service.Service {
	return []service.Service{maintenance.NewScheduler(maintenance.SchedulerConfig{
		DB: c.pool, Schema: c.cfg.Schema, Logger: c.cfg.Logger, CatchUp: c.cfg.ScheduleCatchUp,
	})}
}

// NextRunKey is the unique key of a self-rescheduling job chain: kind +
// ":next:" + key. Enqueue the chain's first job with it (so that every
// process may seed the chain at start-up and only one job results), and
// EnqueueNext gives every successor the same key.
func NextRunKey(kind, key string) string { return kind + ":next:" + key }

// EnqueueNext is the "enqueue the next run at the end of this one" pattern.
// Inside tx, the handler's own transaction (a pgx transaction, or a *sql.Tx wrapped
// with SQLTx), it
// completes job (as CompleteTx) and enqueues its successor: same queue, kind,
// payload, priority, max attempts, tenant and entity, to run delay after
// now by the database clock, with the unique key NextRunKey(job.Kind, key).
// Completing first frees the key, so the successor is inserted even though
// it shares the running job's key, while a second copy of the chain (a
// duplicate seed, a retried handler) finds the key in flight and inserts
// nothing. The handler then commits tx and returns nil: the domain writes,
// the completion and the next run commit together or not at all. If
// CompleteTx fails with ErrLeaseLost, tx must not commit.
func EnqueueNext[T any](ctx context.Context, c *Client, tx Tx, job *Job[T], delay time.Duration, key string) (EnqueueResult, error) {
	if err := CompleteTx(ctx, c, tx, job); err != nil {
		return EnqueueResult{}, err
	}
	r, err := c.EnqueueTx(ctx, tx, EnqueueParams{
		Queue: job.Queue, Kind: job.Kind, Payload: job.Payload, Priority: job.Priority, Delay: delay,
		MaxAttempts: job.MaxAttempts, UniqueKey: NextRunKey(job.Kind, key), Tenant: job.Tenant, Entity: job.Entity,
	})
	if err != nil {
		job.run.completedTx.Store(false) // the caller must roll back: do not report success
		return r, err
	}
	return r, nil
}
