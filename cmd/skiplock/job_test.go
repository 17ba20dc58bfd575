package main

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
)

// The job commands over every state: a job that failed once and then
// completed is found by `job get` with its attempts, outcome and last
// error; list, retry, cancel and delete act by id; bad input is a usage
// error naming the flag or argument; payloads only with --payload.
func TestJobCLI(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c, err := skiplock.NewClient(db.Pool, skiplock.Config{PollInterval: 20 * time.Millisecond,
		Backoff: func(int) time.Duration { return 0 }})
	require.NoError(t, err)
	ran := make(chan int, 2)
	require.NoError(t, skiplock.Handle(c, "welcome", func(ctx context.Context, j *skiplock.Job[map[string]any]) error {
		ran <- j.Attempt
		if j.Attempt == 1 {
			return errors.New("smtp: 550 mailbox unavailable")
		}
		return nil
	}))
	done, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "welcome", Payload: map[string]any{"secret": opsSecret}})
	require.NoError(t, err)
	require.NoError(t, c.Start(ctx))
	<-ran
	<-ran
	require.Eventually(t, func() bool {
		j, err := c.JobGet(ctx, done.ID)
		return err == nil && j.State == skiplock.JobStateCompleted
	}, 15*time.Second, 10*time.Millisecond)
	require.NoError(t, c.Stop(ctx))
	id := strconv.FormatInt(done.ID, 10)
	url := []string{"--database-url", db.URL}
	cli := func(args ...string) (int, string, string) { return runCLI(t, append(args, url...)...) }

	code, out, stderr := cli("job", "get", id, "--json")
	require.Equal(t, 0, code, stderr)
	require.NotContains(t, out, opsSecret, "no payload unless asked")
	var rec skiplock.JobRecord
	decodeJSON(t, out, &rec)
	require.Equal(t, skiplock.JobStateCompleted, rec.State)
	require.Equal(t, 2, rec.Attempt)
	require.Equal(t, "completed", rec.Outcome)
	require.Contains(t, rec.LastError, "smtp: 550")
	require.NotNil(t, rec.FinishedAt)

	code, out, stderr = cli("job", "get", id)
	require.Equal(t, 0, code, stderr)
	for _, want := range []string{"state", "completed", "attempts", "2 of 20", "finished_at", "last_error", "smtp: 550"} {
		require.Contains(t, out, want)
	}
	require.NotContains(t, out, opsSecret)
	code, out, stderr = cli("job", "get", id, "--payload")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, opsSecret)
	code, out, stderr = cli("job", "get", id, "--payload", "--json")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, `"payload":{"secret":"`+opsSecret+`"}`)

	code, out, stderr = cli("job", "list", "--state", "completed", "--json")
	require.Equal(t, 0, code, stderr)
	var listed []skiplock.JobRecord
	decodeJSON(t, out, &listed)
	require.Len(t, listed, 1)
	require.Equal(t, done.ID, listed[0].ID)
	code, out, stderr = cli("job", "list", "--kind", "nothing", "--json")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "[]\n", out)
	code, out, stderr = cli("job", "list", "--state", "completed", "--tenant", "nobody", "--json")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "[]\n", out, "the job has no tenant")

	// Retry the completed job: one new ready job.
	code, out, stderr = cli("job", "retry", id)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "job "+id+" retried as job ")
	newID := strings.TrimSpace(out[strings.LastIndex(out, " ")+1:])
	code, out, stderr = cli("job", "list", "--state", "ready")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "ID")
	require.Contains(t, out, newID)
	require.Equal(t, 1, int(opsCount(t, db, "SELECT count(*) FROM skiplock.jobs")))

	// Cancel it (ready → dead), then delete the dead letter.
	code, out, stderr = cli("job", "cancel", newID, "--json")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, `"was":"ready"`)
	code, out, stderr = cli("job", "get", newID, "--json")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, `"state":"dead"`)
	require.Contains(t, out, `"outcome":"cancelled"`)
	code, out, stderr = cli("job", "delete", newID)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "deleted (was dead)")
	code, _, stderr = cli("job", "get", newID)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "not found")

	// Refusals name the state; unknown ids say not found.
	code, _, stderr = cli("job", "delete", id)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "is completed; only ready, scheduled or dead jobs can be deleted")
	code, _, stderr = cli("job", "cancel", "999999")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "job 999999")

	// Usage errors (exit 2) name the field and change nothing.
	before := opsCount(t, db, "SELECT count(*) FROM skiplock.jobs_done")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"job", "get", "abc"}, "ID: must be a positive job id"},
		{[]string{"job", "get", "0"}, "ID: must be a positive job id"},
		{[]string{"job", "get"}, "ID: exactly one job id expected"},
		{[]string{"job", "retry", "1.5"}, "ID: must be a positive job id"},
		{[]string{"job", "delete", "1", "2"}, "ID: exactly one job id expected"},
		{[]string{"job", "list", "--state", "finished"}, `--state: unknown state "finished"`},
		{[]string{"job", "list", "--queue", "bad queue"}, "--queue:"},
		{[]string{"job", "list", "--kind", "bad kind!"}, "--kind:"},
		{[]string{"job", "list", "--limit", "0"}, "--limit:"},
		{[]string{"job", "list", "--before", "-1"}, "--before:"},
	} {
		code, _, stderr := cli(tc.args...)
		require.Equal(t, 2, code, "%v: %s", tc.args, stderr)
		require.Contains(t, stderr, tc.want, tc.args)
	}
	require.Equal(t, before, opsCount(t, db, "SELECT count(*) FROM skiplock.jobs_done"))
}

// work's history flags reach the Config; a bad retention is a usage error
// naming the flag.
func TestWorkHistoryFlags(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	code, _, stderr := runCLI(t, "work", "--database-url", db.URL, "--exec", "true", "--completed-retention", "10m")
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, "--completed-retention: must be at least 1h")
}

// So is a bad workflow retention.
func TestWorkWorkflowRetentionFlag(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	code, _, stderr := runCLI(t, "work", "--database-url", db.URL, "--exec", "true", "--workflow-retention", "30m")
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, "--workflow-retention: must be at least 1h")
}

// Two `job retry` of one dead job at once make one copy, and both print
// its id; a later retry prints it again, and `job cancel` run twice
// prints the same state.
func TestJobRetryTwiceConcurrently(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c, err := skiplock.NewClient(db.Pool, skiplock.Config{})
	require.NoError(t, err)
	r, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "twice", Delay: time.Hour})
	require.NoError(t, err)
	id := strconv.FormatInt(r.ID, 10)
	url := []string{"--database-url", db.URL}
	for range 2 {
		code, out, stderr := runCLI(t, append([]string{"job", "cancel", id, "--json"}, url...)...)
		require.Equal(t, 0, code, stderr)
		require.Contains(t, out, `"was":"scheduled"`)
	}

	outs := make(chan string, 2)
	for range 2 {
		go func() {
			code, out, stderr := runCLI(t, append([]string{"job", "retry", id}, url...)...)
			if code != 0 {
				out = "exit " + strconv.Itoa(code) + ": " + stderr
			}
			outs <- out
		}()
	}
	first, second := <-outs, <-outs
	require.Contains(t, first, "job "+id+" retried as job ")
	require.Equal(t, first, second, "both print the one copy")
	code, again, stderr := runCLI(t, append([]string{"job", "retry", id}, url...)...)
	require.Equal(t, 0, code, stderr)
	require.Equal(t, first, again)
	require.Equal(t, 1, int(opsCount(t, db, "SELECT count(*) FROM skiplock.jobs WHERE kind = 'twice'")), "one copy")
}
