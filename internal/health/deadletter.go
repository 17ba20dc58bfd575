package health

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DeadGroup is one group of dead letters: a kind and an error signature
// (the error normalised by the error_signature SQL function, so that ids and
// numbers do not split groups).
type DeadGroup struct {
	Kind      string `json:"kind"`
	Signature string `json:"signature"`
	// SampleError is the first line of the group's newest error, at most
	// 300 characters.
	SampleError string `json:"sample_error"`
	// SampleID is the job id of the group's newest dead letter (look it up
	// under access control; the payload is never shown here).
	SampleID int64     `json:"sample_id"`
	Count    int64     `json:"count"`
	First    time.Time `json:"first"`
	Last     time.Time `json:"last"`
}

// DeadLetterGroups groups the dead-letter table by kind and error signature,
// biggest group first. kind "" means every kind; limit <= 0 means 100.
func DeadLetterGroups(ctx context.Context, db DBTX, schema, kind string, limit int) ([]DeadGroup, error) {
	q, err := query(schema, "dead_letter_groups")
	if err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = 100
	}
	rows, err := db.Query(ctx, q, nullable(kind), limit)
	if err != nil {
		return nil, wrap("dead-letter groups", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (DeadGroup, error) {
		var g DeadGroup
		err := r.Scan(&g.Kind, &g.Signature, &g.Count, &g.First, &g.Last, &g.SampleError, &g.SampleID)
		return g, err
	})
	return out, wrap("dead-letter groups", err)
}

// DeadLetterSize is the dead-letter table's size and growth.
type DeadLetterSize struct {
	// Total is every dead letter kept (30 days by default).
	Total int64 `json:"total"`
	// Last24h and Prev24h count the jobs that died in the last 24 hours and
	// in the 24 hours before: a flat or falling Last24h is healthy, a
	// climbing one is a broken handler.
	Last24h int64 `json:"last_24h"`
	Prev24h int64 `json:"prev_24h"`
}

// DeadLetterSizeOf returns the dead-letter table's size and its daily delta.
func DeadLetterSizeOf(ctx context.Context, db DBTX, schema string) (DeadLetterSize, error) {
	var s DeadLetterSize
	err := scanOne(ctx, db, schema, "dead_letter_size", "dead-letter size", nil, &s.Total, &s.Last24h, &s.Prev24h)
	return s, err
}

// DeadDay is the number of jobs of one kind that died on one UTC day.
type DeadDay struct {
	Day   time.Time `json:"day"`
	Kind  string    `json:"kind"`
	Count int64     `json:"count"`
}

// DeadLetterDaily returns dead letters per UTC day and kind over the last
// days days (today included), oldest first.
func DeadLetterDaily(ctx context.Context, db DBTX, schema string, days int) ([]DeadDay, error) {
	q, err := query(schema, "dead_letter_daily")
	if err != nil {
		return nil, err
	}
	if days <= 0 {
		days = 7
	}
	rows, err := db.Query(ctx, q, days)
	if err != nil {
		return nil, wrap("dead letters per day", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (DeadDay, error) {
		var d DeadDay
		err := r.Scan(&d.Day, &d.Kind, &d.Count)
		d.Day = time.Date(d.Day.Year(), d.Day.Month(), d.Day.Day(), 0, 0, 0, 0, time.UTC)
		return d, err
	})
	return out, wrap("dead letters per day", err)
}

// ReplayFilter selects dead letters. The fields combine (a dead letter must
// match every one that is set). Replay and purge refuse an empty filter.
type ReplayFilter struct {
	// Kind selects one kind.
	Kind string
	// Signature selects one error signature, as `skiplock dlq list` prints
	// it; a raw error message works too (it is normalised first).
	Signature string
	// IDs selects dead letters by their job id.
	IDs []int64
	// Limit caps how many are replayed or purged; 0 means all that match.
	Limit int
	// OlderThan, when positive, selects only dead letters that died more
	// than this long ago.
	OlderThan time.Duration
}

// ErrEmptyFilter is returned by ReplayDead and PurgeDead for a filter that
// would select every dead letter.
var ErrEmptyFilter = errors.New("health: filter: set Kind, Signature or IDs (purge: or OlderThan)")

func (f ReplayFilter) args() (kind, sig, ids, older any) {
	kind, sig = nullable(f.Kind), nullable(f.Signature)
	if len(f.IDs) > 0 {
		ids = f.IDs
	}
	if f.OlderThan > 0 {
		older = f.OlderThan.Microseconds()
	}
	return kind, sig, ids, older
}

func (f ReplayFilter) validate(purge bool) error {
	if f.Limit < 0 {
		return fmt.Errorf("health: filter: Limit must not be negative, got %d", f.Limit)
	}
	if f.OlderThan < 0 {
		return fmt.Errorf("health: filter: OlderThan must not be negative, got %s", f.OlderThan)
	}
	if f.Kind == "" && f.Signature == "" && len(f.IDs) == 0 && !(purge && f.OlderThan > 0) {
		return ErrEmptyFilter
	}
	return nil
}

// CountDead counts the dead letters f selects (Limit is ignored; an empty
// filter counts every one).
func CountDead(ctx context.Context, db DBTX, schema string, f ReplayFilter) (int64, error) {
	q, err := query(schema, "count_dead")
	if err != nil {
		return 0, err
	}
	kind, sig, ids, older := f.args()
	var n int64
	err = db.QueryRow(ctx, q, kind, sig, ids, older).Scan(&n)
	return n, wrap("count dead letters", err)
}

// Replay batch bounds: a batch is about a tenth of a second's worth at the
// requested rate, between these.
const (
	minReplayBatch = 1
	maxReplayBatch = 100
)

// ReplayDead re-enqueues the dead letters f selects (oldest first) as new
// jobs, at most perSecond jobs per second (<= 0: no limit), in small
// batches so a replay is a trickle, not a burst that recreates the
// fairness problem. Each batch is one statement that deletes the dead rows
// and inserts their jobs together, so a dead job becomes exactly one new job
// even when two replays race; the queues are woken on commit. progress, if
// not nil, is called after each batch with the number replayed so far. A
// dead letter whose unique key is in flight again is left dead. It returns
// how many jobs it enqueued; on ctx cancellation it stops between batches
// and returns the count with ctx's error.
func ReplayDead(ctx context.Context, db DBTX, schema string, f ReplayFilter, perSecond float64, progress func(done int)) (int, error) {
	if err := f.validate(false); err != nil {
		return 0, err
	}
	q, err := query(schema, "replay_dead")
	if err != nil {
		return 0, err
	}
	kind, sig, ids, _ := f.args()
	batch := maxReplayBatch
	if perSecond > 0 && !math.IsInf(perSecond, 1) {
		batch = int(math.Min(maxReplayBatch, math.Max(minReplayBatch, math.Ceil(perSecond/10))))
	} else {
		perSecond = 0
	}
	start := time.Now()
	done, idle := 0, 0
	for f.Limit == 0 || done < f.Limit {
		n := batch
		if f.Limit > 0 {
			n = min(n, f.Limit-done)
		}
		if perSecond > 0 {
			// Pace: the next batch starts when the jobs so far are due.
			due := start.Add(time.Duration(float64(done) / perSecond * float64(time.Second)))
			if err := sleepUntil(ctx, due); err != nil {
				return done, err
			}
		} else if err := ctx.Err(); err != nil {
			return done, err
		}
		var replayed, candidates, woken int
		err := db.QueryRow(ctx, q, kind, sig, ids, n).Scan(&replayed, &candidates, &woken)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23505" && idle < 3 {
			// A job with the same unique key was enqueued between the
			// statement's check and its insert: nothing was written; the
			// next batch leaves that dead letter alone.
			idle++
			continue
		}
		if err != nil {
			return done, wrap("replay dead letters", err)
		}
		done += replayed
		if progress != nil {
			progress(done)
		}
		if candidates == 0 || (candidates < n && replayed == candidates) {
			break // nothing (more) matches
		}
		if replayed == 0 {
			if idle++; idle >= 3 {
				break
			}
		} else {
			idle = 0
		}
	}
	return done, nil
}

