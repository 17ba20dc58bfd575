package skiplock

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/skiplock/skiplock/internal/health"
	"github.com/skiplock/skiplock/internal/store"
)

// JobHoldReason names one reason a ready job is not running.
type JobHoldReason string

// The reasons JobExplain reports. Each is tested with the condition the
// claim itself uses (internal/store/sql/explain.sql).
const (
	// JobHoldScheduled: its run time is in the future (JobHold.Until).
	JobHoldScheduled JobHoldReason = "scheduled"
	// JobHoldSleep: a durable Sleep step (JobHold.Name) sleeps until
	// JobHold.Until.
	JobHoldSleep JobHoldReason = "sleep"
	// JobHoldSignalWait: WaitSignal waits for the signal JobHold.Name, at
	// most until JobHold.Until; a signal makes the job due at once.
	JobHoldSignalWait JobHoldReason = "signal_wait"
	// JobHoldQueuePaused: its queue (JobHold.Name) is paused.
	JobHoldQueuePaused JobHoldReason = "queue_paused"
	// JobHoldEntityBusy: the running job JobHold.Holders[0] holds its entity
	// (JobHold.Name); jobs of one entity run one at a time.
	JobHoldEntityBusy JobHoldReason = "entity_busy"
	// JobHoldConcurrencyLimit: the concurrency limit JobHold.Name runs
	// JobHold.Used of JobHold.Cap jobs for the job's partition value
	// (JobHold.Key); JobHold.Holders lists running jobs it counts (the first
	// 10), and a slot frees when one ends (their leases run to JobHold.Until
	// at the latest, unless renewed).
	JobHoldConcurrencyLimit JobHoldReason = "concurrency_limit"
	// JobHoldRateLimit: the rate limit JobHold.Name started JobHold.Used of
	// JobHold.Cap (weights) within its window for JobHold.Key; the job's
	// weight fits again at JobHold.Until.
	JobHoldRateLimit JobHoldReason = "rate_limit"
	// JobHoldNoWorker: no live worker process claims from its queue.
	JobHoldNoWorker JobHoldReason = "no_worker"
	// JobHoldUnhandledKind: live workers claim from its queue, but none of
	// them claims its kind (JobHold.Name).
	JobHoldUnhandledKind JobHoldReason = "unhandled_kind"
	// JobHoldWorkflowDependencies: a workflow task waits for its parents
	// (JobHold.Holders: their task ids) to finish before its job is
	// enqueued (WorkflowTaskExplain).
	JobHoldWorkflowDependencies JobHoldReason = "workflow_dependencies"
)

// JobHold is one reason a ready job is not running, with what it needs to
// act on: the limit, its holders and its next free slot, the entity's
// holder, the signal awaited. Fields a reason does not use are zero.
type JobHold struct {
	Reason JobHoldReason `json:"reason"`
	// Detail says it in one sentence, with what would release the job.
	Detail string `json:"detail"`
	// Name is the limit, the signal or step, the entity, the queue or the
	// kind the reason is about.
	Name string `json:"name,omitempty"`
	// Key is a limit's partition value ("" for a limit without partitions).
	Key string `json:"key,omitempty"`
	// Used and Cap: what a limit counts now, and its cap.
	Used int64 `json:"used,omitempty"`
	Cap  int64 `json:"cap,omitempty"`
	// Holders are the running jobs that hold it back (the entity's, the
	// limit's).
	Holders []int64 `json:"holders,omitempty"`
	// Until is when the reason ends or may end: the run time, the wake-up
	// or timeout, a rate limit's next free slot, the earliest lease of a
	// concurrency limit's holders.
	Until *time.Time `json:"until,omitempty"`
}

// JobExplanation is JobExplain's answer: why a job is not running.
type JobExplanation struct {
	// ID is the job's id; 0 for a workflow task whose job is not enqueued
	// yet (WorkflowTaskExplain).
	ID int64 `json:"id"`
	// State is the job's state; "" for a task without a job.
	State JobState `json:"state,omitempty"`
	// WorkflowID, TaskID and TaskState are set by WorkflowTaskExplain: the
	// task's workflow, id and state (pending, enqueued, completed, dead,
	// cancelled).
	WorkflowID int64  `json:"workflow_id,omitempty"`
	TaskID     int64  `json:"task_id,omitempty"`
	TaskState  string `json:"task_state,omitempty"`
	Queue      string `json:"queue"`
	Kind       string `json:"kind"`
	Tenant     string `json:"tenant,omitempty"`
	// Holds lists every reason that keeps a ready or scheduled job from
	// being claimed; empty for a job the next claim of its queue may take,
	// and for a job that is not waiting (running, dead or completed).
	Holds []JobHold `json:"holds"`
	// Ahead counts the due jobs before it in its queue's claim order
	// (priority, then run time, then id), up to 10,000.
	Ahead int64 `json:"ahead"`
	// TenantAhead, Tenants and TenantWeight place a job with a tenant in
	// its queue's fair share: the due jobs of its tenant before it, the
	// tenants with due jobs in the queue, and its tenant's weight (its
	// shares per round of a tenant-capped pool; 1 by default).
	TenantAhead  int64 `json:"tenant_ahead,omitempty"`
	Tenants      int64 `json:"tenants,omitempty"`
	TenantWeight int64 `json:"tenant_weight,omitempty"`
	// TenantCap is the smallest tenant cap (WorkerPool.TenantCap) of the
	// live pools that claim from the queue: at most this many jobs of one
	// tenant per claim (times its weight) while other tenants wait; 0 when
	// no live pool caps tenants.
	TenantCap int64 `json:"tenant_cap,omitempty"`
	// Next is true when nothing holds the job and no due job comes before
	// it: the next claim of its queue takes it.
	Next bool `json:"next"`
	// Summary is the answer in one line.
	Summary string `json:"summary"`
}

