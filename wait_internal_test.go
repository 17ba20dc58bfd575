package skiplock

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
