package skiplock_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
)

// requireField asserts err is a *FieldError for field (and ErrInvalidJob).
func requireField(t *testing.T, err error, field string) {
	t.Helper()
	require.ErrorIs(t, err, skiplock.ErrInvalidJob)
	var fe *skiplock.FieldError
	require.True(t, errors.As(err, &fe), "%v", err)
	require.Equal(t, field, fe.Field)
}

// requireStateError asserts err refuses action because the job is in state.
func requireStateError(t *testing.T, err error, state skiplock.JobState, action string) {
	t.Helper()
	require.ErrorIs(t, err, skiplock.ErrJobState)
	var se *skiplock.JobStateError
	require.True(t, errors.As(err, &se), "%v", err)
	require.Equal(t, state, se.State)
	require.Equal(t, action, se.Action)
}

// getEventually waits for the job's state (outcomes are written in batches,
// after the handler returns) and returns the record.
func getEventually(t *testing.T, c *skiplock.Client, id int64, state skiplock.JobState) *skiplock.JobRecord {
	t.Helper()
	var rec *skiplock.JobRecord
	require.Eventually(t, func() bool {
		r, err := c.JobGet(context.Background(), id)
		if err != nil {
			return false
		}
		rec = r
		return r.State == state
	}, 15*time.Second, 10*time.Millisecond, "job %d never reached %s", id, state)
	return rec
}

