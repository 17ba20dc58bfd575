package maintenance

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/cron"
	"github.com/skiplock/skiplock/internal/dbtest"
)

func mustParse(t *testing.T, expr, tz string) *cron.Schedule {
	t.Helper()
	s, err := cron.Parse(expr, tz)
	require.NoError(t, err)
	return s
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

// simulate runs the scheduler's fire computation with an injected clock:
// starting from the schedule's first fire after start, it "ticks" at every
// step until end and returns every fire time enqueued, as a real scheduler
// storing next_fire_at would.
func simulate(t *testing.T, s *cron.Schedule, start, end time.Time, step time.Duration) []time.Time {
	t.Helper()
	next := s.Next(start)
	var fired []time.Time
	for now := start; !now.After(end); now = now.Add(step) {
		p := PlanFires(s, next, now, DefaultCatchUp, DefaultMisfireGrace)
		require.Zero(t, p.Skipped, "no fire may be skipped while the scheduler runs (now %s)", now)
		fired = append(fired, p.Fires...)
		require.True(t, p.Next.After(now), "next fire %s must be after now %s", p.Next, now)
		next = p.Next
	}
	return fired
}

func requireUnique(t *testing.T, fires []time.Time) {
	t.Helper()
	seen := map[time.Time]bool{}
	for _, f := range fires {
		require.False(t, seen[f], "fire time %s enqueued twice", f)
		seen[f] = true
	}
}

func TestPlanFiresNotDue(t *testing.T) {
	s := mustParse(t, "@every 10s", "")
	p := PlanFires(s, utc("2026-01-01T00:00:10Z"), utc("2026-01-01T00:00:09Z"), 1, DefaultMisfireGrace)
	require.Empty(t, p.Fires)
	require.Equal(t, utc("2026-01-01T00:00:10Z"), p.Next)
}

func TestPlanFiresSlowTickLosesNothing(t *testing.T) {
	s := mustParse(t, "@every 1s", "")
	// Three seconds late: within the grace, so every fire is enqueued.
	p := PlanFires(s, utc("2026-01-01T00:00:00Z"), utc("2026-01-01T00:00:03.4Z"), 1, 5*time.Second)
	require.Equal(t, []time.Time{
		utc("2026-01-01T00:00:00Z"), utc("2026-01-01T00:00:01Z"), utc("2026-01-01T00:00:02Z"), utc("2026-01-01T00:00:03Z"),
	}, p.Fires)
	require.Equal(t, utc("2026-01-01T00:00:04Z"), p.Next)
	require.Zero(t, p.Skipped)

	// A jittered ticker (0.75–1.25 × 1s) misses no fire of a one-second schedule.
	fired := simulate(t, s, utc("2026-01-01T00:00:00.3Z"), utc("2026-01-01T00:01:00.3Z"), 1250*time.Millisecond)
	requireUnique(t, fired)
	require.Len(t, fired, 60) // 00:00:01 .. 00:01:00
	for i := 1; i < len(fired); i++ {
		require.Equal(t, time.Second, fired[i].Sub(fired[i-1]))
	}
}

func TestPlanFiresCatchUpAfterDowntime(t *testing.T) {
	s := mustParse(t, "*/5 * * * *", "") // every five minutes
	next := utc("2026-01-01T00:05:00Z")
	now := utc("2026-01-01T03:02:00Z") // down for three hours

	p := PlanFires(s, next, now, 1, DefaultMisfireGrace)
	require.Equal(t, []time.Time{utc("2026-01-01T03:00:00Z")}, p.Fires, "one catch-up run: the most recent missed fire")
	require.Equal(t, utc("2026-01-01T03:05:00Z"), p.Next, "then resume on schedule")
	require.Equal(t, 35, p.Skipped) // 00:05 .. 03:00 is 36 fires

	p = PlanFires(s, next, now, 3, DefaultMisfireGrace)
	require.Equal(t, []time.Time{utc("2026-01-01T02:50:00Z"), utc("2026-01-01T02:55:00Z"), utc("2026-01-01T03:00:00Z")}, p.Fires)
	require.Equal(t, utc("2026-01-01T03:05:00Z"), p.Next)

	p = PlanFires(s, next, now, -1, DefaultMisfireGrace)
	require.Empty(t, p.Fires, "negative catch-up skips missed fires")
	require.Equal(t, utc("2026-01-01T03:05:00Z"), p.Next)
	require.Equal(t, 36, p.Skipped)

	// A one-second schedule down for a day: one job, not 86,400; the count
	// of skipped fires is bounded, not computed over the whole downtime.
	e := mustParse(t, "@every 1s", "")
	p = PlanFires(e, utc("2026-01-01T00:00:00Z"), utc("2026-01-02T00:00:00.5Z"), 1, DefaultMisfireGrace)
	require.Equal(t, []time.Time{utc("2026-01-02T00:00:00Z")}, p.Fires)
	require.Equal(t, utc("2026-01-02T00:00:01Z"), p.Next)
	require.Positive(t, p.Skipped)
}

// The scheduler's fire computation across both daylight-saving changes of
// 2026 in America/New_York, with an injected clock ticking every 20 seconds
// through each day: each wall-clock time fires once, a time skipped by
// spring-forward fires (shifted by the gap), a time repeated by fall-back
// does not fire twice, and wildcard schedules keep real-time beats.
func TestPlanFiresAcrossDST(t *testing.T) {
	const ny = "America/New_York"
	step := 20 * time.Second
	t.Run("spring forward, fixed time in the gap", func(t *testing.T) {
		s := mustParse(t, "30 2 * * *", ny)
		fired := simulate(t, s, utc("2026-03-07T00:00:00Z"), utc("2026-03-10T00:00:00Z"), step)
		require.Equal(t, []time.Time{
			utc("2026-03-07T07:30:00Z"), // 02:30 EST
			utc("2026-03-08T07:30:00Z"), // 02:30 does not exist: 03:30 EDT, once
			utc("2026-03-09T06:30:00Z"), // 02:30 EDT
		}, fired)
	})
	t.Run("spring forward, fixed time outside the gap", func(t *testing.T) {
		s := mustParse(t, "0 9 * * *", ny)
		fired := simulate(t, s, utc("2026-03-07T00:00:00Z"), utc("2026-03-10T00:00:00Z"), step)
		require.Equal(t, []time.Time{
			utc("2026-03-07T14:00:00Z"), utc("2026-03-08T13:00:00Z"), utc("2026-03-09T13:00:00Z"),
		}, fired)
	})
	t.Run("spring forward, hourly", func(t *testing.T) {
		s := mustParse(t, "0 * * * *", ny)
		fired := simulate(t, s, utc("2026-03-08T05:00:00Z"), utc("2026-03-09T05:00:00Z"), step)
		requireUnique(t, fired)
		require.Len(t, fired, 24) // 24 real hours; 02:00 local does not exist that day
		for i := 1; i < len(fired); i++ {
			require.Equal(t, time.Hour, fired[i].Sub(fired[i-1]))
		}
	})
	t.Run("fall back, fixed time in the repeated hour", func(t *testing.T) {
		s := mustParse(t, "30 1 * * *", ny)
		fired := simulate(t, s, utc("2026-10-31T00:00:00Z"), utc("2026-11-03T00:00:00Z"), step)
		require.Equal(t, []time.Time{
			utc("2026-10-31T05:30:00Z"), // 01:30 EDT
			utc("2026-11-01T05:30:00Z"), // 01:30 EDT, first pass only
			utc("2026-11-02T06:30:00Z"), // 01:30 EST
		}, fired)
	})
	t.Run("fall back, every 30 minutes", func(t *testing.T) {
		s := mustParse(t, "*/30 * * * *", ny)
		fired := simulate(t, s, utc("2026-11-01T04:00:00Z"), utc("2026-11-01T08:00:00Z"), step)
		requireUnique(t, fired)
		// 00:30 EDT .. 03:00 EST is four real hours: both passes through 01:xx fire.
		require.Len(t, fired, 8)
		for i := 1; i < len(fired); i++ {
			require.Equal(t, 30*time.Minute, fired[i].Sub(fired[i-1]))
		}
	})
	t.Run("a process clock is never consulted", func(t *testing.T) {
		// The same plan from a scheduler whose ticks are irregular (a
		// second process, a slow tick): same fires.
		s := mustParse(t, "30 1 * * *", ny)
		a := simulate(t, s, utc("2026-10-31T00:00:00Z"), utc("2026-11-03T00:00:00Z"), 7*time.Second)
		b := simulate(t, s, utc("2026-10-31T00:00:00Z"), utc("2026-11-03T00:00:00Z"), 4*time.Second)
		require.Equal(t, a, b)
	})
}

func TestFireKey(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	at := time.Date(2026, 11, 1, 1, 30, 0, 0, ny)
	require.Equal(t, "schedule:nightly:2026-11-01T05:30:00Z", FireKey("nightly", at))
}

// newSchedulerDB returns a migrated test database and a helper inserting a
// schedule row the way plain SQL would (next_fire_at NULL: the scheduler
// computes it from its clock on the first tick).
func newSchedulerDB(t *testing.T) (*pgxpool.Pool, func(name, cronExpr, tz string)) {
	t.Helper()
	db := dbtest.New(t)
	add := func(name, cronExpr, tz string) {
		_, err := db.Pool.Exec(context.Background(),
			`INSERT INTO skiplock.schedules (name, cron, timezone, queue, kind) VALUES ($1, $2, $3, 'sched', 'tick')`,
			name, cronExpr, tz)
		require.NoError(t, err)
	}
	return db.Pool, add
}

func fireKeys(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT unique_key FROM skiplock.jobs WHERE queue = 'sched' ORDER BY run_at, unique_key`)
	require.NoError(t, err)
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return keys
}

// The scheduler end to end (database, compare-and-set, enqueue) across both
// daylight-saving changes of 2026 in America/New_York, with an injected
// clock instead of real time, and three schedulers ticking concurrently:
// every fire time is enqueued exactly once, with its unique key.
func TestSchedulerTickAcrossDSTWithInjectedClock(t *testing.T) {
	t.Parallel()
	pool, add := newSchedulerDB(t)
	ctx := context.Background()
	const ny = "America/New_York"
	add("spring-fixed", "30 2 * * *", ny)
	add("fall-fixed", "30 1 * * *", ny)
	add("half-hourly", "*/30 * * * *", ny)

	var clock atomic.Int64 // unix nanoseconds, shared by the three schedulers
	now := func() time.Time { return time.Unix(0, clock.Load()).UTC() }
	scheds := make([]*Scheduler, 3)
	for i := range scheds {
		// Ticks are 5 minutes apart below: a grace above that keeps every fire on time.
		scheds[i] = NewScheduler(SchedulerConfig{DB: pool, Schema: "skiplock", Now: now, MisfireGrace: 10 * time.Minute})
	}
	run := func(from, to time.Time) TickStats {
		var total TickStats
		for at := from; !at.After(to); at = at.Add(5 * time.Minute) {
			clock.Store(at.UnixNano())
			var wg sync.WaitGroup
			stats := make([]TickStats, len(scheds))
			for i, s := range scheds {
				wg.Add(1)
				go func() {
					defer wg.Done()
					st, err := s.Tick(ctx)
					assert.NoError(t, err)
					stats[i] = st
				}()
			}
			wg.Wait()
			for _, st := range stats {
				total.Fired += st.Fired
				total.Duplicates += st.Duplicates
				total.Lost += st.Lost
				total.Skipped += st.Skipped
			}
		}
		return total
	}

	// Only the first two schedules matter in March; the half-hourly one
	// would flood the check, so it starts in the fall window below.
	_, err := pool.Exec(ctx, `UPDATE skiplock.schedules SET next_fire_at = 'infinity' WHERE name = 'half-hourly'`)
	require.NoError(t, err)
	st := run(utc("2026-03-07T00:00:00Z"), utc("2026-03-10T00:00:00Z"))
	require.Zero(t, st.Duplicates)
	require.Zero(t, st.Skipped)
	require.Equal(t, []string{
		"schedule:fall-fixed:2026-03-07T06:30:00Z",   // 01:30 EST
		"schedule:spring-fixed:2026-03-07T07:30:00Z", // 02:30 EST
		"schedule:fall-fixed:2026-03-08T06:30:00Z",   // 01:30 EST, just before the change
		"schedule:spring-fixed:2026-03-08T07:30:00Z", // 02:30 does not exist: 03:30 EDT, once
		"schedule:fall-fixed:2026-03-09T05:30:00Z",   // 01:30 EDT
		"schedule:spring-fixed:2026-03-09T06:30:00Z", // 02:30 EDT
	}, fireKeys(t, pool))
	require.Equal(t, 6, st.Fired)

	_, err = pool.Exec(ctx, `DELETE FROM skiplock.jobs; UPDATE skiplock.schedules SET next_fire_at = NULL`)
	require.NoError(t, err)
	st = run(utc("2026-10-31T12:00:00Z"), utc("2026-11-02T12:00:00Z"))
	require.Zero(t, st.Duplicates)
	keys := fireKeys(t, pool)
	var fixed, half []string
	for _, k := range keys {
		if strings.HasPrefix(k, "schedule:half-hourly:") {
			half = append(half, k)
		} else {
			fixed = append(fixed, k)
		}
	}
	require.Equal(t, []string{
		"schedule:fall-fixed:2026-11-01T05:30:00Z",   // 01:30 EDT; not again at 01:30 EST
		"schedule:spring-fixed:2026-11-01T07:30:00Z", // 02:30 EST
		"schedule:fall-fixed:2026-11-02T06:30:00Z",   // 01:30 EST
		"schedule:spring-fixed:2026-11-02T07:30:00Z", // 02:30 EST
	}, fixed)
	// Half-hourly follows real time: 48 real hours, both passes through the
	// repeated hour, each instant once.
	require.Len(t, half, 96)
	require.Contains(t, half, "schedule:half-hourly:2026-11-01T05:30:00Z") // 01:30 EDT
	require.Contains(t, half, "schedule:half-hourly:2026-11-01T06:30:00Z") // 01:30 EST
	require.Equal(t, len(keys), st.Fired)
	require.Positive(t, st.Lost, "the three schedulers competed for the same fires")
}

// A scheduler that was down: one catch-up run, then back on schedule.
func TestSchedulerCatchUpAfterDowntime(t *testing.T) {
	t.Parallel()
	pool, add := newSchedulerDB(t)
	ctx := context.Background()
	add("five-min", "*/5 * * * *", "UTC")
	var clock atomic.Int64
	s := NewScheduler(SchedulerConfig{DB: pool, Schema: "skiplock", Now: func() time.Time { return time.Unix(0, clock.Load()).UTC() }})
	tick := func(at string) TickStats {
		clock.Store(utc(at).UnixNano())
		st, err := s.Tick(ctx)
		require.NoError(t, err)
		return st
	}
	require.Zero(t, tick("2026-01-01T00:01:00Z").Fired) // sets next_fire_at to 00:05
	require.Equal(t, 1, tick("2026-01-01T00:05:01Z").Fired)
	st := tick("2026-01-01T06:02:00Z") // six hours later
	require.Equal(t, 1, st.Fired)
	require.Equal(t, 70, st.Skipped) // 00:10 .. 05:55; 06:00 is the catch-up run
	require.Equal(t, 1, tick("2026-01-01T06:05:00Z").Fired)
	require.Equal(t, []string{
		"schedule:five-min:2026-01-01T00:05:00Z",
		"schedule:five-min:2026-01-01T06:00:00Z",
		"schedule:five-min:2026-01-01T06:05:00Z",
	}, fireKeys(t, pool))
}

// A clock that goes back (an NTP step on the database server) never fires
// a time twice: the stored next_fire_at only moves forward.
func TestSchedulerClockGoesBack(t *testing.T) {
	t.Parallel()
	pool, add := newSchedulerDB(t)
	ctx := context.Background()
	add("minutely", "* * * * *", "UTC")
	var clock atomic.Int64
	s := NewScheduler(SchedulerConfig{DB: pool, Schema: "skiplock", Now: func() time.Time { return time.Unix(0, clock.Load()).UTC() }})
	fired := 0
	for _, at := range []string{
		"2026-01-01T00:00:30Z", "2026-01-01T00:01:00Z", "2026-01-01T00:02:00Z",
		"2026-01-01T00:00:45Z", "2026-01-01T00:01:30Z", // back by 75 s
		"2026-01-01T00:02:10Z", "2026-01-01T00:03:00Z",
	} {
		clock.Store(utc(at).UnixNano())
		st, err := s.Tick(ctx)
		require.NoError(t, err)
		require.Zero(t, st.Duplicates)
		fired += st.Fired
	}
	require.Equal(t, []string{
		"schedule:minutely:2026-01-01T00:01:00Z",
		"schedule:minutely:2026-01-01T00:02:00Z",
		"schedule:minutely:2026-01-01T00:03:00Z",
	}, fireKeys(t, pool))
	require.Equal(t, 3, fired)
}

// A row whose spec does not parse (written by hand) is reported and left
// alone; the others still fire.
func TestSchedulerSkipsInvalidRow(t *testing.T) {
	t.Parallel()
	pool, add := newSchedulerDB(t)
	ctx := context.Background()
	add("broken", "61 * * * *", "UTC")
	add("ok", "* * * * *", "UTC")
	var clock atomic.Int64
	s := NewScheduler(SchedulerConfig{DB: pool, Schema: "skiplock", Now: func() time.Time { return time.Unix(0, clock.Load()).UTC() }})
	for _, at := range []string{"2026-01-01T00:00:30Z", "2026-01-01T00:01:00Z"} {
		clock.Store(utc(at).UnixNano())
		st, err := s.Tick(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, st.Invalid)
	}
	require.Equal(t, []string{"schedule:ok:2026-01-01T00:01:00Z"}, fireKeys(t, pool))
}
