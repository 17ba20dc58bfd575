package skiplock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/skiplock/skiplock/internal/store"
)

// JobState is where a job is: in flight (ready, scheduled, running), dead
// (in the dead-letter table) or completed (in the finished-job history,
// kept for Config.CompletedRetention).
type JobState string

// The states JobGet and JobList report and JobList filters on.
const (
	JobStateReady     JobState = "ready"     // due, waiting for a worker
	JobStateScheduled JobState = "scheduled" // ready, with run_at in the future
	JobStateRunning   JobState = "running"   // claimed by a worker
	JobStateDead      JobState = "dead"      // in the dead-letter table
	JobStateCompleted JobState = "completed" // succeeded; in the history
)

// JobStates lists every JobState in lifecycle order.
var JobStates = []JobState{JobStateReady, JobStateScheduled, JobStateRunning, JobStateDead, JobStateCompleted}

// ParseJobState returns the JobState named s, or an error naming the field
// "state" (matching ErrInvalidJob) for anything else.
func ParseJobState(s string) (JobState, error) {
	for _, st := range JobStates {
		if string(st) == s {
			return st, nil
		}
	}
	return "", invalidJob("state", "unknown state %q (want ready, scheduled, running, dead or completed)", s)
}

// ErrJobState matches the error of an action the job's state does not
// allow (retrying a running job, deleting a completed one); the concrete
// error is a *JobStateError.
var ErrJobState = errors.New("skiplock: job state does not allow this")

// JobStateError reports an action refused because of the job's state.
type JobStateError struct {
	ID     int64
	State  JobState
	Action string // "retry", "cancel" or "delete"
	Allow  string // the states that allow it, for the message
}

func (e *JobStateError) Error() string {
	return fmt.Sprintf("skiplock: %s: job %d is %s; only %s jobs can be %s", e.Action, e.ID, e.State, e.Allow, pastTense(e.Action))
}

// Unwrap makes errors.Is(err, ErrJobState) work.
func (e *JobStateError) Unwrap() error { return ErrJobState }

func pastTense(action string) string {
	switch action {
	case "retry":
		return "retried"
	case "cancel":
		return "cancelled"
	}
	return action + "d"
}

// JobRecord is one job as JobGet and JobList report it. It never carries
// the payload: JobPayload returns that, on explicit request only.
type JobRecord struct {
	ID    int64    `json:"id"`
	State JobState `json:"state"`
	Queue string   `json:"queue"`
	Kind  string   `json:"kind"`
	// Priority: larger runs earlier.
	Priority int `json:"priority"`
	// Attempt is the number of the job's latest attempt, as Job.Attempt
	// counts it: how many times the job was started (counted at claim), 0
	// before its first run. (The JSON key stays "attempts", the CLI's.)
	Attempt int `json:"attempts"`
	// MaxAttempts is its attempt budget; 0 when unknown (history written
	// before migration 005).
	MaxAttempts int       `json:"max_attempts,omitempty"`
	RunAt       time.Time `json:"run_at"`
	CreatedAt   time.Time `json:"created_at"`
	// AttemptedAt is when the last attempt started (nil: never started, or
	// a dead letter, which does not keep it).
	AttemptedAt *time.Time `json:"attempted_at,omitempty"`
	// FinishedAt is when the job completed or was dead-lettered.
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// Outcome is "completed" for a completed job and the dead-letter reason
	// (error, panic, timeout, lease_expired, discarded, cancelled,
	// unknown_kind) for a dead one; empty while in flight.
	Outcome string `json:"outcome,omitempty"`
	// LastError is the error of the last failed attempt ("" if none). JobGet
	// returns it whole; JobList its first line, at most 200 characters.
	LastError string `json:"last_error,omitempty"`
	// LeaseExpiresAt is the running job's lease deadline.
	LeaseExpiresAt *time.Time `json:"lease_expires_at,omitempty"`
	// LockedBy is the worker running the job (or that last ran it).
	LockedBy  string `json:"locked_by,omitempty"`
	UniqueKey string `json:"unique_key,omitempty"`
	Tenant    string `json:"tenant,omitempty"`
	Entity    string `json:"entity,omitempty"`
	// CancelRequested is set on a running job whose cancellation is under way.
	CancelRequested bool `json:"cancel_requested,omitempty"`
	// Metadata is the job's metadata (trace context, tags; never the
	// payload), set by JobGet; nil when the job has none and in JobList.
	Metadata Metadata `json:"metadata,omitempty"`
	// LimitWeight is how many starts the job counts as in the rate limits
	// that cover it (EnqueueParams.LimitWeight), set by JobGet: 1 unless it
	// was enqueued heavier; 0 in JobList.
	LimitWeight int `json:"limit_weight,omitempty"`
	// Progress is the job's last progress report (SetProgress), set by
	// JobGet: a running job's, written at most a second late, or a
	// completed job's last; nil when it reported none.
	Progress *Progress `json:"progress,omitempty"`
}

