package skiplock_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
)

// schedClient returns a client over its own pool (a "process") on url.
func schedClient(t *testing.T, url string, cfg skiplock.Config) *skiplock.Client {
	t.Helper()
	pcfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	pcfg.MaxConns = 8
	dbtest.TrimIdle(pcfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	c, err := skiplock.NewClient(pool, cfg)
	require.NoError(t, err)
	return c
}

// offlineClient is a client whose pool never connects: for validation.
func offlineClient(t *testing.T) *skiplock.Client {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	c, err := skiplock.NewClient(pool, skiplock.Config{})
	require.NoError(t, err)
	return c
}

func TestScheduleValidationNamesTheField(t *testing.T) {
	t.Parallel()
	c := offlineClient(t)
	ok := skiplock.Schedule{Name: "nightly", Cron: "30 2 * * *", Timezone: "America/New_York", Queue: "reports", Kind: "report"}
	require.NoError(t, c.ValidateSchedule(ok))
	for _, tc := range []struct {
		field string
		edit  func(*skiplock.Schedule)
	}{
		{"name", func(s *skiplock.Schedule) { s.Name = "" }},
		{"name", func(s *skiplock.Schedule) { s.Name = "has space" }},
		{"cron", func(s *skiplock.Schedule) { s.Cron = "" }},
		{"cron", func(s *skiplock.Schedule) { s.Cron = "61 * * * *" }},
		{"cron", func(s *skiplock.Schedule) { s.Cron = "0 0 30 2 *" }}, // never fires
		{"every", func(s *skiplock.Schedule) { s.Every = time.Minute }},
		{"every", func(s *skiplock.Schedule) { s.Cron, s.Timezone, s.Every = "", "", 1500*time.Millisecond }},
		{"every", func(s *skiplock.Schedule) { s.Cron, s.Timezone, s.Every = "", "", -time.Second }},
		{"timezone", func(s *skiplock.Schedule) { s.Timezone = "Mars/Olympus_Mons" }},
		{"timezone", func(s *skiplock.Schedule) { s.Timezone = "Local" }},
		{"timezone", func(s *skiplock.Schedule) { s.Cron, s.Every = "", time.Minute }},
		{"queue", func(s *skiplock.Schedule) { s.Queue = "bad queue" }},
		{"kind", func(s *skiplock.Schedule) { s.Kind = "" }},
		{"payload", func(s *skiplock.Schedule) { s.Payload = []byte(`[1]`) }},
		{"payload", func(s *skiplock.Schedule) { s.Payload = []byte(`{"a":"\u0000"}`) }},
		{"priority", func(s *skiplock.Schedule) { s.Priority = 5000 }},
		{"max_attempts", func(s *skiplock.Schedule) { s.MaxAttempts = -1 }},
	} {
		s := ok
		tc.edit(&s)
		err := c.ValidateSchedule(s)
		require.Error(t, err, "%+v", s)
		require.ErrorIs(t, err, skiplock.ErrInvalidSchedule)
		var fe *skiplock.FieldError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, tc.field, fe.Field, "%v", err)
	}
}

