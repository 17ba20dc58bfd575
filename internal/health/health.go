// Package health reads skiplock's SQL health pack (the views and functions
// of migration 002) into typed Go values: backlog and queue lag per queue,
// the hot table's vacuum state and xmin horizon, long runners, wait
// percentiles, dead-letter groups and growth, worker processes, the
// jobs_done partitions; it runs the doctor's checks. It only reads: the
// write-side operations (dead-letter replay and purge, partition DDL) are
// in internal/store. The CLI (stats, top, doctor, dlq), the dashboard and
// the Prometheus collector all read through it.
//
// Every function takes the schema holding skiplock's tables, validates it and
// reads only what the health views expose: never a payload.
package health

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/internal/store"
)

// QueueStat is one queue's backlog (the queue_stats view).
type QueueStat struct {
	// Queue is the queue's name.
	Queue string `json:"queue"`
	// Ready counts jobs due now (run_at <= now).
	Ready int64 `json:"ready"`
	// Scheduled counts jobs waiting for a future run_at.
	Scheduled int64 `json:"scheduled"`
	// Running counts jobs claimed and not finished.
	Running int64 `json:"running"`
	// Dead counts the queue's dead letters.
	Dead int64 `json:"dead"`
	// OldestReadyAgeSeconds is the queue lag: how long the oldest due job
	// has waited (0 when none is due). The SLO is under two minutes.
	OldestReadyAgeSeconds float64 `json:"oldest_ready_age_seconds"`
	// Paused reports a queue paused with `skiplock queue pause`.
	Paused bool `json:"paused"`
}

// QueueStats returns every queue that has jobs, dead letters or a pause
// flag, in name order.
func QueueStats(ctx context.Context, db DBTX, schema string) ([]QueueStat, error) {
	q, err := query(schema, "queue_stats")
	if err != nil {
		return nil, err
	}
	out, err := collect(ctx, db, schema, q, nil, func(r pgx.CollectableRow) (QueueStat, error) {
		var s QueueStat
		err := r.Scan(&s.Queue, &s.Ready, &s.Scheduled, &s.Running, &s.Dead, &s.OldestReadyAgeSeconds, &s.Paused)
		return s, err
	})
	return out, wrap("queue stats", err)
}

// QueueSeen reports whether anything ever named queue: a ready or scheduled
// job, a dead letter, a pause flag, a schedule or a live worker. The CLI
// warns before pausing a queue nothing has seen (a typo goes unnoticed
// otherwise).
func QueueSeen(ctx context.Context, db DBTX, schema, queue string) (bool, error) {
	q, err := query(schema, "queue_seen")
	if err != nil {
		return false, err
	}
	var seen bool
	err = readRow(ctx, db, schema, q, []any{queue}, &seen)
	return seen, wrap("queue seen", err)
}

// VacuumState is the hot jobs table's vacuum state (the vacuum_state view)
// and the oldest transaction holding back the xmin horizon (xmin_holders).
type VacuumState struct {
	// LiveTuples and DeadTuples are pg_stat_user_tables' n_live_tup and
	// n_dead_tup for the jobs table.
	LiveTuples int64 `json:"live_tuples"`
	DeadTuples int64 `json:"dead_tuples"`
	// DeadRatio is DeadTuples / (LiveTuples + DeadTuples).
	DeadRatio float64 `json:"dead_ratio"`
	// LastAutovacuum and LastVacuum are nil when the table was never
	// vacuumed that way since statistics were reset.
	LastAutovacuum *time.Time `json:"last_autovacuum"`
	LastVacuum     *time.Time `json:"last_vacuum"`
	// AutovacuumCount and VacuumCount count the runs.
	AutovacuumCount int64 `json:"autovacuum_count"`
	VacuumCount     int64 `json:"vacuum_count"`
	// AutovacuumThreshold is the dead-tuple count at which autovacuum should
	// start on the table (its threshold plus scale factor × rows).
	AutovacuumThreshold float64 `json:"autovacuum_threshold"`
	// Updates and HOTUpdates count row updates and how many were HOT (no
	// index touched); a falling HOT share means fillfactor lost its effect.
	Updates    int64 `json:"updates"`
	HOTUpdates int64 `json:"hot_updates"`
	// Reloptions are the table's storage options, e.g. "fillfactor=80".
	Reloptions []string `json:"reloptions"`
	// HeapBytes is the size of the table's heap.
	HeapBytes int64 `json:"heap_bytes"`
	// OldestXminAgeSeconds is the age of the oldest transaction of this
	// database holding back the xmin horizon (0 when none); OldestXminPID
	// and OldestXminApp identify it (the pid is 0 for a prepared
	// transaction, whose gid is in OldestXminApp).
	OldestXminAgeSeconds float64 `json:"oldest_xmin_age_seconds"`
	OldestXminPID        int     `json:"oldest_xmin_pid"`
	OldestXminApp        string  `json:"oldest_xmin_app"`
}