func recordOf(r store.JobRow) JobRecord {
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	rec := JobRecord{ID: r.ID, State: JobState(r.State), Queue: r.Queue, Kind: r.Kind, Priority: r.Priority,
		Attempt: r.Attempts, RunAt: r.RunAt, CreatedAt: r.CreatedAt, AttemptedAt: r.AttemptedAt,
		FinishedAt: r.FinishedAt, Outcome: str(r.Outcome), LastError: str(r.LastError),
		LeaseExpiresAt: r.LeaseExpiresAt, LockedBy: str(r.LockedBy), UniqueKey: str(r.UniqueKey),
		Tenant: str(r.Tenant), Entity: str(r.Entity), CancelRequested: r.CancelRequested}
	if r.MaxAttempts != nil {
		rec.MaxAttempts = *r.MaxAttempts
	}
	if r.LimitWeight != nil {
		rec.LimitWeight = int(*r.LimitWeight)
	}
	if len(r.Progress) > 0 {
		var p Progress
		if json.Unmarshal(r.Progress, &p) == nil {
			rec.Progress = &p
		}
	}
	if len(r.Metadata) > 0 {
		// Stored by enqueue_job after validate_metadata: always an object.
		_ = json.Unmarshal(r.Metadata, &rec.Metadata)
	}
	return rec
}

// notFoundError names the action and the id; it matches ErrJobNotFound.
type notFoundError struct {
	action string
	id     int64
}

func (e *notFoundError) Error() string {
	return fmt.Sprintf("skiplock: job %s: job %d not found (not in flight, dead or in the finished-job history)", e.action, e.id)
}

func (e *notFoundError) Unwrap() error { return ErrJobNotFound }

func jobNotFound(action string, id int64) error { return &notFoundError{action: action, id: id} }

func validateJobID(id int64) error {
	if id <= 0 {
		return invalidJob("id", "must be a positive job id, got %d", id)
	}
	return nil
}

// JobGet returns the job with this id wherever it is: ready, scheduled,
// running, dead, or completed within Config.CompletedRetention (24 hours by
// default; jobs are never kept when Config.DeleteCompleted is set). It
// returns ErrJobNotFound for an id no table holds. The payload is not read:
// see JobPayload.
func (c *Client) JobGet(ctx context.Context, id int64) (*JobRecord, error) {
	if err := validateJobID(id); err != nil {
		return nil, err
	}
	row, found, err := c.store.JobGet(ctx, c.pool, id)
	if err != nil {
		return nil, fmt.Errorf("skiplock: job get: %w", err)
	}
	if !found {
		return nil, jobNotFound("get", id)
	}
	rec := recordOf(row)
	if rec.LimitWeight == 0 {
		rec.LimitWeight = 1 // stored as NULL
	}
	return &rec, nil
}

// JobPayload returns the payload of the job with this id wherever JobGet
// would find it, or ErrJobNotFound. Payloads may carry personal data: call
// it only when a person asked to see one, and never log the result. A
// sealed payload (Config.Encryption) is opened when the client's keyring
// can open it, and returned as stored, the envelope, otherwise.
func (c *Client) JobPayload(ctx context.Context, id int64) (json.RawMessage, error) {
	if err := validateJobID(id); err != nil {
		return nil, err
	}
	p, found, err := c.store.JobPayload(ctx, c.pool, id)
	if err != nil {
		return nil, fmt.Errorf("skiplock: job payload: %w", err)
	}
	if !found {
		return nil, jobNotFound("payload", id)
	}
	return json.RawMessage(c.openIfSealed([]byte(p))), nil
}

// JobListParams filters JobList. Every field is optional.
type JobListParams struct {
	// Queue, Kind and Tenant match exactly.
	Queue, Kind, Tenant string
	// State selects one state. Empty lists every job in flight and every
	// dead letter; completed jobs are listed only with JobStateCompleted,
	// over the last 24 hours.
	State JobState
	// BeforeID lists only ids below it: pass the last id of one page to get
	// the next (newest first).
	BeforeID int64
	// Limit is the most jobs returned. Default 100, at most 10,000.
	Limit int
}

// Job list limits (JobListParams.Limit).
const (
	DefaultJobListLimit = 100
	MaxJobListLimit     = 10_000
)

