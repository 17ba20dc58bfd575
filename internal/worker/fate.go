package worker

import (
	"time"

	"github.com/skiplock/skiplock/internal/errtext"
)

// Result is what one handler run returned, in the runtime's terms: the root
// package translates a handler's error into it, and Decide turns it, with
// the run's state, into the Outcome to write.
type Result struct {
	// Err is the handler's error; nil means success. Its text becomes the
	// job's error text (made storable by errtext.Text).
	Err error
	// Snooze asks to run the job again after SnoozeFor without spending the
	// attempt.
	Snooze    bool
	SnoozeFor time.Duration
	// Final, when set, ends the job whatever attempts remain, with this
	// dead-letter reason: "discarded", "cancelled" or "unknown_kind".
	Final string
	// Panicked: Err is a recovered panic (reason "panic").
	Panicked bool
	// TimedOut is the handler's timeout when it passed before the handler
	// returned (reason "timeout"); 0 otherwise.
	TimedOut time.Duration
	// CompletedTx: a CompleteTx succeeded. Its transaction may still have
	// rolled back, so a nil Err is written as a fenced fallback failure that
	// matches nothing once the completion committed.
	CompletedTx bool
	// LeaseLostInTx: a CompleteTx found, inside the handler's transaction,
	// that the lease was gone. Nothing is written.
	LeaseLostInTx bool
	// SnoozedTx: the handler sent its own job back to the table, fenced, in
	// a transaction it committed (a signal wait: WaitSignal). Nothing more
	// is written; the job settles as snoozed.
	SnoozedTx bool
	// Value is what the handler returned as its result (JSON, bounded by
	// the root package), kept with the job if it completes; nil: none.
	Value []byte
	// Progress is the last progress the handler reported (JSON), kept
	// with the job if it completes; nil: none.
	Progress []byte
	// MaxAttempts caps the job's attempts for this handler (the job's own
	// max_attempts, if lower, wins); 0 means the job's own.
	MaxAttempts int
	// Backoff gives the delay before the retry of a failed attempt; called
	// only when the job is retried. nil retries at once.
	Backoff func(attempt int) time.Duration
}

// RunState is what the runtime knows about a run besides its Result.
type RunState struct {
	// HandedBack: the job never reached its handler (the worker was
	// stopping, or the caller refused it): back to ready at once, the
	// attempt refunded.
	HandedBack bool
	// Abandoned: the handler ignored cancellation at hard stop; its job is
	// handed back (the attempt counts) and whatever it returns later is
	// ignored.
	Abandoned bool
	// LeaseLost: the heartbeat found the lease gone while the handler ran.
	LeaseLost bool
	// CancelRequested: the job was cancelled while it ran.
	CancelRequested bool
	// HardStop: the handler's context was cancelled because the worker is
	// stopping at once.
	HardStop bool
}

// Reasons and error texts Decide writes.
const (
	reasonError     = "error"
	reasonPanic     = "panic"
	reasonTimeout   = "timeout"
	reasonCancelled = "cancelled"
	// errNotCommitted is the error recorded when a handler returned nil
	// after a successful CompleteTx whose transaction then did not commit.
	errNotCommitted = "the handler returned nil after CompleteTx, but its transaction did not commit"
)

// Decide is the one place where a job's fate is decided: from the job (its
// attempt and max_attempts), what its handler returned and the state of the
// run, the Outcome to write. It is pure; every error text it returns is
// made storable by errtext.Text.
//
// In order: a job that never reached its handler or whose handler was
// abandoned is handed back; a job the handler sent back to the table in its
// own transaction (SnoozedTx) writes nothing; a lost lease writes nothing (a CompleteTx that
// committed still counts as a completion, see Settle); a CompleteTx
// completion stands whatever else happened; a cancelled or hard-stopped run
// that did not succeed is dead-lettered as cancelled or handed back; then
// the handler's own result: success, snooze, a final failure (Discard,
// Cancel, an undecodable payload, an unknown kind), or a failure that is
// retried after Backoff until the attempts are spent and then
// dead-lettered with reason error, panic or timeout.
func Decide(j *Job, res Result, st RunState) Outcome {
	switch {
	case st.HandedBack:
		return Outcome{Kind: Release, Refund: true}
	case st.Abandoned:
		return Outcome{Kind: Release}
	case res.LeaseLostInTx:
		return Outcome{Kind: Nothing}
	case res.SnoozedTx:
		// The job is ready again already; any write would be refused by
		// the fence, and must not be attempted.
		return Outcome{Kind: Nothing, SnoozedTx: true}
	}
	out := handlerOutcome(j, res)
	switch {
	case st.LeaseLost:
		// Someone else may own the job now: write nothing at all.
		return Outcome{Kind: Nothing, CompletedTx: out.CompletedTx}
	case out.CompletedTx:
		// Cancellation and shutdown cannot undo a committed completion.
		return out
	case st.CancelRequested && out.Kind != Complete:
		return Outcome{Kind: DeadLetter, Reason: reasonCancelled, Error: "cancelled while running"}
	case st.HardStop && out.Kind != Complete:
		return Outcome{Kind: Release} // the attempt counts; the job is ready again at once
	}
	return out
}