// Vacuum returns the hot table's vacuum state.
func Vacuum(ctx context.Context, db DBTX, schema string) (VacuumState, error) {
	var v VacuumState
	q, err := query(schema, "vacuum_state")
	if err != nil {
		return v, err
	}
	var age *float64
	var pid *int32
	var app *string
	err = readRow(ctx, db, schema, q, nil, &v.LiveTuples, &v.DeadTuples, &v.DeadRatio, &v.LastAutovacuum, &v.LastVacuum,
		&v.AutovacuumCount, &v.VacuumCount, &v.AutovacuumThreshold, &v.Updates, &v.HOTUpdates,
		&v.Reloptions, &v.HeapBytes, &age, &pid, &app)
	if err != nil {
		return VacuumState{}, wrap("vacuum state", err)
	}
	if age != nil {
		v.OldestXminAgeSeconds = *age
	}
	if pid != nil {
		v.OldestXminPID = int(*pid)
	}
	if app != nil {
		v.OldestXminApp = *app
	}
	return v, nil
}

// XminHolder is one row of the xmin_holders view: something that keeps
// vacuum from removing dead tuples newer than its xmin.
type XminHolder struct {
	// Holder is "backend", "prepared_xact" or "replication_slot".
	Holder string `json:"holder"`
	// PID is the backend's process id (0 for a prepared transaction or an
	// inactive slot).
	PID int `json:"pid"`
	// User is the session's role.
	User string `json:"user"`
	// Application is the session's application_name, a prepared
	// transaction's gid or a slot's name.
	Application string `json:"application"`
	// BackendType is pg_stat_activity's backend_type or a slot's type.
	BackendType string `json:"backend_type"`
	// State is the session's state ("idle in transaction", "active", …).
	State string `json:"state"`
	// Xmin is the transaction id it holds the horizon at.
	Xmin string `json:"xmin"`
	// XminAgeXIDs is how many transactions old that xmin is.
	XminAgeXIDs int64 `json:"xmin_age_xids"`
	// XactStart is when its transaction began (nil for slots).
	XactStart *time.Time `json:"xact_start"`
	// XactAgeSeconds is how long ago that was (0 for slots).
	XactAgeSeconds float64 `json:"xact_age_seconds"`
}

// XminHolders returns the oldest holders of the xmin horizon, oldest first.
func XminHolders(ctx context.Context, db DBTX, schema string, limit int) ([]XminHolder, error) {
	q, err := query(schema, "xmin_holders")
	if err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = 10
	}
	out, err := collect(ctx, db, schema, q, []any{limit}, func(r pgx.CollectableRow) (XminHolder, error) {
		var h XminHolder
		var pid *int32
		var xmin *string
		var xidAge *int32
		var xactAge *float64
		err := r.Scan(&h.Holder, &pid, &h.User, &h.Application, &h.BackendType, &h.State, &xmin, &xidAge,
			&h.XactStart, &xactAge)
		if pid != nil {
			h.PID = int(*pid)
		}
		if xmin != nil {
			h.Xmin = *xmin
		}
		if xidAge != nil {
			h.XminAgeXIDs = int64(*xidAge)
		}
		if xactAge != nil {
			h.XactAgeSeconds = *xactAge
		}
		return h, err
	})
	return out, wrap("xmin holders", err)
}