// JobList returns the jobs p selects, newest id first, without payloads.
// A bad filter is an error naming its field (matching ErrInvalidJob).
func (c *Client) JobList(ctx context.Context, p JobListParams) ([]JobRecord, error) {
	if p.Queue != "" {
		if err := validateName("queue", p.Queue); err != nil {
			return nil, err
		}
	}
	if p.Kind != "" {
		if err := validateName("kind", p.Kind); err != nil {
			return nil, err
		}
	}
	if p.Tenant != "" {
		if err := validateKey("tenant", p.Tenant, MaxKeyBytes); err != nil {
			return nil, err
		}
	}
	if p.State != "" {
		if _, err := ParseJobState(string(p.State)); err != nil {
			return nil, err
		}
	}
	if p.BeforeID < 0 {
		return nil, invalidJob("before_id", "must not be negative, got %d", p.BeforeID)
	}
	switch {
	case p.Limit == 0:
		p.Limit = DefaultJobListLimit
	case p.Limit < 0 || p.Limit > MaxJobListLimit:
		return nil, invalidJob("limit", "must be between 1 and %d, got %d", MaxJobListLimit, p.Limit)
	}
	rows, err := c.store.JobList(ctx, c.pool, store.JobFilter{Queue: p.Queue, Kind: p.Kind, State: string(p.State),
		Tenant: p.Tenant, BeforeID: p.BeforeID, Limit: p.Limit})
	if err != nil {
		return nil, fmt.Errorf("skiplock: job list: %w", err)
	}
	out := make([]JobRecord, len(rows))
	for i, r := range rows {
		out[i] = recordOf(r)
	}
	return out, nil
}

// JobRetry gives a dead or completed job a new attempt: exactly one new
// ready job, due now, with the old one's queue, kind, payload, priority,
// attempt budget, tenant and entity, and a new id, which it returns. A dead
// job leaves the dead-letter table in the same statement; a completed job's
// history stays. It is idempotent: a second call, concurrent or up to a week
// later, returns the same new id and makes no second copy (to run the job
// once more, retry that copy). A job in
// flight is refused with a *JobStateError (ErrJobState), an unknown id with
// ErrJobNotFound; a dead job whose unique key is in flight again is refused
// and stays dead.
func (c *Client) JobRetry(ctx context.Context, id int64) (int64, error) {
	if err := validateJobID(id); err != nil {
		return 0, err
	}
	newID, state, err := c.store.JobRetry(ctx, c.pool, id)
	switch {
	case err != nil:
		return 0, fmt.Errorf("skiplock: job retry: %w", err)
	case newID != 0:
		return newID, nil
	case state == "":
		return 0, jobNotFound("retry", id)
	}
	return 0, &JobStateError{ID: id, State: JobState(state), Action: "retry", Allow: "dead or completed"}
}

// JobCancel cancels a job in flight and returns the state it was in, as
// JobList shows it (JobStateScheduled for a ready job not yet due): a ready
// or scheduled job goes to
// the dead-letter table with reason
// "cancelled"; a running job's handler context is cancelled (its worker
// hears of it by NOTIFY, or at the latest with its next heartbeat) and the
// job is dead-lettered when the handler returns. A dead or completed job is
// refused with a *JobStateError, an unknown id with ErrJobNotFound. It is
// idempotent: a repeated cancel (up to a week later) returns the state the
// first one found.
func (c *Client) JobCancel(ctx context.Context, id int64) (JobState, error) {
	if err := validateJobID(id); err != nil {
		return "", err
	}
	state, err := c.store.Cancel(ctx, c.pool, id)
	if err != nil {
		return "", fmt.Errorf("skiplock: job cancel: %w", err)
	}
	if state != "" {
		return JobState(state), nil
	}
	return c.repeated(ctx, id, "cancel", "ready, scheduled or running")
}

// JobDelete deletes a ready (or scheduled) job or a dead letter and returns
// the state it was in. A running job is refused (cancel it instead), and so
// is a completed one (the history is retired whole, by dropping its daily
// partition); an unknown id returns ErrJobNotFound. A repeated delete (up
// to a week later) returns the state the first one found.
func (c *Client) JobDelete(ctx context.Context, id int64) (JobState, error) {
	if err := validateJobID(id); err != nil {
		return "", err
	}
	state, err := c.store.JobDelete(ctx, c.pool, id)
	if err != nil {
		return "", fmt.Errorf("skiplock: job delete: %w", err)
	}
	if state != "" {
		return JobState(state), nil
	}
	return c.repeated(ctx, id, "delete", "ready, scheduled or dead")
}

// repeated answers an action that found nothing to act on: what an
// earlier call of the same action did, if one did (the action is
// idempotent), else why it is refused.
func (c *Client) repeated(ctx context.Context, id int64, action, allow string) (JobState, error) {
	was, _, found, err := c.store.JobAction(ctx, c.pool, id, action)
	switch {
	case err != nil:
		return "", fmt.Errorf("skiplock: job %s: %w", action, err)
	case found:
		return JobState(was), nil
	}
	return "", c.refusal(ctx, id, action, allow)
}

// refusal explains why an action found nothing to act on: the job is in
// another state, or there is no such job.
func (c *Client) refusal(ctx context.Context, id int64, action, allow string) error {
	row, found, err := c.store.JobGet(ctx, c.pool, id)
	switch {
	case err != nil:
		return fmt.Errorf("skiplock: job %s: %w", action, err)
	case !found:
		return jobNotFound(action, id)
	}
	return &JobStateError{ID: id, State: JobState(row.State), Action: action, Allow: allow}
}