// JobExplain says why the job with this id is not running: for a ready or
// scheduled job, every reason that holds it (its run time, a durable
// sleep or signal wait, a paused queue, the running job that holds its
// entity, a full concurrency or rate limit with its holders and next free
// slot, no live worker for its queue or its kind) and its place in claim
// order and in its queue's fair share; Next when nothing holds it and it
// is first. Each reason is tested with the claim's own conditions. For a
// running, dead or completed job it reports the state and no holds; for
// an id no table holds, ErrJobNotFound.
//
// Explain reads, and locks nothing: a job claimed at this instant may be
// reported as ready. Workers are live when they beat within 5 minutes, as
// for `skiplock doctor`.
func (c *Client) JobExplain(ctx context.Context, id int64) (*JobExplanation, error) {
	if err := validateJobID(id); err != nil {
		return nil, err
	}
	for range 3 {
		row, found, err := c.store.JobGet(ctx, c.pool, id)
		if err != nil {
			return nil, fmt.Errorf("skiplock: job explain: %w", err)
		}
		if !found {
			return nil, jobNotFound("explain", id)
		}
		rec := recordOf(row)
		e := &JobExplanation{ID: id, State: rec.State, Queue: rec.Queue, Kind: rec.Kind, Tenant: rec.Tenant, Holds: []JobHold{}}
		if rec.State != JobStateReady && rec.State != JobStateScheduled {
			e.Summary = notWaiting(rec)
			return e, nil
		}
		rows, err := c.store.JobExplain(ctx, c.pool, id, health.LiveWindow)
		if err != nil {
			return nil, fmt.Errorf("skiplock: job explain: %w", err)
		}
		if len(rows) == 0 {
			continue // claimed (or gone) between the two reads: read its state again
		}
		explainRows(e, rows)
		return e, nil
	}
	return nil, fmt.Errorf("skiplock: job explain: job %d changed state while being explained; try again", id)
}

func notWaiting(rec JobRecord) string {
	switch rec.State {
	case JobStateRunning:
		return fmt.Sprintf("running (attempt %d) on %s", rec.Attempt, rec.LockedBy)
	case JobStateDead:
		return fmt.Sprintf("dead (%s): not waiting; `skiplock job retry %d` runs it again", rec.Outcome, rec.ID)
	}
	return "completed: not waiting"
}

