package worker

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/errtext"
	"github.com/skiplock/skiplock/internal/store"
)

// Every row of the decision table: the handler's result and the run's state
// in, the outcome out.
func TestDecide(t *testing.T) {
	boom := errors.New("boom")
	backoff := func(attempt int) time.Duration { return time.Duration(attempt) * time.Second }
	first := &Job{ClaimedRow: store.ClaimedRow{Attempt: 1, MaxAttempts: 3}}
	last := &Job{ClaimedRow: store.ClaimedRow{Attempt: 3, MaxAttempts: 3}}
	hostile := errors.New("crash\x00dump \xff\xfe end")
	huge := errors.New(strings.Repeat("é", errtext.MaxBytes)) // 2 bytes a character

	cases := []struct {
		name string
		job  *Job
		res  Result
		st   RunState
		want Outcome
	}{
		{"success", first, Result{}, RunState{}, Outcome{Kind: Complete}},
		{"success keeps the result and the last progress", first, Result{Value: []byte(`{"u":1}`), Progress: []byte(`{"done":3}`)}, RunState{},
			Outcome{Kind: Complete, Result: []byte(`{"u":1}`), Progress: []byte(`{"done":3}`)}},
		{"a failure drops the result: a failed job's result is its last error", last, Result{Err: boom, Value: []byte(`1`)}, RunState{},
			Outcome{Kind: DeadLetter, Reason: "error", Error: "boom"}},
		{"a job the handler sent back to sleep itself writes nothing", first, Result{Err: boom, SnoozedTx: true}, RunState{},
			Outcome{Kind: Nothing, SnoozedTx: true}},
		{"a sleeping job's handler cancelled meanwhile writes nothing", first, Result{Err: boom, SnoozedTx: true},
			RunState{CancelRequested: true}, Outcome{Kind: Nothing, SnoozedTx: true}},
		{"failure with attempts left is retried after backoff", first, Result{Err: boom, Backoff: backoff}, RunState{},
			Outcome{Kind: Retry, Reason: "error", Delay: time.Second, Error: "boom"}},
		{"failure without backoff is retried at once", first, Result{Err: boom}, RunState{},
			Outcome{Kind: Retry, Reason: "error", Error: "boom"}},
		{"failure at the last attempt is dead-lettered", last, Result{Err: boom, Backoff: backoff}, RunState{},
			Outcome{Kind: DeadLetter, Reason: "error", Error: "boom"}},
		{"the handler's attempt cap wins when lower, and is written", first, Result{Err: boom, Backoff: backoff, MaxAttempts: 1}, RunState{},
			Outcome{Kind: DeadLetter, Reason: "error", Error: "boom", MaxAttempts: 1}},
		{"a retry under the handler's cap writes the cap", first, Result{Err: boom, Backoff: backoff, MaxAttempts: 2}, RunState{},
			Outcome{Kind: Retry, Reason: "error", Delay: time.Second, Error: "boom", MaxAttempts: 2}},
		{"the job's max_attempts wins when lower", first, Result{Err: boom, Backoff: backoff, MaxAttempts: 10}, RunState{},
			Outcome{Kind: Retry, Reason: "error", Delay: time.Second, Error: "boom"}},
		{"panic", last, Result{Err: boom, Panicked: true}, RunState{},
			Outcome{Kind: DeadLetter, Reason: "panic", Error: "boom"}},
		{"panic with attempts left", first, Result{Err: boom, Panicked: true, Backoff: backoff}, RunState{},
			Outcome{Kind: Retry, Reason: "panic", Delay: time.Second, Error: "boom"}},
		{"timeout", last, Result{Err: boom, TimedOut: 2 * time.Second}, RunState{},
			Outcome{Kind: DeadLetter, Reason: "timeout", Error: "timed out after 2s: boom"}},
		{"snooze spends no attempt", last, Result{Err: boom, Snooze: true, SnoozeFor: time.Minute}, RunState{},
			Outcome{Kind: Snooze, Delay: time.Minute}},
		{"discard is final whatever attempts remain", first, Result{Err: boom, Final: "discarded", Backoff: backoff}, RunState{},
			Outcome{Kind: DeadLetter, Reason: "discarded", Error: "boom"}},
		{"unknown kind", first, Result{Err: boom, Final: "unknown_kind"}, RunState{},
			Outcome{Kind: DeadLetter, Reason: "unknown_kind", Error: "boom"}},
		{"control outcomes beat a timeout", first, Result{Err: boom, Final: "cancelled", TimedOut: time.Second}, RunState{},
			Outcome{Kind: DeadLetter, Reason: "cancelled", Error: "boom"}},
		{"CompleteTx and nil: a fenced fallback failure", first, Result{CompletedTx: true, Backoff: backoff}, RunState{},
			Outcome{Kind: Retry, Reason: "error", Delay: time.Second, Error: errNotCommitted, CompletedTx: true}},
		{"CompleteTx and an error: an ordinary failure", last, Result{Err: boom, CompletedTx: true}, RunState{},
			Outcome{Kind: DeadLetter, Reason: "error", Error: "boom"}},
		{"CompleteTx found the lease gone", first, Result{LeaseLostInTx: true}, RunState{}, Outcome{Kind: Nothing}},

		{"never started: handed back, attempt refunded", first, Result{}, RunState{HandedBack: true},
			Outcome{Kind: Release, Refund: true}},
		{"abandoned at hard stop: handed back, attempt spent", first, Result{}, RunState{Abandoned: true},
			Outcome{Kind: Release}},
		{"lease lost: nothing written", first, Result{Err: boom}, RunState{LeaseLost: true}, Outcome{Kind: Nothing}},
		{"lease lost after success: nothing written", first, Result{}, RunState{LeaseLost: true}, Outcome{Kind: Nothing}},
		{"lease lost after CompleteTx: nothing written, counted complete", first, Result{CompletedTx: true},
			RunState{LeaseLost: true}, Outcome{Kind: Nothing, CompletedTx: true}},
		{"cancelled while failing", first, Result{Err: boom, Backoff: backoff}, RunState{CancelRequested: true},
			Outcome{Kind: DeadLetter, Reason: "cancelled", Error: "cancelled while running"}},
		{"cancelled while snoozing", first, Result{Err: boom, Snooze: true}, RunState{CancelRequested: true},
			Outcome{Kind: DeadLetter, Reason: "cancelled", Error: "cancelled while running"}},
		{"cancelled but succeeded", first, Result{}, RunState{CancelRequested: true}, Outcome{Kind: Complete}},
		{"cancelled after CompleteTx: the completion stands", first, Result{CompletedTx: true, Backoff: backoff},
			RunState{CancelRequested: true, HardStop: true},
			Outcome{Kind: Retry, Reason: "error", Delay: time.Second, Error: errNotCommitted, CompletedTx: true}},
		{"hard stop while failing: handed back, attempt spent", last, Result{Err: boom}, RunState{HardStop: true},
			Outcome{Kind: Release}},
		{"hard stop but succeeded", first, Result{}, RunState{HardStop: true}, Outcome{Kind: Complete}},
		{"cancel beats hard stop", first, Result{Err: boom}, RunState{CancelRequested: true, HardStop: true},
			Outcome{Kind: DeadLetter, Reason: "cancelled", Error: "cancelled while running"}},

		{"hostile error text is made storable", last, Result{Err: hostile}, RunState{},
			Outcome{Kind: DeadLetter, Reason: "error", Error: "crash\uFFFDdump \uFFFD end"}},
		{"hostile final error text is made storable", first, Result{Err: hostile, Final: "discarded"}, RunState{},
			Outcome{Kind: DeadLetter, Reason: "discarded", Error: "crash\uFFFDdump \uFFFD end"}},
		{"huge error text is bounded", last, Result{Err: huge}, RunState{},
			Outcome{Kind: DeadLetter, Reason: "error", Error: strings.Repeat("é", (errtext.MaxBytes-len(errtext.CutMark))/2) + errtext.CutMark}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, Decide(tc.job, tc.res, tc.st))
		})
	}
}