// handlerOutcome maps what the handler returned to an outcome, before the
// run's state is considered.
func handlerOutcome(j *Job, res Result) Outcome {
	switch {
	case res.Err == nil && res.CompletedTx:
		// Completed in the handler's transaction, which the handler
		// committed before returning. Should it not have, the job must not
		// stay running until its lease expires: this fenced failure matches
		// nothing once the completion committed.
		out := failure(j, res, reasonError, errNotCommitted)
		out.CompletedTx = true
		return out
	case res.Err == nil:
		return Outcome{Kind: Complete, Result: res.Value, Progress: res.Progress}
	case res.Snooze:
		return Outcome{Kind: Snooze, Delay: res.SnoozeFor}
	case res.Final != "":
		return Outcome{Kind: DeadLetter, Reason: res.Final, Error: errtext.Text(res.Err.Error())}
	case res.Panicked:
		return failure(j, res, reasonPanic, res.Err.Error())
	case res.TimedOut > 0:
		return failure(j, res, reasonTimeout, "timed out after "+res.TimedOut.String()+": "+res.Err.Error())
	}
	return failure(j, res, reasonError, res.Err.Error())
}

// failure is the outcome of a failed attempt: a retry after backoff, or the
// dead-letter table once the attempts are spent.
func failure(j *Job, res Result, reason, text string) Outcome {
	maxAttempts, capped := j.MaxAttempts, 0
	if res.MaxAttempts > 0 && res.MaxAttempts < maxAttempts {
		maxAttempts, capped = res.MaxAttempts, res.MaxAttempts
	}
	if j.Attempt >= maxAttempts {
		return Outcome{Kind: DeadLetter, Reason: reason, Error: errtext.Text(text), MaxAttempts: capped}
	}
	var delay time.Duration
	if res.Backoff != nil {
		delay = res.Backoff(j.Attempt)
	}
	return Outcome{Kind: Retry, Reason: reason, Delay: delay, Error: errtext.Text(text), MaxAttempts: capped}
}

// Settled is what became of a job once its outcome was written.
type Settled int

// The ways an outcome can settle.
const (
	Completed    Settled = iota // deleted or archived (or completed in the handler's transaction)
	Retried                     // back to ready after a failure
	Snoozed                     // back to ready without spending the attempt
	Released                    // handed back at shutdown
	DeadLettered                // moved to jobs_dead
	LeaseLost                   // the lease was gone: nothing written
	// Unwritten: the database refused the outcome for its data, even with a
	// safe error text; nothing was written, so the lease expires and the
	// reaper returns the job (to ready, or to jobs_dead once its attempts
	// are spent).
	Unwritten
)

// Settle says what became of out, the Outcome Decide chose, given whether
// its fenced write matched the job (held; false when nothing was written).
// A CompleteTx completion whose write matched nothing was completed by the
// handler's own transaction (which deleted the row); any other unmatched
// write means the lease was gone.
func Settle(out Outcome, held bool) Settled {
	switch {
	case out.SnoozedTx:
		return Snoozed
	case out.CompletedTx && !held:
		return Completed
	case !held || out.Kind == Nothing:
		return LeaseLost
	}
	switch out.Kind {
	case Complete:
		return Completed
	case Retry:
		return Retried
	case Snooze:
		return Snoozed
	case Release:
		return Released
	default:
		return DeadLettered
	}
}