// "Did job 4711 run, when, after how many attempts, with what last error?"
// By default a finished job stays in the history and JobGet answers; JobList
// lists it, JobPayload shows its payload on request, JobRetry runs it again
// once; and the retention service retires it by dropping its day's
// partition.
func TestFinishedJobIsAnswerableThenRetired(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{Logger: quietLogger(), PollInterval: 20 * time.Millisecond,
		Backoff: func(int) time.Duration { return 0 }})
	require.Equal(t, 24*time.Hour, c.Config().CompletedRetention)
	ran := make(chan int, 4)
	require.NoError(t, skiplock.Handle(c, "welcome", func(ctx context.Context, j *skiplock.Job[map[string]any]) error {
		ran <- j.Attempt
		if j.Attempt == 1 {
			return errors.New("smtp: 550 mailbox unavailable")
		}
		return nil
	}))
	r, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "welcome", Payload: map[string]any{"user": "u-4711"}})
	require.NoError(t, err)
	require.NoError(t, c.Start(ctx))
	defer func() { require.NoError(t, c.Stop(ctx)) }()
	require.Equal(t, 1, <-ran)
	require.Equal(t, 2, <-ran)

	rec := getEventually(t, c, r.ID, skiplock.JobStateCompleted)
	require.Equal(t, "welcome", rec.Kind)
	require.Equal(t, skiplock.DefaultQueue, rec.Queue)
	require.Equal(t, 2, rec.Attempt)
	require.Equal(t, 20, rec.MaxAttempts)
	require.Equal(t, "completed", rec.Outcome)
	require.Contains(t, rec.LastError, "smtp: 550 mailbox unavailable")
	require.NotNil(t, rec.FinishedAt)
	require.NotNil(t, rec.AttemptedAt)
	require.False(t, rec.FinishedAt.Before(*rec.AttemptedAt))

	// The record carries no payload; JobPayload does, on request. (A
	// string no timestamp or id can contain: the number 4711 alone was
	// found in a finished_at of …:01.471167Z.)
	b, err := json.Marshal(rec)
	require.NoError(t, err)
	require.NotContains(t, string(b), "u-4711")
	require.NotContains(t, string(b), `"user"`)
	p, err := c.JobPayload(ctx, r.ID)
	require.NoError(t, err)
	require.JSONEq(t, `{"user": "u-4711"}`, string(p))

	listed, err := c.JobList(ctx, skiplock.JobListParams{State: skiplock.JobStateCompleted, Kind: "welcome"})
	require.NoError(t, err)
	require.Len(t, listed, 1)
	require.Equal(t, r.ID, listed[0].ID)
	require.Equal(t, 2, listed[0].Attempt)
	// Without a state, completed jobs are not listed.
	listed, err = c.JobList(ctx, skiplock.JobListParams{Kind: "welcome"})
	require.NoError(t, err)
	require.Empty(t, listed)

	// Retry: exactly one new job, which runs; the history row stays.
	newID, err := c.JobRetry(ctx, r.ID)
	require.NoError(t, err)
	require.NotEqual(t, r.ID, newID)
	require.Equal(t, 1, <-ran)
	require.Equal(t, 2, <-ran)
	again := getEventually(t, c, newID, skiplock.JobStateCompleted)
	require.Equal(t, 2, again.Attempt)
	rec, err = c.JobGet(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, skiplock.JobStateCompleted, rec.State)

	// A completed job is neither cancelled nor deleted: the history is
	// retired whole.
	_, err = c.JobCancel(ctx, r.ID)
	requireStateError(t, err, skiplock.JobStateCompleted, "cancel")
	_, err = c.JobDelete(ctx, r.ID)
	requireStateError(t, err, skiplock.JobStateCompleted, "delete")

	// Retention: the job finished three days ago (its row moves to the
	// default partition); a client's start-up partition pass files it
	// under its day and drops that day, being older than 24 hours.
	_, err = db.Pool.Exec(ctx, `UPDATE skiplock.jobs_done SET finished_at = now() - interval '3 days' WHERE id = $1`, r.ID)
	require.NoError(t, err)
	old := "jobs_done_" + time.Now().UTC().AddDate(0, 0, -3).Format("20060102")
	_, err = c.JobGet(ctx, r.ID)
	require.NoError(t, err, "still answerable until retention runs")

	c2 := newClient(t, db.Pool, skiplock.Config{Logger: quietLogger(), WorkerID: "retention-pass"})
	require.NoError(t, skiplock.Handle(c2, "other", func(context.Context, *skiplock.Job[map[string]any]) error { return nil }))
	require.NoError(t, c2.Start(ctx))
	defer func() { require.NoError(t, c2.Stop(ctx)) }()
	require.Eventually(t, func() bool {
		_, err := c.JobGet(ctx, r.ID)
		return errors.Is(err, skiplock.ErrJobNotFound)
	}, 15*time.Second, 20*time.Millisecond)
	var exists bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT to_regclass('skiplock.'||$1) IS NOT NULL`, old).Scan(&exists))
	require.False(t, exists, "partition %s must be dropped, not emptied row by row", old)
	// Today's history (the retried job) is untouched.
	_, err = c.JobGet(ctx, newID)
	require.NoError(t, err)
}

func TestDeleteCompletedKeepsNoHistory(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	_, err := skiplock.NewClient(db.Pool, skiplock.Config{DeleteCompleted: true, ArchiveCompleted: true})
	require.ErrorIs(t, err, skiplock.ErrInvalidConfig)
	var fe *skiplock.FieldError
	require.True(t, errors.As(err, &fe))
	require.Equal(t, "Config.DeleteCompleted", fe.Field)

	c := newClient(t, db.Pool, skiplock.Config{Logger: quietLogger(), DeleteCompleted: true, PollInterval: 20 * time.Millisecond})
	done := make(chan struct{}, 1)
	require.NoError(t, skiplock.Handle(c, "k", func(context.Context, *skiplock.Job[map[string]any]) error {
		done <- struct{}{}
		return nil
	}))
	r, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "k"})
	require.NoError(t, err)
	require.NoError(t, c.Start(ctx))
	defer func() { require.NoError(t, c.Stop(ctx)) }()
	<-done
	waitNoJobs(t, db.Pool)
	_, err = c.JobGet(ctx, r.ID)
	require.ErrorIs(t, err, skiplock.ErrJobNotFound)
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM skiplock.jobs_done`).Scan(&n))
	require.Zero(t, n)
}

