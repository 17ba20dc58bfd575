package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// SetQueuePaused pauses or resumes a queue (pause_queue). A paused queue's
// jobs stay ready; claims skip them.
func (s *Store) SetQueuePaused(ctx context.Context, db DBTX, queue string, paused bool) error {
	_, err := db.Exec(ctx, s.SQL("pause_queue"), queue, paused)
	return err
}

// NotifyQueues wakes the workers of these queues (notify_queues); in a
// transaction the notification is sent at commit.
func (s *Store) NotifyQueues(ctx context.Context, db DBTX, queues []string) error {
	_, err := db.Exec(ctx, s.SQL("notify_queues"), queues)
	return err
}

// EnqueueBatch inserts the jobs of as in one round trip (enqueue, pipelined)
// and returns how many were inserted: a job whose unique key is already in
// flight is not. db is normally the caller's transaction.
func (s *Store) EnqueueBatch(ctx context.Context, db DBTX, as []EnqueueArgs) (inserted int64, err error) {
	b := &pgx.Batch{}
	for _, a := range as {
		b.Queue(s.SQL("enqueue"), a.Args()...)
	}
	res := db.SendBatch(ctx, b)
	for range as {
		var id int64
		var ok bool
		if err := res.QueryRow().Scan(&id, &ok); err != nil {
			res.Close()
			return inserted, err
		}
		if ok {
			inserted++
		}
	}
	return inserted, res.Close()
}

// ReadyQueues returns the queues that hold ready jobs, due or scheduled
// (ready_queues: Client.Drain's default).
func (s *Store) ReadyQueues(ctx context.Context, db DBTX) ([]string, error) {
	var queues []string
	err := db.QueryRow(ctx, s.SQL("ready_queues")).Scan(&queues)
	return queues, err
}

// MakeDue makes the scheduled ready jobs of queues (and of kinds; nil: any)
// due now, except the ids in keep (make_due: Client.Drain with
// IncludeScheduled).
func (s *Store) MakeDue(ctx context.Context, db DBTX, queues, kinds []string, keep []int64) error {
	if keep == nil {
		keep = []int64{}
	}
	_, err := db.Exec(ctx, s.SQL("make_due"), queues, kinds, keep)
	return err
}

// ScheduleRow is one stored schedule (schedule_upsert, schedule_list).
type ScheduleRow struct {
	Name         string
	Cron         *string // nil: an interval schedule
	EverySeconds *int64  // nil: a cron schedule
	Timezone     string
	Queue, Kind  string
	Payload      []byte
	Priority     int
	MaxAttempts  *int
	NextFireAt   *time.Time
	LastFireAt   *time.Time // schedule_list only
	CreatedAt    time.Time  // schedule_list only
	UpdatedAt    time.Time  // schedule_list only
	Owner        *string    // schedule_list only: the ScheduleSync owner (nil: none)
}

// UpsertSchedule stores r; an unchanged definition writes nothing, and a
// changed job keeps the stored next fire time (see schedule_upsert).
func (s *Store) UpsertSchedule(ctx context.Context, db DBTX, r ScheduleRow) error {
	_, err := db.Exec(ctx, s.SQL("schedule_upsert"), r.Name, r.Cron, r.EverySeconds, r.Timezone, r.Queue, r.Kind,
		r.Payload, r.Priority, r.MaxAttempts, r.NextFireAt)
	return err
}

// RemoveSchedule deletes the schedule named name; removed is false when
// there was none.
func (s *Store) RemoveSchedule(ctx context.Context, db DBTX, name string) (removed bool, err error) {
	tag, err := db.Exec(ctx, s.SQL("schedule_remove"), name)
	return tag.RowsAffected() > 0, err
}

// LockScheduleOwner takes owner's transaction-scoped sync lock
// (schedule_sync_lock); db must be a transaction.
func (s *Store) LockScheduleOwner(ctx context.Context, db DBTX, owner string) error {
	_, err := db.Exec(ctx, s.SQL("schedule_sync_lock"), owner)
	return err
}