// Settle reads a written outcome: what its fenced write matching (or not)
// means for the job.
func TestSettle(t *testing.T) {
	cases := []struct {
		out  Outcome
		held bool
		want Settled
	}{
		{Outcome{Kind: Complete}, true, Completed},
		{Outcome{Kind: Retry}, true, Retried},
		{Outcome{Kind: Snooze}, true, Snoozed},
		{Outcome{Kind: Release}, true, Released},
		{Outcome{Kind: DeadLetter}, true, DeadLettered},
		{Outcome{Kind: Complete}, false, LeaseLost},
		{Outcome{Kind: DeadLetter}, false, LeaseLost},
		{Outcome{Kind: Nothing}, false, LeaseLost},
		// WaitSignal returned the job to ready in the handler's transaction.
		{Outcome{Kind: Nothing, SnoozedTx: true}, false, Snoozed},
		// The handler's own transaction completed (deleted) the job, so the
		// fenced fallback matched nothing.
		{Outcome{Kind: Retry, CompletedTx: true}, false, Completed},
		{Outcome{Kind: Nothing, CompletedTx: true}, false, Completed},
		// The fallback matched: the handler's transaction did not commit.
		{Outcome{Kind: Retry, CompletedTx: true}, true, Retried},
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, Settle(tc.out, tc.held), "%+v held=%v", tc.out, tc.held)
	}
}

