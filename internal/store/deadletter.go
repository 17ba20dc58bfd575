package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// The write side of the dead-letter table (sql/deadletter.sql): replay,
// purge, and the count that is their dry run. The read-side figures
// (groups, size, daily counts, signatures) are in internal/health.

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
var ErrEmptyFilter = errors.New("filter: set Kind, Signature or IDs (purge: or OlderThan)")

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
		return fmt.Errorf("filter: Limit must not be negative, got %d", f.Limit)
	}
	if f.OlderThan < 0 {
		return fmt.Errorf("filter: OlderThan must not be negative, got %s", f.OlderThan)
	}
	if f.Kind == "" && f.Signature == "" && len(f.IDs) == 0 && !(purge && f.OlderThan > 0) {
		return ErrEmptyFilter
	}
	return nil
}

// CountDead counts the dead letters f selects (Limit is ignored; an empty
// filter counts every one): the dry run of ReplayDead and PurgeDead.
func (s *Store) CountDead(ctx context.Context, db DBTX, f ReplayFilter) (int64, error) {
	kind, sig, ids, older := f.args()
	var n int64
	err := db.QueryRow(ctx, s.SQL("count_dead"), kind, sig, ids, older).Scan(&n)
	return n, Annotate("count dead letters", err)
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
func (s *Store) ReplayDead(ctx context.Context, db DBTX, f ReplayFilter, perSecond float64, progress func(done int)) (int, error) {
	if err := f.validate(false); err != nil {
		return 0, err
	}
	q := s.SQL("replay_dead")
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
			return done, Annotate("replay dead letters", err)
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
func (s *Store) PurgeDead(ctx context.Context, db DBTX, f ReplayFilter) (int64, error) {
	if err := f.validate(true); err != nil {
		return 0, err
	}
	var total int64
	for f.Limit == 0 || total < int64(f.Limit) {
		n := int64(purgeBatch)
		if f.Limit > 0 {
			n = min(n, int64(f.Limit)-total)
		}
		got, err := s.purgeOnce(ctx, db, f, int(n))
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
func (s *Store) PurgeDeadOlderThan(ctx context.Context, db DBTX, age time.Duration) (int64, error) {
	if age <= 0 {
		return 0, fmt.Errorf("purge: age must be positive, got %s", age)
	}
	return s.PurgeDead(ctx, db, ReplayFilter{OlderThan: age})
}

// PurgeDeadBatch deletes at most batch dead letters that died more than age
// ago, oldest first, in one statement: the unit of the retention service.
func (s *Store) PurgeDeadBatch(ctx context.Context, db DBTX, age time.Duration, batch int) (int64, error) {
	if age <= 0 {
		return 0, fmt.Errorf("purge: age must be positive, got %s", age)
	}
	if batch <= 0 {
		return 0, fmt.Errorf("purge: batch must be positive, got %d", batch)
	}
	return s.purgeOnce(ctx, db, ReplayFilter{OlderThan: age}, batch)
}

func (s *Store) purgeOnce(ctx context.Context, db DBTX, f ReplayFilter, n int) (int64, error) {
	kind, sig, ids, older := f.args()
	tag, err := db.Exec(ctx, s.SQL("purge_dead"), kind, sig, ids, older, n)
	if err != nil {
		return 0, Annotate("purge dead letters", err)
	}
	return tag.RowsAffected(), nil
}