// SchedulesOwnedElsewhere returns, by name, the owner of each schedule
// among names that another owner than owner holds.
func (s *Store) SchedulesOwnedElsewhere(ctx context.Context, db DBTX, names []string, owner string) (map[string]string, error) {
	rows, err := db.Query(ctx, s.SQL("schedule_owned_elsewhere"), names, owner)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for rows.Next() {
		var name, other string
		if err := rows.Scan(&name, &other); err != nil {
			rows.Close()
			return nil, err
		}
		out[name] = other
	}
	return out, rows.Err()
}

// OwnSchedules marks the schedules names as owner's (schedule_own).
func (s *Store) OwnSchedules(ctx context.Context, db DBTX, names []string, owner string) error {
	_, err := db.Exec(ctx, s.SQL("schedule_own"), names, owner)
	return err
}

// PruneSchedules deletes owner's schedules not among names and returns
// theirs.
func (s *Store) PruneSchedules(ctx context.Context, db DBTX, owner string, names []string) ([]string, error) {
	rows, err := db.Query(ctx, s.SQL("schedule_prune"), owner, names)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// ListSchedules returns every stored schedule, by name.
func (s *Store) ListSchedules(ctx context.Context, db DBTX) ([]ScheduleRow, error) {
	rows, err := db.Query(ctx, s.SQL("schedule_list"))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ScheduleRow
	for rows.Next() {
		var r ScheduleRow
		if err := rows.Scan(&r.Name, &r.Cron, &r.EverySeconds, &r.Timezone, &r.Queue, &r.Kind, &r.Payload,
			&r.Priority, &r.MaxAttempts, &r.NextFireAt, &r.LastFireAt, &r.CreatedAt, &r.UpdatedAt, &r.Owner); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// DueSchedule is one schedule the scheduler found due (scheduler_due).
type DueSchedule struct {
	Name, Timezone string
	Cron           *string
	EverySeconds   *int64
	NextFireAt     *time.Time // nil: written by plain SQL without one
	UpdatedAt      time.Time  // the compare-and-set's witness
	Now            time.Time  // the clock the tick reads (the database's now by default)
}

// DueSchedules returns up to limit schedules due at now (nil: the
// database's clock), oldest first.
func (s *Store) DueSchedules(ctx context.Context, db DBTX, now *time.Time, limit int) ([]DueSchedule, error) {
	rows, err := db.Query(ctx, s.SQL("scheduler_due"), now, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []DueSchedule
	for rows.Next() {
		var d DueSchedule
		if err := rows.Scan(&d.Name, &d.Cron, &d.EverySeconds, &d.Timezone, &d.NextFireAt, &d.UpdatedAt, &d.Now); err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// ScheduleFire is one compare-and-set of a schedule (scheduler_fire): from
// the next fire time it read (Was, UpdatedAt) to Next, enqueueing Fires
// under Keys (one unique key per fire time).
type ScheduleFire struct {
	Name      string
	Was       *time.Time
	Next      *time.Time // nil: the schedule never fires again
	Last      *time.Time // the last of Fires (nil: none)
	UpdatedAt time.Time
	Fires     []time.Time
	Keys      []string
}

// FireSchedule advances a schedule and enqueues its fires in one
// statement. advanced is false when another process (or a redefinition)
// won the compare-and-set; fired and duplicates count the fires enqueued
// and those whose unique key was already in flight.
func (s *Store) FireSchedule(ctx context.Context, db DBTX, f ScheduleFire) (advanced bool, fired, duplicates int, err error) {
	rows, err := db.Query(ctx, s.SQL("scheduler_fire"), f.Name, f.Was, f.Next, f.Last, f.UpdatedAt, f.Fires, f.Keys)
	if err != nil {
		return false, 0, 0, err
	}
	defer rows.Close()
	for rows.Next() {
		advanced = true
		var id *int64
		var inserted *bool
		if err := rows.Scan(&id, &inserted); err != nil {
			return advanced, fired, duplicates, err
		}
		switch {
		case id == nil: // advanced without a fire
		case inserted != nil && *inserted:
			fired++
		default:
			duplicates++
		}
	}
	return advanced, fired, duplicates, rows.Err()
}