func TestAddListRemoveSchedule(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c, err := skiplock.NewClient(db.Pool, skiplock.Config{})
	require.NoError(t, err)

	get := func(name string) skiplock.ScheduleInfo {
		t.Helper()
		all, err := c.ScheduleList(ctx)
		require.NoError(t, err)
		for _, s := range all {
			if s.Name == name {
				return s
			}
		}
		t.Fatalf("schedule %s not listed", name)
		return skiplock.ScheduleInfo{}
	}
	var dbNow time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT now()").Scan(&dbNow))

	s := skiplock.Schedule{Name: "nightly", Cron: "30 2 * * *", Timezone: "America/New_York", Queue: "reports",
		Kind: "report", Payload: map[string]int{"v": 1}, Priority: 5}
	require.NoError(t, c.ScheduleAdd(ctx, s))
	first := get("nightly")
	require.Equal(t, "30 2 * * *", first.Cron)
	require.Equal(t, "America/New_York", first.Timezone)
	require.Equal(t, "reports", first.Queue)
	require.Equal(t, 5, first.Priority)
	require.Equal(t, 20, first.MaxAttempts, "the client's default is stored")
	require.JSONEq(t, `{"v":1}`, string(first.Payload))
	require.True(t, first.NextFireAt.After(dbNow), "a new schedule fires after now")
	require.LessOrEqual(t, first.NextFireAt.Sub(dbNow), 25*time.Hour)
	require.True(t, first.LastFireAt.IsZero())

	// Re-adding an unchanged schedule (every process declaring it at start-up) writes nothing.
	require.NoError(t, c.ScheduleAdd(ctx, s))
	again := get("nightly")
	require.Equal(t, first.UpdatedAt, again.UpdatedAt)
	require.Equal(t, first.NextFireAt, again.NextFireAt)

	// A change to the job keeps the next fire time; a change to the timing recomputes it.
	_, err = db.Pool.Exec(ctx, "UPDATE skiplock.schedules SET next_fire_at = '2030-01-01T00:00:00Z' WHERE name = 'nightly'")
	require.NoError(t, err)
	s.Payload = map[string]int{"v": 2}
	require.NoError(t, c.ScheduleAdd(ctx, s))
	changed := get("nightly")
	require.JSONEq(t, `{"v":2}`, string(changed.Payload))
	require.Equal(t, time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), changed.NextFireAt)
	s.Cron = "0 3 * * *"
	require.NoError(t, c.ScheduleAdd(ctx, s))
	require.True(t, get("nightly").NextFireAt.Before(dbNow.Add(25*time.Hour)))

	// Interval schedules; a batch of declarations is all or nothing.
	err = c.ScheduleDeclare(ctx,
		skiplock.Schedule{Name: "poll", Every: 90 * time.Second, Kind: "poll"},
		skiplock.Schedule{Name: "bad", Cron: "* * *", Kind: "x"})
	var fe *skiplock.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "schedules[1].cron", fe.Field)
	all, err := c.ScheduleList(ctx)
	require.NoError(t, err)
	require.Len(t, all, 1, "nothing written")
	require.NoError(t, c.ScheduleDeclare(ctx, skiplock.Schedule{Name: "poll", Every: 90 * time.Second, Kind: "poll"}))
	poll := get("poll")
	require.Equal(t, 90*time.Second, poll.Every)
	require.Equal(t, "@every 1m30s", poll.Spec())
	require.Equal(t, "default", poll.Queue)
	require.Zero(t, poll.NextFireAt.Unix()%90, "interval fires are aligned to the epoch")

	require.NoError(t, c.ScheduleRemove(ctx, "poll"))
	require.ErrorIs(t, c.ScheduleRemove(ctx, "poll"), skiplock.ErrScheduleNotFound)
	all, err = c.ScheduleList(ctx)
	require.NoError(t, err)
	require.Len(t, all, 1)
}

// Three processes run the scheduler for a one-second schedule for 20 s: one
// job per fire time, 20 ± 1 of them, contiguous, none twice. Jobs are run
// (and deleted) as they come, so a fire enqueued twice would run twice.
func TestSchedulerThreeProcessesOneSecondSchedule(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for 20 s")
	}
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()

	var mu sync.Mutex
	runs := map[string]int{} // unique key → times run
	clients := make([]*skiplock.Client, 3)
	for i := range clients {
		c := schedClient(t, db.URL, skiplock.Config{
			WorkerID: fmt.Sprintf("sched-%d", i),
			Pools:    []skiplock.WorkerPool{{Queues: []string{"ticks"}, Concurrency: 2}},
		})
		require.NoError(t, skiplock.Handle(c, "tick", func(ctx context.Context, j *skiplock.Job[struct{}]) error {
			mu.Lock()
			runs[j.UniqueKey]++
			mu.Unlock()
			return nil
		}))
		clients[i] = c
	}
	require.NoError(t, clients[0].ScheduleAdd(ctx, skiplock.Schedule{Name: "every-second", Every: time.Second, Queue: "ticks", Kind: "tick"}))
	list, err := clients[0].ScheduleList(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	first := list[0].NextFireAt // the database's clock; this machine's is the same
	for _, c := range clients {
		require.NoError(t, c.Start(ctx))
	}
	// The test's subject is 20 s of scheduling: fires first .. first+19s.
	time.Sleep(time.Until(first.Add(19*time.Second + 600*time.Millisecond)))
	for _, c := range clients {
		require.NoError(t, c.Stop(ctx))
	}

	var fires []time.Time
	mu.Lock()
	for k, n := range runs {
		require.Equal(t, 1, n, "fire %s ran %d times", k, n)
		fires = append(fires, fireTime(t, k))
	}
	mu.Unlock()
	rows, err := db.Pool.Query(ctx, "SELECT unique_key FROM skiplock.jobs WHERE queue = 'ticks'")
	require.NoError(t, err)
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	for _, k := range left {
		require.NotContains(t, runs, k, "fire %s both ran and is still queued", k)
		fires = append(fires, fireTime(t, k))
	}
	sort.Slice(fires, func(i, j int) bool { return fires[i].Before(fires[j]) })
	t.Logf("three schedulers, 20 s: %d fires (%d run, %d still queued), %s .. %s",
		len(fires), len(runs), len(left), fires[0].Format(time.TimeOnly), fires[len(fires)-1].Format(time.TimeOnly))
	require.InDelta(t, 20, len(fires), 1)
	for i := 1; i < len(fires); i++ {
		require.Equal(t, time.Second, fires[i].Sub(fires[i-1]), "fires are contiguous, none missed or doubled")
	}
}