// Dead jobs: found with their reason, retried exactly once (racing
// retries create one job), deleted.
func TestDeadJobLookupRetryDelete(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{Logger: quietLogger()})
	for _, kind := range []string{"a", "b"} {
		_, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: kind, Payload: map[string]any{"n": 1}})
		require.NoError(t, err)
	}
	var ids []int64
	rows, err := db.Pool.Query(ctx, `SELECT id FROM skiplock.jobs ORDER BY id`)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	require.Len(t, ids, 2)
	for _, id := range ids {
		st, err := c.JobCancel(ctx, id) // ready → dead (cancelled)
		require.NoError(t, err)
		require.Equal(t, skiplock.JobStateReady, st)
	}
	rec, err := c.JobGet(ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, skiplock.JobStateDead, rec.State)
	require.Equal(t, "cancelled", rec.Outcome)
	require.NotNil(t, rec.FinishedAt)
	// A second cancel answers what the first did.
	st, err := c.JobCancel(ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, skiplock.JobStateReady, st)

	dead, err := c.JobList(ctx, skiplock.JobListParams{State: skiplock.JobStateDead})
	require.NoError(t, err)
	require.Len(t, dead, 2)
	require.Equal(t, ids[1], dead[0].ID, "newest first")
	page, err := c.JobList(ctx, skiplock.JobListParams{State: skiplock.JobStateDead, BeforeID: dead[0].ID, Limit: 1})
	require.NoError(t, err)
	require.Len(t, page, 1)
	require.Equal(t, ids[0], page[0].ID)

	// Eight racing retries of one dead job create exactly one job, and all
	// eight answer its id: none says "not found".
	results := make(chan error, 8)
	newIDs := make(chan int64, 8)
	for range 8 {
		go func() {
			id, err := c.JobRetry(ctx, ids[0])
			newIDs <- id
			results <- err
		}()
	}
	for range 8 {
		require.NoError(t, <-results)
	}
	retried := <-newIDs
	for range 7 {
		require.Equal(t, retried, <-newIDs)
	}
	again, err := c.JobRetry(ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, retried, again, "a later retry answers the same copy")
	rec, err = c.JobGet(ctx, retried)
	require.NoError(t, err)
	require.Equal(t, skiplock.JobStateReady, rec.State)
	require.Equal(t, "a", rec.Kind)
	require.Zero(t, rec.Attempt)
	p, err := c.JobPayload(ctx, retried)
	require.NoError(t, err)
	require.JSONEq(t, `{"n": 1}`, string(p))
	require.Equal(t, 1, countJobs(t, db.Pool, "kind = 'a'"))

	// A job in flight is not retried.
	_, err = c.JobRetry(ctx, retried)
	requireStateError(t, err, skiplock.JobStateReady, "retry")

	// Delete: the dead letter and the ready job; then they are gone, and a
	// repeated delete answers what the first did.
	st, err = c.JobDelete(ctx, ids[1])
	require.NoError(t, err)
	require.Equal(t, skiplock.JobStateDead, st)
	st, err = c.JobDelete(ctx, retried)
	require.NoError(t, err)
	require.Equal(t, skiplock.JobStateReady, st)
	for id, was := range map[int64]skiplock.JobState{ids[1]: skiplock.JobStateDead, retried: skiplock.JobStateReady} {
		_, err = c.JobGet(ctx, id)
		require.ErrorIs(t, err, skiplock.ErrJobNotFound)
		st, err = c.JobDelete(ctx, id)
		require.NoError(t, err)
		require.Equal(t, was, st)
	}
	_, err = c.JobDelete(ctx, 999999)
	require.ErrorIs(t, err, skiplock.ErrJobNotFound)
}

// Racing retries of one completed job make one copy; each answers its id.
func TestRetryCompletedJobOnce(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{Logger: quietLogger(), PollInterval: 20 * time.Millisecond})
	require.NoError(t, skiplock.Handle(c, "once", func(context.Context, *skiplock.Job[map[string]any]) error { return nil }))
	r, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "once"})
	require.NoError(t, err)
	require.NoError(t, c.Start(ctx))
	getEventually(t, c, r.ID, skiplock.JobStateCompleted)
	require.NoError(t, c.Stop(ctx))

	ids := make(chan int64, 8)
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			id, err := c.JobRetry(ctx, r.ID)
			ids <- id
			errs <- err
		}()
	}
	first := int64(0)
	for range 8 {
		require.NoError(t, <-errs)
		id := <-ids
		if first == 0 {
			first = id
		}
		require.Equal(t, first, id)
	}
	require.NotEqual(t, r.ID, first)
	require.Equal(t, 1, countJobs(t, db.Pool, "kind = 'once'"), "one copy")
}

