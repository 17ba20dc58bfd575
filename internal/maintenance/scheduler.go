// Package maintenance holds skiplock's background maintenance services. They
// share one shape: a service.Periodic ticker with jitter, bounded batches, a
// timeout on every statement and a log line with counts.
package maintenance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/skiplock/skiplock/internal/cron"
	"github.com/skiplock/skiplock/internal/service"
	"github.com/skiplock/skiplock/internal/store"
)

// Scheduler defaults.
const (
	// DefaultSchedulerInterval is how often the scheduler looks for due
	// schedules.
	DefaultSchedulerInterval = time.Second
	// DefaultMisfireGrace is how late a fire may be and still count as on
	// time. Up to this lateness (a slow tick, a GC pause, a short failover)
	// every fire time is enqueued; beyond it the scheduler was down and the
	// catch-up policy applies.
	DefaultMisfireGrace = 5 * time.Second
	// DefaultCatchUp is how many missed fires are enqueued after downtime.
	DefaultCatchUp = 1
	// schedulerBatch bounds the schedules handled per statement.
	schedulerBatch = 100
	// schedulerRounds bounds the batches per tick.
	schedulerRounds = 10
	// maxOnTimeFires bounds the fires enqueued for one schedule in one tick.
	maxOnTimeFires = 1000
	// statementTimeout bounds every statement the scheduler runs.
	statementTimeout = 5 * time.Second
)

// SchedulerConfig configures a Scheduler.
type SchedulerConfig struct {
	// DB runs the scheduler's statements; a *pgxpool.Pool in production.
	DB store.DBTX
	// Schema holds the schedules and jobs tables (already validated).
	Schema string
	// Logger receives a line per tick that did something; nil discards.
	Logger *slog.Logger
	// Interval between ticks (±25% jitter). Default DefaultSchedulerInterval.
	Interval time.Duration
	// CatchUp is how many fires missed during downtime are enqueued (the
	// most recent ones). 0 means DefaultCatchUp; negative skips missed fires.
	CatchUp int
	// MisfireGrace is how late a fire may be and still be enqueued as on
	// time. Default DefaultMisfireGrace.
	MisfireGrace time.Duration
	// Now, when set, replaces the database clock (tests only). Production
	// compares every time with the database's now(), never a process clock.
	Now func() time.Time
}

// TickStats counts what one tick did.
type TickStats struct {
	// Due is the number of schedules found due.
	Due int
	// Fired is the number of jobs enqueued.
	Fired int
	// Duplicates is the number of fires whose unique key was already in
	// flight (nothing was inserted). Non-zero means someone moved a
	// schedule's next_fire_at backwards.
	Duplicates int
	// Lost is the number of schedules another process advanced first.
	Lost int
	// Skipped is the number of missed fires not enqueued (catch-up policy).
	Skipped int
	// Invalid is the number of schedules whose stored spec does not parse.
	Invalid int
}

// Scheduler enqueues the fires of recurring jobs. Any number of processes
// may run one: each fire is claimed by a compare-and-set on the schedule's
// next_fire_at in the same statement that enqueues it, so each fire time is
// enqueued exactly once.
type Scheduler struct {
	cfg    SchedulerConfig
	store  *store.Store
	ticker *service.Periodic

	mu      sync.Mutex           // guards invalid
	invalid map[string]time.Time // schedule name → updated_at already reported invalid
}

// NewScheduler returns a stopped Scheduler with defaults filled in.
func NewScheduler(cfg SchedulerConfig) *Scheduler {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultSchedulerInterval
	}
	if cfg.CatchUp == 0 {
		cfg.CatchUp = DefaultCatchUp
	}
	if cfg.MisfireGrace <= 0 {
		cfg.MisfireGrace = DefaultMisfireGrace
	}
	s := &Scheduler{cfg: cfg, store: store.New(cfg.Schema), invalid: map[string]time.Time{}}
	s.ticker = &service.Periodic{
		Name:       "scheduler",
		Interval:   cfg.Interval,
		RunAtStart: true,
		Logger:     cfg.Logger,
		Tick: func(ctx context.Context) error {
			_, err := s.Tick(ctx)
			return err
		},
	}
	return s
}

// Start launches the ticker.
func (s *Scheduler) Start(ctx context.Context) error { return s.ticker.Start(ctx) }

// Stop stops the ticker and waits for the current tick.
func (s *Scheduler) Stop(ctx context.Context) error { return s.ticker.Stop(ctx) }

// spec is a due schedule's expression for cron.Parse: its cron, or
// "@every Ns" for an interval.
func spec(d store.DueSchedule) string {
	if d.EverySeconds != nil {
		return fmt.Sprintf("@every %ds", *d.EverySeconds)
	}
	if d.Cron == nil {
		return ""
	}
	return *d.Cron
}

// Tick enqueues every due fire once: it reads the schedules whose
// next_fire_at has passed (by the database clock), plans their fires and
// advances each with a compare-and-set that enqueues the fires in the same
// statement. A schedule another process advanced first is left alone.
func (s *Scheduler) Tick(ctx context.Context) (TickStats, error) {
	var st TickStats
	for round := 0; round < schedulerRounds; round++ {
		due, err := s.due(ctx)
		if err != nil {
			return st, err
		}
		st.Due += len(due)
		for _, d := range due {
			if err := s.fire(ctx, d, &st); err != nil {
				return st, err
			}
		}
		if len(due) < schedulerBatch {
			break
		}
	}
	if s.cfg.Logger != nil && (st.Fired > 0 || st.Skipped > 0 || st.Duplicates > 0) {
		lvl := slog.LevelDebug
		if st.Skipped > 0 || st.Duplicates > 0 {
			lvl = slog.LevelInfo
		}
		s.cfg.Logger.LogAttrs(ctx, lvl, "skiplock: scheduler enqueued fires",
			slog.Int("schedules", st.Due), slog.Int("fired", st.Fired), slog.Int("missed_skipped", st.Skipped),
			slog.Int("duplicates", st.Duplicates), slog.Int("lost_to_other_process", st.Lost))
	}
	return st, nil
}