// LongRunner is a running job (the long_runners view). No payload.
type LongRunner struct {
	ID             int64     `json:"id"`
	Queue          string    `json:"queue"`
	Kind           string    `json:"kind"`
	Attempt        int       `json:"attempt"`
	MaxAttempts    int       `json:"max_attempts"`
	LockedBy       string    `json:"locked_by"`
	AttemptedAt    time.Time `json:"attempted_at"`
	RuntimeSeconds float64   `json:"runtime_seconds"`
	LeaseExpiresAt time.Time `json:"lease_expires_at"`
	// LeaseExpired reports a lease the reaper has yet to return.
	LeaseExpired bool `json:"lease_expired"`
}

// LongRunners returns running jobs, longest-running first (at most limit;
// 0 means 20).
func LongRunners(ctx context.Context, db DBTX, schema string, limit int) ([]LongRunner, error) {
	q, err := query(schema, "long_runners")
	if err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = 20
	}
	out, err := collect(ctx, db, schema, q, []any{limit}, func(r pgx.CollectableRow) (LongRunner, error) {
		var l LongRunner
		err := r.Scan(&l.ID, &l.Queue, &l.Kind, &l.Attempt, &l.MaxAttempts, &l.LockedBy, &l.AttemptedAt,
			&l.RuntimeSeconds, &l.LeaseExpiresAt, &l.LeaseExpired)
		return l, err
	})
	return out, wrap("long runners", err)
}

// QueueWait is the wait distribution of a queue's due jobs (wait_p99 view).
type QueueWait struct {
	Queue string `json:"queue"`
	// Sampled is how many due jobs the percentiles are over (at most 10,000
	// per queue, in claim order: beyond that they are an upper bound).
	Sampled        int64   `json:"sampled"`
	WaitP50Seconds float64 `json:"wait_p50_seconds"`
	WaitP99Seconds float64 `json:"wait_p99_seconds"`
}

// WaitP99 returns, per queue with due jobs, the p50 and p99 of how long
// they have been waiting.
func WaitP99(ctx context.Context, db DBTX, schema string) ([]QueueWait, error) {
	q, err := query(schema, "wait_p99")
	if err != nil {
		return nil, err
	}
	out, err := collect(ctx, db, schema, q, nil, func(r pgx.CollectableRow) (QueueWait, error) {
		var w QueueWait
		err := r.Scan(&w.Queue, &w.Sampled, &w.WaitP50Seconds, &w.WaitP99Seconds)
		return w, err
	})
	return out, wrap("wait percentiles", err)
}

// Worker is one worker process (the workers table), refreshed with every
// heartbeat of the process.
type Worker struct {
	ID          string   `json:"id"`
	Hostname    string   `json:"hostname"`
	PID         int      `json:"pid"`
	Queues      []string `json:"queues"`
	Concurrency int      `json:"concurrency"`
	// Running is how many jobs the process was running at its last beat.
	Running int `json:"running"`
	// Claimed, Completed and Failed are cumulative for the process.
	Claimed   int64 `json:"claimed"`
	Completed int64 `json:"completed"`
	Failed    int64 `json:"failed"`
	// ClaimP99MS is the p99 of its last claims in milliseconds (nil before
	// its first claim).
	ClaimP99MS  *float64   `json:"claim_p99_ms"`
	StartedAt   time.Time  `json:"started_at"`
	HeartbeatAt time.Time  `json:"heartbeat_at"`
	StoppedAt   *time.Time `json:"stopped_at"`
	// Live reports a process that has not stopped and beat within
	// LiveWindow.
	Live bool `json:"live"`
}