// A retried dead job whose unique key is in flight again stays dead.
func TestRetryDeadJobUniqueKeyInFlight(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{Logger: quietLogger()})
	r, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "u", UniqueKey: "order-1"})
	require.NoError(t, err)
	_, err = c.JobCancel(ctx, r.ID)
	require.NoError(t, err)
	again, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "u", UniqueKey: "order-1"})
	require.NoError(t, err)
	require.True(t, again.Inserted)
	_, err = c.JobRetry(ctx, r.ID)
	require.Error(t, err)
	require.Contains(t, err.Error(), "order-1")
	rec, err := c.JobGet(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, skiplock.JobStateDead, rec.State, "a refused retry leaves the dead letter in place")
}

// Scheduled and running jobs: found in their state; a running job's
// handler context is cancelled by JobCancel and it ends dead (cancelled);
// a running job cannot be deleted or retried.
func TestRunningJobCancelAndScheduled(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{Logger: quietLogger(), PollInterval: 20 * time.Millisecond})
	started := make(chan int64, 1)
	cancelled := make(chan error, 1)
	require.NoError(t, skiplock.Handle(c, "long", func(ctx context.Context, j *skiplock.Job[map[string]any]) error {
		started <- j.ID
		<-ctx.Done()
		cancelled <- context.Cause(ctx)
		return ctx.Err()
	}))
	later, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "long", Delay: time.Hour})
	require.NoError(t, err)
	rec, err := c.JobGet(ctx, later.ID)
	require.NoError(t, err)
	require.Equal(t, skiplock.JobStateScheduled, rec.State)
	listed, err := c.JobList(ctx, skiplock.JobListParams{State: skiplock.JobStateScheduled})
	require.NoError(t, err)
	require.Len(t, listed, 1)
	acme, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "long", Delay: time.Hour, Tenant: "acme"})
	require.NoError(t, err)
	listed, err = c.JobList(ctx, skiplock.JobListParams{Tenant: "acme"})
	require.NoError(t, err)
	require.Len(t, listed, 1, "a tenant's jobs only")
	require.Equal(t, acme.ID, listed[0].ID)
	require.Equal(t, "acme", listed[0].Tenant)

	r, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "long"})
	require.NoError(t, err)
	require.NoError(t, c.Start(ctx))
	defer func() { require.NoError(t, c.Stop(ctx)) }()
	require.Equal(t, r.ID, <-started)
	rec = getEventually(t, c, r.ID, skiplock.JobStateRunning)
	require.Equal(t, 1, rec.Attempt)
	require.NotEmpty(t, rec.LockedBy)
	require.NotNil(t, rec.LeaseExpiresAt)
	_, err = c.JobDelete(ctx, r.ID)
	requireStateError(t, err, skiplock.JobStateRunning, "delete")
	_, err = c.JobRetry(ctx, r.ID)
	requireStateError(t, err, skiplock.JobStateRunning, "retry")

	st, err := c.JobCancel(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, skiplock.JobStateRunning, st)
	require.Error(t, <-cancelled)
	rec = getEventually(t, c, r.ID, skiplock.JobStateDead)
	require.Equal(t, "cancelled", rec.Outcome)

	st, err = c.JobDelete(ctx, later.ID)
	require.NoError(t, err)
	require.Equal(t, skiplock.JobStateScheduled, st)

	// Cancel reports the state job list shows: scheduled, not ready.
	soon, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "long", Delay: time.Hour})
	require.NoError(t, err)
	st, err = c.JobCancel(ctx, soon.ID)
	require.NoError(t, err)
	require.Equal(t, skiplock.JobStateScheduled, st)
	st, err = c.JobCancel(ctx, soon.ID)
	require.NoError(t, err)
	require.Equal(t, skiplock.JobStateScheduled, st, "a repeated cancel answers the first")
	st, err = c.JobCancel(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, skiplock.JobStateRunning, st, "the running job's repeated cancel too")
}