func (s *Scheduler) due(ctx context.Context) ([]store.DueSchedule, error) {
	var now *time.Time
	if s.cfg.Now != nil {
		t := s.cfg.Now()
		now = &t
	}
	qctx, cancel := context.WithTimeout(ctx, statementTimeout)
	defer cancel()
	due, err := s.store.DueSchedules(qctx, s.cfg.DB, now, schedulerBatch)
	if err != nil {
		return nil, fmt.Errorf("scheduler: read due schedules: %w", err)
	}
	return due, nil
}

func (s *Scheduler) fire(ctx context.Context, d store.DueSchedule, st *TickStats) error {
	sched, err := cron.Parse(spec(d), d.Timezone)
	if err != nil {
		st.Invalid++
		s.reportInvalid(ctx, d, err)
		return nil
	}
	var fires []time.Time
	var next time.Time
	if d.NextFireAt == nil {
		// New row written without a next fire time (plain SQL): start from now.
		next = sched.Next(d.Now)
	} else {
		p := PlanFires(sched, *d.NextFireAt, d.Now, s.cfg.CatchUp, s.cfg.MisfireGrace)
		fires, next, st.Skipped = p.Fires, p.Next, st.Skipped+p.Skipped
	}
	keys := make([]string, len(fires))
	for i, f := range fires {
		keys[i] = FireKey(d.Name, f)
	}
	var nextArg, lastArg *time.Time
	if !next.IsZero() {
		nextArg = &next // zero: never fires again; the row keeps NULL
	}
	if len(fires) > 0 {
		lastArg = &fires[len(fires)-1]
	}
	qctx, cancel := context.WithTimeout(ctx, statementTimeout)
	defer cancel()
	advanced, fired, dups, err := s.store.FireSchedule(qctx, s.cfg.DB, store.ScheduleFire{Name: d.Name, Was: d.NextFireAt,
		Next: nextArg, Last: lastArg, UpdatedAt: d.UpdatedAt, Fires: fires, Keys: keys})
	if err != nil {
		return fmt.Errorf("scheduler: fire schedule %q: %w", d.Name, err)
	}
	st.Fired += fired
	st.Duplicates += dups
	if !advanced {
		st.Lost++
	}
	return nil
}

// reportInvalid logs a schedule whose stored spec does not parse, once per
// version of the row.
func (s *Scheduler) reportInvalid(ctx context.Context, d store.DueSchedule, err error) {
	s.mu.Lock()
	seen, ok := s.invalid[d.Name]
	if !ok || !seen.Equal(d.UpdatedAt) {
		s.invalid[d.Name] = d.UpdatedAt
	}
	s.mu.Unlock()
	if ok && seen.Equal(d.UpdatedAt) || s.cfg.Logger == nil {
		return
	}
	msg := err.Error()
	if errors.Is(err, cron.ErrInvalidCron) {
		msg = strings.TrimPrefix(msg, cron.ErrInvalidCron.Error()+": ")
	}
	s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "skiplock: schedule has an invalid spec; not firing it",
		slog.String("schedule", d.Name), slog.String("error", msg))
}

// FirePlan is what a due schedule does at one tick.
type FirePlan struct {
	// Fires are the fire times to enqueue, oldest first.
	Fires []time.Time
	// Next is the schedule's next fire time after this tick (zero: never).
	Next time.Time
	// Skipped is how many missed fire times are not enqueued.
	Skipped int
}

// PlanFires decides which fire times a schedule enqueues at now, given next,
// the fire time stored as due. A fire late by at most grace is on time: it
// and every later fire up to now are enqueued (a slow tick loses nothing).
// When next is later than that, the scheduler was down: only the catchUp
// most recent fires up to now are enqueued (one catch-up run by default,
// not a storm; catchUp < 0 enqueues none) and the schedule resumes at its
// first fire after now. All times are UTC instants; DST is the cron
// package's business.
func PlanFires(s *cron.Schedule, next, now time.Time, catchUp int, grace time.Duration) FirePlan {
	if next.After(now) {
		return FirePlan{Next: next}
	}
	if now.Sub(next) <= grace {
		var p FirePlan
		f := next
		for !f.IsZero() && !f.After(now) && len(p.Fires) < maxOnTimeFires {
			p.Fires = append(p.Fires, f)
			f = s.Next(f)
		}
		if f.IsZero() || !f.After(now) {
			f = s.Next(now) // more than maxOnTimeFires on time: resume after now
		}
		p.Next = f
		return p
	}
	p := FirePlan{Next: s.Next(now)}
	if catchUp > 0 {
		// Missed's window is (last, now]; next itself is a fire.
		p.Fires = cron.Missed(s, next.Add(-time.Nanosecond), now, catchUp)
	}
	// Count what was dropped, bounded so a long downtime costs nothing.
	n := 0
	for f := next; !f.IsZero() && !f.After(now) && n <= maxOnTimeFires; f = s.Next(f) {
		n++
	}
	p.Skipped = max(n-len(p.Fires), 0)
	return p
}

// FireKey is the unique key of one fire of a schedule:
// "schedule:<name>:<fire time UTC, RFC 3339>".
func FireKey(name string, fire time.Time) string {
	return "schedule:" + name + ":" + fire.UTC().Format(time.RFC3339)
}