func fireTime(t *testing.T, key string) time.Time {
	t.Helper()
	const prefix = "schedule:every-second:"
	require.Greater(t, len(key), len(prefix), key)
	at, err := time.Parse(time.RFC3339, key[len(prefix):])
	require.NoError(t, err, key)
	return at
}

// The "enqueue next run" pattern: each run completes itself and enqueues its
// successor in its own transaction; a second seed of the chain inserts
// nothing, so there is always exactly one link in flight.
func TestEnqueueNextChain(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := schedClient(t, db.URL, skiplock.Config{PollInterval: 20 * time.Millisecond,
		Pools: []skiplock.WorkerPool{{Queues: []string{"chain"}, Concurrency: 2}}})

	type args struct{ Tenant string }
	done := make(chan int, 10)
	var mu sync.Mutex
	runs := 0
	require.NoError(t, skiplock.Handle(c, "sync", func(ctx context.Context, j *skiplock.Job[args]) error {
		mu.Lock()
		runs++
		n := runs
		mu.Unlock()
		tx, err := c.Pool().Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit
		if _, err := tx.Exec(ctx, "CREATE TABLE IF NOT EXISTS sync_log (n int)"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "INSERT INTO sync_log VALUES ($1)", n); err != nil {
			return err
		}
		if n < 3 {
			res, err := skiplock.EnqueueNext(ctx, c, tx, j, 0, j.Args.Tenant)
			if err != nil {
				return err
			}
			if !res.Inserted {
				return errors.New("successor not inserted")
			}
		} else if err := skiplock.CompleteTx(ctx, c, tx, j); err != nil {
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		done <- n
		return nil
	}))

	seed := skiplock.EnqueueParams{Queue: "chain", Kind: "sync", Payload: args{Tenant: "acme"},
		UniqueKey: skiplock.NextRunKey("sync", "acme"), Delay: time.Hour}
	first, err := c.Enqueue(ctx, seed)
	require.NoError(t, err)
	require.True(t, first.Inserted)
	dup, err := c.Enqueue(ctx, seed) // a second process seeding the same chain
	require.NoError(t, err)
	require.False(t, dup.Inserted)
	require.Equal(t, first.ID, dup.ID)
	_, err = db.Pool.Exec(ctx, "UPDATE skiplock.jobs SET run_at = now() WHERE id = $1", first.ID)
	require.NoError(t, err)

	require.NoError(t, c.Start(ctx))
	defer func() { require.NoError(t, c.Stop(ctx)) }()
	for want := 1; want <= 3; want++ {
		select {
		case n := <-done:
			require.Equal(t, want, n)
		case <-time.After(10 * time.Second):
			t.Fatalf("run %d did not happen", want)
		}
	}
	require.Eventually(t, func() bool {
		var n int
		_ = db.Pool.QueryRow(ctx, "SELECT count(*) FROM skiplock.jobs WHERE queue = 'chain'").Scan(&n)
		return n == 0
	}, 5*time.Second, 10*time.Millisecond)
	var logged int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM sync_log").Scan(&logged))
	require.Equal(t, 3, logged)
}
