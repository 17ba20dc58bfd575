package skiplock

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/skiplock/skiplock/internal/health"
	"github.com/skiplock/skiplock/internal/store"
)

// Dead-letter triage: group the dead-letter table by kind and error
// signature (DeadLetterList), count what a filter selects (DeadLetterCount),
// then replay it as new jobs in a trickle (DeadLetterReplay) or delete it
// (DeadLetterPurge). `skiplock dlq` and the dashboard's dead-letter page are
// these methods. Payloads are never read.

// DeadLetterGroup is one group of dead letters of DeadLetterList: one kind
// and one error signature (the error with ids and numbers normalised away,
// so they do not split groups).
type DeadLetterGroup struct {
	Kind      string `json:"kind"`
	Signature string `json:"signature"`
	// SampleError is the first line of the group's newest error, at most
	// 300 characters.
	SampleError string `json:"sample_error"`
	// SampleID is the job id of the group's newest dead letter (look it up
	// under access control: JobGet, JobPayload).
	SampleID int64 `json:"sample_id"`
	// Count is the group's size; First and Last when its oldest and newest
	// member died.
	Count int64     `json:"count"`
	First time.Time `json:"first"`
	Last  time.Time `json:"last"`
}

// Dead-letter list limits (DeadLetterList's limit).
const (
	DefaultDeadLetterListLimit = 100
	MaxDeadLetterListLimit     = 10_000
)

// DeadLetterList groups the dead-letter table by kind and error signature,
// biggest group first: at most limit groups (0: DefaultDeadLetterListLimit),
// of kind only unless kind is "".
func (c *Client) DeadLetterList(ctx context.Context, kind string, limit int) ([]DeadLetterGroup, error) {
	if kind != "" {
		if err := validateName("kind", kind); err != nil {
			return nil, err
		}
	}
	switch {
	case limit == 0:
		limit = DefaultDeadLetterListLimit
	case limit < 0 || limit > MaxDeadLetterListLimit:
		return nil, invalidJob("limit", "must be between 1 and %d, got %d", MaxDeadLetterListLimit, limit)
	}
	groups, err := health.DeadLetterGroups(ctx, c.pool, c.cfg.Schema, kind, limit)
	if err != nil {
		return nil, fmt.Errorf("skiplock: dead-letter list: %w", err)
	}
	out := make([]DeadLetterGroup, len(groups))
	for i, g := range groups {
		out[i] = DeadLetterGroup(g)
	}
	return out, nil
}

// DeadLetterFilter selects dead letters for DeadLetterCount,
// DeadLetterReplay and DeadLetterPurge. The fields combine: a dead letter
// must match every one that is set.
type DeadLetterFilter struct {
	// Kind selects one kind.
	Kind string
	// Signature selects one error signature, as DeadLetterList reports it;
	// a raw error message works too (it is normalised first).
	Signature string
	// IDs selects dead letters by their job id.
	IDs []int64
	// Limit caps how many are replayed or purged (oldest first); 0 means
	// all that match. DeadLetterCount ignores it.
	Limit int
	// OlderThan, when positive, selects only dead letters that died more
	// than this long ago.
	OlderThan time.Duration
}

// validate checks f; a replay or a purge refuses a filter that selects
// every dead letter (purge: unless OlderThan bounds it).
func (f DeadLetterFilter) validate(action string) error {
	if f.Kind != "" {
		if err := validateName("kind", f.Kind); err != nil {
			return err
		}
	}
	if f.Limit < 0 {
		return invalidJob("limit", "must not be negative, got %d", f.Limit)
	}
	if f.OlderThan < 0 {
		return invalidJob("older_than", "must not be negative, got %s", f.OlderThan)
	}
	for _, id := range f.IDs {
		if err := validateJobID(id); err != nil {
			return err
		}
	}
	switch {
	case action == "" || f.Kind != "" || f.Signature != "" || len(f.IDs) > 0:
		return nil
	case action == "purge" && f.OlderThan > 0:
		return nil
	case action == "purge":
		return invalidJob("filter", "set Kind, Signature, IDs or OlderThan: a purge never selects every dead letter")
	}
	return invalidJob("filter", "set Kind, Signature or IDs: a replay never selects every dead letter")
}

func (f DeadLetterFilter) store() store.ReplayFilter {
	return store.ReplayFilter{Kind: f.Kind, Signature: f.Signature, IDs: f.IDs, Limit: f.Limit, OlderThan: f.OlderThan}
}

// DeadLetterCount counts the dead letters f selects (Limit is ignored; an
// empty filter counts every one): the dry run of DeadLetterReplay and
// DeadLetterPurge.
func (c *Client) DeadLetterCount(ctx context.Context, f DeadLetterFilter) (int64, error) {
	if err := f.validate(""); err != nil {
		return 0, err
	}
	n, err := c.store.CountDead(ctx, c.pool, f.store())
	if err != nil {
		return 0, fmt.Errorf("skiplock: dead-letter count: %w", err)
	}
	return n, nil
}

// DeadLetterReplayOptions pace DeadLetterReplay. The zero value replays as
// fast as the statements go.
type DeadLetterReplayOptions struct {
	// PerSecond caps the jobs replayed per second (0: no cap), so that a
	// replay is a trickle, not a burst that crowds out live work.
	PerSecond float64
	// Progress, if not nil, is called after each batch with the number
	// replayed so far.
	Progress func(done int)
}

// DeadLetterReplay re-enqueues the dead letters f selects, oldest first, as
// new ready jobs (same queue, kind, payload, priority, attempt budget,
// tenant and entity; a new id), in small batches paced by opts. Each batch
// is one statement that deletes the dead rows and inserts their jobs
// together, so a dead letter becomes exactly one new job even when two
// replays race; one whose unique key is in flight again stays dead. It
// returns how many jobs it enqueued; when ctx ends it stops between batches
// and returns that count with ctx's error. A filter that selects every dead
// letter is refused (a *FieldError on "filter").
func (c *Client) DeadLetterReplay(ctx context.Context, f DeadLetterFilter, opts DeadLetterReplayOptions) (int, error) {
	if err := f.validate("replay"); err != nil {
		return 0, err
	}
	if math.IsNaN(opts.PerSecond) || opts.PerSecond < 0 {
		return 0, invalidJob("per_second", "must be 0 (no cap) or a positive rate, got %v", opts.PerSecond)
	}
	n, err := c.store.ReplayDead(ctx, c.pool, f.store(), opts.PerSecond, opts.Progress)
	if err != nil {
		return n, fmt.Errorf("skiplock: dead-letter replay: %w", err)
	}
	return n, nil
}

// DeadLetterPurge deletes the dead letters f selects, oldest first, in
// bounded batches, and returns how many it deleted (also when it fails part
// way). The retention service already purges dead letters older than
// Config.DeadLetterRetention. A filter that selects every dead letter is
// refused (a *FieldError on "filter"); OlderThan alone is enough.
func (c *Client) DeadLetterPurge(ctx context.Context, f DeadLetterFilter) (int64, error) {
	if err := f.validate("purge"); err != nil {
		return 0, err
	}
	n, err := c.store.PurgeDead(ctx, c.pool, f.store())
	if err != nil {
		return n, fmt.Errorf("skiplock: dead-letter purge: %w", err)
	}
	return n, nil
}
