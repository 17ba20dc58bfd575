package skiplock

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/store"
)

// The finished jobs' channel carries three forms (heardDone): ids to look
// up; ids complete_archive completed at a time, without a result; and
// complete_archive_result's JSON with each result, and ids to look up.
// The told ends end their calls at once; the others are marked heard for
// the loop's look-up; an id nobody awaits and a payload not ours are
// ignored.
func TestHeardDoneForms(t *testing.T) {
	w := &waiters{byID: map[int64][]*waitCall{}, heard: map[int64]struct{}{}, kick: make(chan struct{}, 1)}
	await := func(ids ...int64) *waitCall {
		call := &waitCall{ids: ids, left: len(ids), ends: map[int64]JobEnd{}, done: make(chan struct{})}
		for _, id := range ids {
			w.byID[id] = append(w.byID[id], call)
		}
		return call
	}
	plain, told, withResult := await(1, 2), await(3, 4), await(5, 6, 7)
	at := time.Date(2026, 11, 29, 6, 0, 0, 123456000, time.UTC)

	w.heardDone("1,99,x")
	require.Equal(t, map[int64]struct{}{1: {}}, w.heard, "an id to look up; one nobody awaits and a stranger skipped")
	w.heardDone("3,4,98,c@" + itoa(at.UnixMicro()))
	<-told.done
	for _, id := range []int64{3, 4} {
		e := told.ends[id]
		require.Equal(t, JobStateCompleted, e.State)
		require.Nil(t, e.Result)
		require.True(t, at.Equal(*e.FinishedAt), "finished at the announced time")
	}
	w.heardDone(`{"at": ` + itoa(at.UnixMicro()) + `, "ended": {"5": {"url": "u"}, "6": null}, "look": [7, 97]}`)
	require.Equal(t, 1, withResult.left, "5 and 6 told, 7 to look up")
	require.JSONEq(t, `{"url": "u"}`, string(withResult.ends[5].Result))
	require.Nil(t, withResult.ends[6].Result, "a JSON null is no result")
	require.Contains(t, w.heard, int64(7))
	w.heardDone(`{"not": "ours"`)
	require.Equal(t, 2, plain.left, "nothing told for 1 and 2: they wait for the look-up")
	_, awaited := w.byID[3]
	require.False(t, awaited, "a told end is no longer awaited")
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

// A look-up that reports a job gone is read again before a caller is told
// (waiters.confirmGone): a completed job the first read missed is reported
// completed, one in flight stays awaited, one truly gone (deleted while
// ready) is reported gone; the disagreement is logged with the ids. The
// first read is made wrong here, on purpose, in front of a real database.
func TestWaitReadsAGoneJobAgain(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	var logs dbtest.LogBuffer
	c, err := NewClient(db.Pool, Config{Schema: db.Schema, PollOnly: true, PollInterval: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	require.NoError(t, Handle(c, "k", func(context.Context, *Job[struct{}]) error { return nil }))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	done, err := c.Enqueue(ctx, EnqueueParams{Kind: "k"})
	require.NoError(t, err)
	deleted, err := c.Enqueue(ctx, EnqueueParams{Kind: "k", RunAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	waiting, err := c.Enqueue(ctx, EnqueueParams{Kind: "k", Queue: "nobody-works-this-queue"})
	require.NoError(t, err)
	was, err := c.JobDelete(ctx, deleted.ID)
	require.NoError(t, err)
	require.Equal(t, JobStateScheduled, was)
	require.NoError(t, c.Start(ctx))
	defer func() { require.NoError(t, c.Stop(context.Background())) }()

	// One read of each is made wrong: the first that finds `done`
	// completed reports it gone, and the first that asks about `waiting`
	// (ready, in a queue no pool works) reports it gone too. The reads
	// after are the database's.
	w := c.waits()
	real := w.lookUp
	var mu sync.Mutex
	misread := map[int64]bool{}
	w.lookUp = func(ctx context.Context, ids []int64) ([]store.Finished, error) {
		fs, err := real(ctx, ids)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		for i, f := range fs {
			if f.ID == done.ID && f.State == string(JobStateCompleted) && !misread[done.ID] {
				fs[i] = store.Finished{ID: f.ID, State: string(JobStateGone)}
				misread[done.ID] = true
			}
		}
		if slices.Contains(ids, waiting.ID) && !misread[waiting.ID] {
			fs = append(fs, store.Finished{ID: waiting.ID, State: string(JobStateGone)})
			misread[waiting.ID] = true
		}
		return fs, nil
	}
	misreadOf := func(id int64) bool {
		mu.Lock()
		defer mu.Unlock()
		return misread[id]
	}

	ends, err := c.Wait(ctx, done.ID, deleted.ID)
	require.NoError(t, err)
	require.True(t, misreadOf(done.ID), "the first read of the completed job was made wrong")
	require.Equal(t, JobStateCompleted, ends[0].State, "the second read found the job completed")
	require.Equal(t, JobStateGone, ends[1].State, "a job deleted while ready is gone, twice over")

	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	ends, err = c.Wait(short, waiting.ID)
	require.True(t, misreadOf(waiting.ID), "the first read of the ready job was made wrong")
	require.ErrorIs(t, err, context.DeadlineExceeded, "a job in flight stays awaited, whatever one read said")
	require.Empty(t, ends[0].State)
	// The second read of waiting follows its first in the client's look-up
	// loop, not within this Wait's 300 ms: on a loaded machine its warning
	// came after the Wait returned (CI, 2026-12-02), so it is waited for.
	const warning = "a look-up found jobs in no table that a second found ended or in flight"
	for _, id := range []int64{done.ID, waiting.ID} {
		line := fmt.Sprintf("%s; reporting the second\" ids=[%d]", warning, id)
		assert.Eventually(t, func() bool { return strings.Contains(logs.String(), line) }, 10*time.Second, 20*time.Millisecond)
		require.Contains(t, logs.String(), line, "no warning for job %d", id) // the log as it is now
	}
}