// Only a completion with a result or progress takes complete_archive_result;
// every other completion stays in Done (complete_archive, as before).
func TestPlanWritesRoutesResults(t *testing.T) {
	job := func(id int64) *Job { return &Job{ClaimedRow: store.ClaimedRow{ID: id, LeaseToken: id * 10}} }
	w := planWrites([]result{
		{job: job(3), out: Outcome{Kind: Complete}},
		{job: job(2), out: Outcome{Kind: Complete, Result: []byte(`"r"`)}},
		{job: job(1), out: Outcome{Kind: Complete, Progress: []byte(`{"done":1}`)}},
	})
	require.Equal(t, []store.Lease{{ID: 3, Token: 30}}, w.Done)
	require.Equal(t, []store.Finish{
		{Lease: store.Lease{ID: 1, Token: 10}, Progress: []byte(`{"done":1}`)},
		{Lease: store.Lease{ID: 2, Token: 20}, Result: []byte(`"r"`)},
	}, w.Finished)
}

// The fallback of a job its handler completed in its own transaction
// (CompleteTx) is written without waiting for a row that transaction still
// holds (Ended; reschedule and dead_letter in lease.sql); every other
// retry and dead letter waits on its row as before.
func TestPlanWritesMarksTheFallbackOfACompleteTx(t *testing.T) {
	job := func(id int64) *Job { return &Job{ClaimedRow: store.ClaimedRow{ID: id, LeaseToken: id * 10}} }
	w := planWrites([]result{
		{job: job(1), out: Outcome{Kind: Retry, Error: "e", CompletedTx: true}},
		{job: job(2), out: Outcome{Kind: Retry, Error: "e"}},
		{job: job(3), out: Outcome{Kind: DeadLetter, Reason: "error", Error: "e", CompletedTx: true}},
		{job: job(4), out: Outcome{Kind: DeadLetter, Reason: "error", Error: "e"}},
		{job: job(5), out: Outcome{Kind: Snooze}},
	})
	ended := map[int64]bool{}
	for _, r := range w.Resched {
		ended[r.ID] = r.Ended
	}
	for _, d := range w.Deads {
		ended[d.ID] = d.Ended
	}
	require.Equal(t, map[int64]bool{1: true, 2: false, 3: true, 4: false, 5: false}, ended)
}