// LiveWindow is how recent a worker's last beat must be for it to count as
// live. Workers beat every heartbeat interval (a third of the lease, 10 s by
// default); the window allows for long leases.
const LiveWindow = 5 * time.Minute

// Workers returns the worker processes, live ones first, most recent beat
// first (at most 1,000).
func Workers(ctx context.Context, db DBTX, schema string) ([]Worker, error) {
	q, err := query(schema, "workers")
	if err != nil {
		return nil, err
	}
	out, err := collect(ctx, db, schema, q, []any{LiveWindow.Microseconds()}, func(r pgx.CollectableRow) (Worker, error) {
		var w Worker
		err := r.Scan(&w.ID, &w.Hostname, &w.PID, &w.Queues, &w.Concurrency, &w.Running,
			&w.Claimed, &w.Completed, &w.Failed, &w.ClaimP99MS, &w.StartedAt, &w.HeartbeatAt, &w.StoppedAt, &w.Live)
		return w, err
	})
	return out, wrap("workers", err)
}

// WorkerTotals counts the worker processes of the workers table by state and
// sums their cumulative counters over every row, stopped processes included:
// a process's counters only grow and its row keeps its final counts, so the
// sums only grow while rows are kept.
type WorkerTotals struct {
	// Live processes have not stopped and beat within LiveWindow; Stale ones
	// have not stopped but have not beat since (killed, or partitioned away);
	// Stopped ones shut down cleanly.
	Live    int64 `json:"live"`
	Stale   int64 `json:"stale"`
	Stopped int64 `json:"stopped"`
	// Claimed, Completed and Failed sum the processes' counters.
	Claimed   int64 `json:"claimed_total"`
	Completed int64 `json:"completed_total"`
	Failed    int64 `json:"failed_total"`
}

// WorkerTotalsOf returns the worker processes by state and their summed
// counters.
func WorkerTotalsOf(ctx context.Context, db DBTX, schema string) (WorkerTotals, error) {
	var t WorkerTotals
	q, err := query(schema, "worker_totals")
	if err != nil {
		return t, err
	}
	err = readRow(ctx, db, schema, q, []any{LiveWindow.Microseconds()}, &t.Live, &t.Stale, &t.Stopped, &t.Claimed, &t.Completed, &t.Failed)
	if err != nil {
		return WorkerTotals{}, wrap("worker totals", err)
	}
	return t, nil
}

// Partition is one partition of jobs_done.
type Partition struct {
	// Name is jobs_done_YYYYMMDD, or jobs_done_default.
	Name string `json:"name"`
	// Bound is PostgreSQL's description of its range.
	Bound string `json:"bound"`
}

// DonePartitions lists the partitions of jobs_done by name.
func DonePartitions(ctx context.Context, db DBTX, schema string) ([]Partition, error) {
	q, err := query(schema, "done_partitions")
	if err != nil {
		return nil, err
	}
	out, err := collect(ctx, db, schema, q, nil, func(r pgx.CollectableRow) (Partition, error) {
		var p Partition
		err := r.Scan(&p.Name, &p.Bound)
		return p, err
	})
	return out, wrap("jobs_done partitions", err)
}

// Limits returns the concurrency limits with their use now (the statement
// lives with the claim that enforces them, in internal/store); with
// backlog, also the ready jobs each covers.
func Limits(ctx context.Context, db DBTX, schema string, backlog bool) ([]store.LimitUse, error) {
	return store.New(schema).ListLimits(ctx, db, backlog)
}

// JobCounts are exact counts of jobs by state, for small databases
// (skiplock dev's progress line); QueueStats is the production figure.
type JobCounts struct {
	Ready, Running, Dead int64
}

// CountJobs counts ready and running jobs and dead letters exactly.
func CountJobs(ctx context.Context, db DBTX, schema string) (JobCounts, error) {
	var c JobCounts
	err := scanOne(ctx, db, schema, "job_counts", "job counts", nil, &c.Ready, &c.Running, &c.Dead)
	return c, err
}
