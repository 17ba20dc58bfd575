package health

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
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
	out, err := collect(ctx, db, schema, q, []any{nullable(kind), limit}, func(r pgx.CollectableRow) (DeadGroup, error) {
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
	out, err := collect(ctx, db, schema, q, []any{days}, func(r pgx.CollectableRow) (DeadDay, error) {
		var d DeadDay
		err := r.Scan(&d.Day, &d.Kind, &d.Count)
		d.Day = time.Date(d.Day.Year(), d.Day.Month(), d.Day.Day(), 0, 0, 0, 0, time.UTC)
		return d, err
	})
	return out, wrap("dead letters per day", err)
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