// explainRows fills e from job_explain's rows.
func explainRows(e *JobExplanation, rows []store.ExplainRow) {
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	num := func(p *int64) int64 {
		if p == nil {
			return 0
		}
		return *p
	}
	when := func(t *time.Time) string {
		if t == nil {
			return "unknown"
		}
		return t.UTC().Format(time.RFC3339)
	}
	for _, r := range rows {
		if r.What == "position" {
			e.Ahead = num(r.N)
			if len(r.Holders) == 3 {
				e.TenantAhead, e.Tenants, e.TenantCap = r.Holders[0], r.Holders[1], r.Holders[2]
				e.TenantWeight = num(r.Cap)
			}
			continue
		}
		h := JobHold{Reason: JobHoldReason(r.What), Name: str(r.Name), Key: str(r.Key), Used: num(r.N), Cap: num(r.Cap),
			Holders: r.Holders, Until: r.At}
		switch h.Reason {
		case JobHoldScheduled:
			h.Detail = "its run time is " + when(h.Until)
		case JobHoldSleep:
			h.Detail = fmt.Sprintf("its durable sleep %q wakes at %s", h.Name, when(h.Until))
		case JobHoldSignalWait:
			h.Detail = fmt.Sprintf("it waits for the signal %q until %s; `skiplock signal send %s --job %d` releases it", h.Name, when(h.Until), h.Name, e.ID)
		case JobHoldQueuePaused:
			h.Detail = fmt.Sprintf("its queue %q is paused; `skiplock queue resume %s` releases it", h.Name, h.Name)
		case JobHoldEntityBusy:
			h.Detail = fmt.Sprintf("its entity %q is held by the running job %s; jobs of one entity run one at a time", h.Name, ids(h.Holders))
		case JobHoldConcurrencyLimit:
			h.Detail = fmt.Sprintf("the concurrency limit %q%s runs %d of %d; running: %s; a slot frees when one ends (leases to %s)",
				h.Name, keyText(h.Key), h.Used, h.Cap, ids(h.Holders), when(h.Until))
		case JobHoldRateLimit:
			h.Detail = fmt.Sprintf("the rate limit %q%s started %d of %d in its window; the next free slot is at %s",
				h.Name, keyText(h.Key), h.Used, h.Cap, when(h.Until))
		case JobHoldNoWorker:
			h.Name = h.Key // the queue
			h.Key = ""
			h.Detail = fmt.Sprintf("no live worker claims from the queue %q; start one (`skiplock work --queues %s`)", h.Name, h.Name)
		case JobHoldUnhandledKind:
			h.Detail = fmt.Sprintf("no live worker of the queue %q handles the kind %q; deploy its handler, or fix the kind", e.Queue, h.Name)
			h.Key = ""
		}
		e.Holds = append(e.Holds, h)
	}
	e.Next = len(e.Holds) == 0 && e.Ahead == 0
	switch {
	case len(e.Holds) > 0:
		var parts []string
		for _, h := range e.Holds {
			parts = append(parts, h.Detail)
		}
		e.Summary = "held: " + strings.Join(parts, "; ")
	case e.Next:
		e.Summary = "would be claimed next: nothing holds it and no due job comes before it"
	default:
		e.Summary = fmt.Sprintf("nothing holds it; %d due job(s) come before it in claim order", e.Ahead)
	}
	if e.Tenant != "" && len(e.Holds) == 0 {
		e.Summary += fmt.Sprintf(" (fair share: %d of tenant %q before it, %d tenant(s) share the queue, weight %d",
			e.TenantAhead, e.Tenant, e.Tenants, e.TenantWeight)
		if e.TenantCap > 0 {
			perClaim := e.TenantCap * max(e.TenantWeight, 1)
			e.Summary += fmt.Sprintf("; the pools cap a tenant at %d a claim: its turn in about %d claim(s) of its tenant",
				perClaim, e.TenantAhead/perClaim+1)
		}
		e.Summary += ")"
	}
}

func keyText(key string) string {
	if key == "" {
		return ""
	}
	return fmt.Sprintf(" (for %q)", key)
}

func ids(v []int64) string {
	s := make([]string, len(v))
	for i, id := range v {
		s[i] = fmt.Sprint(id)
	}
	return strings.Join(s, ", ")
}

// WorkflowTaskExplain is JobExplain for a workflow task: a pending task
// is held by its parents that have not finished (JobHoldWorkflowDependencies,
// their task ids in Holders); an enqueued task is explained as its job is;
// a finished task has nothing to explain. ErrTaskNotFound for an id no
// task has.
func (c *Client) WorkflowTaskExplain(ctx context.Context, taskID int64) (*JobExplanation, error) {
	if taskID <= 0 {
		return nil, invalidJob("task_id", "must be a positive task id, got %d", taskID)
	}
	t, found, err := c.store.TaskExplain(ctx, c.pool, taskID)
	if err != nil {
		return nil, fmt.Errorf("skiplock: workflow task explain: %w", err)
	}
	if !found {
		return nil, fmt.Errorf("skiplock: workflow task explain: task %d: %w", taskID, ErrTaskNotFound)
	}
	var e *JobExplanation
	switch {
	case t.State == "enqueued" && t.JobID != nil:
		if e, err = c.JobExplain(ctx, *t.JobID); err != nil {
			return nil, err
		}
	case t.State == "pending":
		e = &JobExplanation{Queue: t.Queue, Kind: t.Kind, Holds: []JobHold{{Reason: JobHoldWorkflowDependencies,
			Name: strings.Join(t.WaitingFor, ", "), Holders: t.WaitingIDs,
			Detail: fmt.Sprintf("its job is enqueued when its parents finish; waiting for %d: %s (tasks %s)",
				len(t.WaitingIDs), strings.Join(t.WaitingFor, ", "), ids(t.WaitingIDs))}}}
		e.Summary = "held: " + e.Holds[0].Detail
	default:
		e = &JobExplanation{Queue: t.Queue, Kind: t.Kind, Holds: []JobHold{}, Summary: t.State + ": not waiting"}
		if t.JobID != nil {
			e.ID = *t.JobID
		}
	}
	e.WorkflowID, e.TaskID, e.TaskState = t.WorkflowID, taskID, t.State
	return e, nil
}
