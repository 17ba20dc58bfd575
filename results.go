package skiplock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/skiplock/skiplock/internal/store"
	"github.com/skiplock/skiplock/internal/worker"
)

// Bounds of what a handler leaves with its job (issue 39), stated once: the
// Go API checks them, the CLI's --exec handler reads them.
const (
	// MaxResultBytes bounds a job's result, as JSON: 64 KiB. A larger
	// result fails SetResult (and an --exec child whose stdout is longer
	// fails its attempt). Results are kept with the finished job in
	// jobs_done, for Config.CompletedRetention; they are never logged.
	MaxResultBytes = 64 << 10
	// MaxProgressNoteBytes bounds the note of a progress report; a longer
	// note is cut at a character boundary.
	MaxProgressNoteBytes = 200
)

// ProgressInterval is how often a process writes its running jobs'
// progress reports: at most one write per job per interval.
const ProgressInterval = time.Second

// ErrResultTooLarge is returned (wrapped) by SetResult for a result over
// MaxResultBytes.
var ErrResultTooLarge = errors.New("skiplock: result too large")

// runOutput is what a run leaves with its job: its result and its last
// progress report, kept as reported and marshalled only when read (by the
// progress loop about once a second, and with the completion). mu guards
// all: a handler may report from goroutines of its own.
type runOutput struct {
	mu          sync.Mutex
	result      []byte
	progress    Progress
	hasProgress bool
}

func (o *runOutput) take() (result, progress []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.result, o.progressJSON()
}

// ProgressJSON is the last progress report as JSON, nil when there is
// none (worker.ProgressSource).
func (o *runOutput) ProgressJSON() []byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.progressJSON()
}

func (o *runOutput) progressJSON() []byte {
	if !o.hasProgress {
		return nil
	}
	doc, err := json.Marshal(o.progress)
	if err != nil { // a struct of numbers, a valid string and a time
		return nil
	}
	return doc
}

// SetResult sets the result of the job whose handler's context ctx is: v
// as JSON, at most MaxResultBytes. If the handler then succeeds, the result
// is kept with the finished job (jobs_done, for Config.CompletedRetention;
// not kept at all with Config.DeleteCompleted) and returned by JobResult,
// Wait and EnqueueAndWait; a failed attempt's result is dropped (a failed
// job's result is its last error). A later call replaces the result. It
// returns ErrNotInHandler outside a handler, and an error wrapping
// ErrResultTooLarge or describing why v does not marshal (never quoting it).
func SetResult(ctx context.Context, v any) error {
	run, _ := ctx.Value(runKey{}).(*jobRun)
	if run == nil {
		return ErrNotInHandler
	}
	doc, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("skiplock: SetResult: the result does not marshal to JSON: %T", v)
	}
	if len(doc) > MaxResultBytes {
		return fmt.Errorf("%w: %d bytes of JSON, at most %d", ErrResultTooLarge, len(doc), MaxResultBytes)
	}
	run.out.mu.Lock()
	run.out.result = doc
	run.out.mu.Unlock()
	return nil
}

// Progress is a running job's progress report (SetProgress), as JobGet,
// `skiplock job get`, `skiplock job wait --progress` and the dashboard
// show it. A completed job keeps its last report.
type Progress struct {
	Done  int64  `json:"done"`
	Total int64  `json:"total,omitempty"` // 0: unknown
	Note  string `json:"note,omitempty"`
	// At is when the handler reported it (the worker's clock).
	At time.Time `json:"at"`
}

// SetProgress reports the progress of the job whose handler's context ctx
// is: done of total (total 0: unknown) and a note (at most
// MaxProgressNoteBytes; cut beyond). Calls are coalesced: each running
// job's latest report is written at most once per second (one statement
// for all of a process's jobs, a HOT update of each row), and the last one
// with the job's completion, so a handler may call it as often as it likes.
// It returns ErrNotInHandler outside a handler.
func SetProgress(ctx context.Context, done, total int64, note string) error {
	run, _ := ctx.Value(runKey{}).(*jobRun)
	if run == nil {
		return ErrNotInHandler
	}
	p := Progress{Done: done, Total: total, Note: cutNote(note), At: time.Now().UTC()}
	run.out.mu.Lock()
	run.out.progress, run.out.hasProgress = p, true
	run.out.mu.Unlock()
	worker.ReportProgress(ctx, run.id, run.token, &run.out)
	return nil
}