func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// purgeBatch bounds the rows one purge statement deletes.
const purgeBatch = 5000

// PurgeDead deletes the dead letters f selects, in bounded batches, and
// returns how many it deleted.
func PurgeDead(ctx context.Context, db DBTX, schema string, f ReplayFilter) (int64, error) {
	if err := f.validate(true); err != nil {
		return 0, err
	}
	var total int64
	for f.Limit == 0 || total < int64(f.Limit) {
		n := int64(purgeBatch)
		if f.Limit > 0 {
			n = min(n, int64(f.Limit)-total)
		}
		got, err := purgeOnce(ctx, db, schema, f, int(n))
		total += got
		if err != nil {
			return total, err
		}
		if got < n {
			break
		}
	}
	return total, nil
}

// PurgeDeadOlderThan deletes every dead letter that died more than age ago,
// in bounded batches, and returns how many it deleted.
func PurgeDeadOlderThan(ctx context.Context, db DBTX, schema string, age time.Duration) (int64, error) {
	if age <= 0 {
		return 0, fmt.Errorf("health: purge: age must be positive, got %s", age)
	}
	return PurgeDead(ctx, db, schema, ReplayFilter{OlderThan: age})
}

// PurgeDeadBatch deletes at most batch dead letters that died more than age
// ago, oldest first, in one statement: the unit of the retention service.
func PurgeDeadBatch(ctx context.Context, db DBTX, schema string, age time.Duration, batch int) (int64, error) {
	if age <= 0 {
		return 0, fmt.Errorf("health: purge: age must be positive, got %s", age)
	}
	if batch <= 0 {
		return 0, fmt.Errorf("health: purge: batch must be positive, got %d", batch)
	}
	return purgeOnce(ctx, db, schema, ReplayFilter{OlderThan: age}, batch)
}

func purgeOnce(ctx context.Context, db DBTX, schema string, f ReplayFilter, n int) (int64, error) {
	q, err := query(schema, "purge_dead")
	if err != nil {
		return 0, err
	}
	kind, sig, ids, older := f.args()
	tag, err := db.Exec(ctx, q, kind, sig, ids, older, n)
	if err != nil {
		return 0, wrap("purge dead letters", err)
	}
	return tag.RowsAffected(), nil
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// ErrorSignature normalises an error text as the database does for
// jobs_dead.error_signature, so a signature typed by an operator matches the
// dead-letter groups'.
func ErrorSignature(ctx context.Context, db DBTX, schema, text string) (string, error) {
	var sig string
	err := scanOne(ctx, db, schema, "error_signature", "error signature", []any{text}, &sig)
	return sig, err
}
