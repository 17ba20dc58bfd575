package store

import (
	"context"
	"time"
)

// SetQueueAging sets the aging of queue (after 0: no aging).
func (s *Store) SetQueueAging(ctx context.Context, db DBTX, queue string, after time.Duration, to int) error {
	var a, t any
	if after > 0 {
		a, t = Micros(after), to
	}
	_, err := db.Exec(ctx, s.SQL("queue_aging_set"), queue, a, t)
	return err
}

// AgeReady runs one aging pass, promoting at most perQueue jobs per queue,
// and returns how many it promoted.
func (s *Store) AgeReady(ctx context.Context, db DBTX, perQueue int) (int64, error) {
	var n int64
	err := s.keyedRow(ctx, db, "age_ready", []any{perQueue}, &n)
	return n, err
}