// LastProgress returns the last progress report (SetProgress) of the job
// whose handler's context ctx is; false when it reported none, or outside
// a handler. For work middleware that records it (contrib/otelskiplock
// sets it on the job's span).
func LastProgress(ctx context.Context) (Progress, bool) {
	run, _ := ctx.Value(runKey{}).(*jobRun)
	if run == nil {
		return Progress{}, false
	}
	run.out.mu.Lock()
	defer run.out.mu.Unlock()
	return run.out.progress, run.out.hasProgress
}

// cutNote bounds a progress note at a character boundary.
func cutNote(s string) string {
	if len(s) <= MaxProgressNoteBytes {
		return s
	}
	s = s[:MaxProgressNoteBytes]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// JobStateGone is how Wait and JobResult report a job that no table holds
// any more: deleted on completion (Config.DeleteCompleted), or its history
// dropped after CompletedRetention. It is not among JobStates.
const JobStateGone JobState = "gone"

// JobEnd is how a job ended, as Wait and JobResult report it.
type JobEnd struct {
	ID int64 `json:"id"`
	// State is JobStateCompleted, JobStateDead or JobStateGone once the
	// job has ended; empty for a job Wait stopped waiting for (its context
	// ended first), or the job's state in flight for JobResult.
	State JobState `json:"state,omitempty"`
	// Result is a completed job's result (SetResult; an --exec handler's
	// stdout); nil when it returned none.
	Result json.RawMessage `json:"result,omitempty"`
	// Reason is a dead job's dead-letter reason (error, panic, timeout,
	// lease_expired, discarded, cancelled, unknown_kind).
	Reason string `json:"reason,omitempty"`
	// Error is a dead job's last error: the result of a failed job.
	Error      string     `json:"error,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// Succeeded reports whether the job completed.
func (o JobEnd) Succeeded() bool { return o.State == JobStateCompleted }

// ErrJobFailed matches the error EnqueueAndWait returns for a job that
// ended in the dead-letter table; the concrete error is a *JobFailedError.
var ErrJobFailed = errors.New("skiplock: job failed")

// JobFailedError is a job that ended in the dead-letter table: its reason
// and last error (its result).
type JobFailedError struct {
	ID     int64
	Reason string
	Err    string
}

func (e *JobFailedError) Error() string {
	return fmt.Sprintf("skiplock: job %d failed (%s): %s", e.ID, e.Reason, e.Err)
}

// Unwrap makes errors.Is(err, ErrJobFailed) work.
func (e *JobFailedError) Unwrap() error { return ErrJobFailed }

func outcomeOf(f store.Finished) JobEnd {
	o := JobEnd{ID: f.ID, State: JobState(f.State), FinishedAt: f.FinishedAt}
	if o.State == JobStateCompleted && f.Result != nil {
		o.Result = json.RawMessage(f.Result)
	}
	if o.State == JobStateDead {
		if f.Reason != nil {
			o.Reason = *f.Reason
		}
		if f.LastError != nil {
			o.Error = *f.LastError
		}
	}
	return o
}

// JobResult returns how the job with this id ended: its result if it
// completed (within Config.CompletedRetention), its reason and last error
// if it is dead, JobStateGone if no table holds it any more; for a job in
// flight, its state (ready, scheduled or running) and no result. Results
// may carry what the handler put there: never log them.
func (c *Client) JobResult(ctx context.Context, id int64) (JobEnd, error) {
	if err := validateJobID(id); err != nil {
		return JobEnd{}, err
	}
	fs, err := c.store.JobsFinished(ctx, c.pool, []int64{id})
	if err != nil {
		return JobEnd{}, fmt.Errorf("skiplock: job result: %w", err)
	}
	if len(fs) == 1 && fs[0].State != string(JobStateGone) {
		return outcomeOf(fs[0]), nil
	}
	rec, err := c.JobGet(ctx, id)
	if errors.Is(err, ErrJobNotFound) {
		return JobEnd{ID: id, State: JobStateGone}, nil
	}
	if err != nil {
		return JobEnd{}, err
	}
	return JobEnd{ID: id, State: rec.State, FinishedAt: rec.FinishedAt}, nil
}