// A handler's WithMaxAttempts is the budget stored with the job: stamped by
// Enqueue on the client that registered it, and written with the first
// failure when another client enqueued the job.
func TestHandlerMaxAttemptsIsStored(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	producer := newClient(t, db.Pool, skiplock.Config{Logger: quietLogger()})
	elsewhere, err := producer.Enqueue(ctx, skiplock.EnqueueParams{Kind: "flaky"})
	require.NoError(t, err)
	rec, err := producer.JobGet(ctx, elsewhere.ID)
	require.NoError(t, err)
	require.Equal(t, skiplock.DefaultMaxAttempts, rec.MaxAttempts)

	c := newClient(t, db.Pool, skiplock.Config{Logger: quietLogger(), PollInterval: 20 * time.Millisecond,
		Backoff: func(int) time.Duration { return 0 }})
	seen := make(chan int, 16)
	require.NoError(t, skiplock.Handle(c, "flaky", func(_ context.Context, j *skiplock.Job[map[string]any]) error {
		seen <- j.MaxAttempts
		return errors.New("always")
	}, skiplock.WithMaxAttempts(3)))
	here, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "flaky"})
	require.NoError(t, err)
	rec, err = c.JobGet(ctx, here.ID)
	require.NoError(t, err)
	require.Equal(t, 3, rec.MaxAttempts, "stamped at enqueue")

	require.NoError(t, c.Start(ctx))
	for _, id := range []int64{elsewhere.ID, here.ID} {
		rec = getEventually(t, c, id, skiplock.JobStateDead)
		require.Equal(t, 3, rec.Attempt)
		require.Equal(t, 3, rec.MaxAttempts, "job %d: the budget that decided", id)
	}
	require.NoError(t, c.Stop(ctx))
	close(seen)
	for m := range seen {
		require.Equal(t, 3, m, "the handler sees the effective budget")
	}
}

// Bad input is an error naming the field, and changes nothing.
func TestJobLookupBadInput(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{Logger: quietLogger()})
	r, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "k"})
	require.NoError(t, err)

	_, err = c.JobGet(ctx, 0)
	requireField(t, err, "id")
	_, err = c.JobPayload(ctx, -1)
	requireField(t, err, "id")
	_, err = c.JobRetry(ctx, 0)
	requireField(t, err, "id")
	_, err = c.JobCancel(ctx, -5)
	requireField(t, err, "id")
	_, err = c.JobDelete(ctx, 0)
	requireField(t, err, "id")
	for _, tc := range []struct {
		p     skiplock.JobListParams
		field string
	}{
		{skiplock.JobListParams{State: "finished"}, "state"},
		{skiplock.JobListParams{Queue: "bad queue"}, "queue"},
		{skiplock.JobListParams{Kind: "bad kind!"}, "kind"},
		{skiplock.JobListParams{Limit: -1}, "limit"},
		{skiplock.JobListParams{Limit: skiplock.MaxJobListLimit + 1}, "limit"},
		{skiplock.JobListParams{BeforeID: -1}, "before_id"},
		{skiplock.JobListParams{Tenant: "bad\x00tenant"}, "tenant"},
	} {
		_, err := c.JobList(ctx, tc.p)
		requireField(t, err, tc.field)
	}
	_, err = skiplock.ParseJobState("bogus")
	requireField(t, err, "state")
	for _, st := range skiplock.JobStates {
		got, err := skiplock.ParseJobState(string(st))
		require.NoError(t, err)
		require.Equal(t, st, got)
	}
	_, err = c.JobGet(ctx, r.ID+1000)
	require.ErrorIs(t, err, skiplock.ErrJobNotFound)
	rec, err := c.JobGet(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, skiplock.JobStateReady, rec.State)
}

// Metadata (trace context, tags) is part of a job's record wherever the job
// is, and a retry carries it to the new job.
func TestJobGetShowsMetadataAndRetryKeepsIt(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{Logger: quietLogger()})
	res, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "m", Payload: map[string]any{"n": 1},
		Metadata: skiplock.Metadata{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}})
	require.NoError(t, err)
	rec, err := c.JobGet(ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", rec.Metadata.Get("traceparent"))

	_, err = c.JobCancel(ctx, res.ID) // ready → dead, metadata kept
	require.NoError(t, err)
	rec, err = c.JobGet(ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, skiplock.JobStateDead, rec.State)
	require.Equal(t, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", rec.Metadata.Get("traceparent"))

	newID, err := c.JobRetry(ctx, res.ID)
	require.NoError(t, err)
	again, err := c.JobGet(ctx, newID)
	require.NoError(t, err)
	require.Equal(t, skiplock.JobStateReady, again.State)
	require.Equal(t, rec.Metadata, again.Metadata)
}
