package skiplock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
)

// TestDeadLetterTriage drives the public dead-letter methods the CLI and the
// dashboard are built on: groups by kind, counts, a replay that refuses to
// select everything and turns each selected dead letter into one new job,
// and a purge.
func TestDeadLetterTriage(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{})

	for _, kind := range []string{"a", "a", "a", "b"} {
		res, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: kind})
		require.NoError(t, err)
		_, err = c.JobCancel(ctx, res.ID) // a ready job goes to the dead-letter table
		require.NoError(t, err)
	}

	groups, err := c.DeadLetterList(ctx, "", 0)
	require.NoError(t, err)
	require.Len(t, groups, 2)
	require.Equal(t, "a", groups[0].Kind, "biggest group first")
	require.EqualValues(t, 3, groups[0].Count)
	require.NotZero(t, groups[0].SampleID)
	only, err := c.DeadLetterList(ctx, "b", 10)
	require.NoError(t, err)
	require.Len(t, only, 1)
	_, err = c.DeadLetterList(ctx, "", skiplock.MaxDeadLetterListLimit+1)
	requireField(t, err, "limit")

	n, err := c.DeadLetterCount(ctx, skiplock.DeadLetterFilter{Kind: "a"})
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
	n, err = c.DeadLetterCount(ctx, skiplock.DeadLetterFilter{})
	require.NoError(t, err)
	require.EqualValues(t, 4, n, "an empty filter counts every dead letter")

	// Neither a replay nor a purge selects every dead letter.
	_, err = c.DeadLetterReplay(ctx, skiplock.DeadLetterFilter{}, skiplock.DeadLetterReplayOptions{})
	requireField(t, err, "filter")
	_, err = c.DeadLetterPurge(ctx, skiplock.DeadLetterFilter{})
	requireField(t, err, "filter")
	_, err = c.DeadLetterReplay(ctx, skiplock.DeadLetterFilter{Kind: "a", Limit: -1}, skiplock.DeadLetterReplayOptions{})
	requireField(t, err, "limit")
	_, err = c.DeadLetterReplay(ctx, skiplock.DeadLetterFilter{IDs: []int64{0}}, skiplock.DeadLetterReplayOptions{})
	requireField(t, err, "id")
	// A purge may select by age alone: none died an hour ago.
	purged, err := c.DeadLetterPurge(ctx, skiplock.DeadLetterFilter{OlderThan: time.Hour})
	require.NoError(t, err)
	require.Zero(t, purged)

	var progress []int
	replayed, err := c.DeadLetterReplay(ctx, skiplock.DeadLetterFilter{Kind: "a", Limit: 2},
		skiplock.DeadLetterReplayOptions{Progress: func(done int) { progress = append(progress, done) }})
	require.NoError(t, err)
	require.Equal(t, 2, replayed)
	require.NotEmpty(t, progress)
	require.Equal(t, 2, progress[len(progress)-1])
	require.Equal(t, 2, countJobs(t, db.Pool, "kind = 'a'"), "each replayed dead letter is one new job")
	n, err = c.DeadLetterCount(ctx, skiplock.DeadLetterFilter{Kind: "a"})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)

	purged, err = c.DeadLetterPurge(ctx, skiplock.DeadLetterFilter{Kind: "b"})
	require.NoError(t, err)
	require.EqualValues(t, 1, purged)
	n, err = c.DeadLetterCount(ctx, skiplock.DeadLetterFilter{})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
}

// TestWorkflowLookupsOfUnknownIDs: the lookups the dashboard's workflow page
// makes answer plainly for ids that name nothing.
func TestWorkflowLookupsOfUnknownIDs(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{})
	waits, err := c.WorkflowWaitList(ctx, 424242)
	require.NoError(t, err)
	require.Empty(t, waits)
	_, err = c.WorkflowTaskOutput(ctx, 424242, 1)
	require.ErrorIs(t, err, skiplock.ErrTaskNotFound)
}
