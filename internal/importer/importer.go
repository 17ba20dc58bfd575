// Package importer moves jobs waiting in another queue into skiplock:
// River's river_job table (river.go) and asynq's Redis keys (asynq.go),
// behind `skiplock import river` and `skiplock import asynq`.
//
// Both insert through the library's enqueue path (Client.EnqueueManyTx,
// the same validation and COPY/enqueue_job statements every producer uses)
// and both are crash-safe batch by batch, in the way the source allows:
//
//   - River in skiplock's database: a batch's rows are locked, enqueued and
//     deleted in one transaction. A crash anywhere rolls the batch back
//     whole; a re-run finds only what is left.
//   - asynq: a batch is first taken out of asynq's reach in one Redis script
//     (held in a hash beside the queue), then enqueued in one PostgreSQL
//     transaction whose id is recorded with the held tasks before it
//     commits, then removed from Redis. A re-run asks PostgreSQL what became
//     of each held batch (pg_xact_status): committed batches are only
//     removed, the others imported again. The task id is the job's unique
//     key as well, so two imports of one task while it is in flight make one
//     job.
//
// SQL lives in sql/*.sql (statements on River's tables, rendered for
// River's schema, and the transaction-status probe), Lua in lua/*.lua.
package importer

import (
	"embed"
	"encoding/json"
	"errors"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/sqlfile"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

//go:embed lua/*.lua
var luaFiles embed.FS

var rawSQL = sqlfile.MustParse(sqlFiles, "sql")

// DefaultBatchSize is the jobs per transaction when Options.BatchSize is 0.
const DefaultBatchSize = 1000

// Summary is what an import did (or, in a dry run, would do).
type Summary struct {
	// Source is "river" or "asynq".
	Source string `json:"source"`
	// DryRun: nothing was written; Moved counts what would move.
	DryRun bool `json:"dry_run"`
	// Moved counts the jobs enqueued into skiplock by source state and
	// kind.
	Moved map[string]map[string]int64 `json:"moved"`
	// MovedTotal is the sum of Moved.
	MovedTotal int64 `json:"moved_total"`
	// Recovered counts jobs of an earlier, interrupted run that this run
	// finished (asynq: held tasks whose batch had committed, only removed
	// from Redis now, or imported again when it had not).
	Recovered int64 `json:"recovered,omitempty"`
	// Left counts the jobs left in the source, by reason: a state the
	// import does not move (running, pending, completed, ...), "locked"
	// (the source was working on it), "invalid: <field>" (skiplock would
	// refuse it; the message names the field), "unique key held" (a job
	// with its unique key is in flight in skiplock already).
	Left map[string]int64 `json:"left"`
	// Batches is the number of transactions that moved jobs.
	Batches int `json:"batches"`
	// Seconds is the wall time of the import, JobsPerS MovedTotal over it.
	Seconds  float64 `json:"seconds"`
	JobsPerS float64 `json:"jobs_per_s"`
	// LockMaxMS and LockMeanMS are how long one batch kept its source rows
	// locked (River) or its tasks held out of asynq's reach (asynq), in
	// milliseconds: the longest and the mean.
	LockMaxMS  float64 `json:"lock_max_ms"`
	LockMeanMS float64 `json:"lock_mean_ms"`
}

func newSummary(source string, dry bool) Summary {
	return Summary{Source: source, DryRun: dry, Moved: map[string]map[string]int64{}, Left: map[string]int64{}}
}

func (s *Summary) moved(state, kind string, n int64) {
	if s.Moved[state] == nil {
		s.Moved[state] = map[string]int64{}
	}
	s.Moved[state][kind] += n
	s.MovedTotal += n
}

// lockTimer sums how long batches held their source.
type lockTimer struct {
	n     int
	total time.Duration
	max   time.Duration
}

func (t *lockTimer) add(d time.Duration) {
	t.n++
	t.total += d
	t.max = max(t.max, d)
}

func (s *Summary) finish(start time.Time, t lockTimer) {
	s.Seconds = time.Since(start).Seconds()
	if s.Seconds > 0 {
		s.JobsPerS = float64(s.MovedTotal) / s.Seconds
	}
	s.Batches = t.n
	s.LockMaxMS = float64(t.max.Microseconds()) / 1000
	if t.n > 0 {
		s.LockMeanMS = float64(t.total.Microseconds()) / 1000 / float64(t.n)
	}
}

// invalidReason names the field skiplock refused, never its value.
func invalidReason(err error) string {
	var fe *skiplock.FieldError
	if errors.As(err, &fe) {
		return "invalid: " + fe.Field
	}
	return "invalid"
}

// fitMetadata returns m under skiplock's metadata bound: when the encoded
// object is too large, the keys in drop are removed one after the other
// (the least useful first) from the nested object m[ns].
func fitMetadata(m skiplock.Metadata, ns string, drop ...string) skiplock.Metadata {
	for _, k := range append([]string{""}, drop...) {
		if k != "" {
			if inner, ok := m[ns].(map[string]any); ok {
				delete(inner, k)
				inner["truncated"] = true
			}
		}
		if b, err := json.Marshal(m); err == nil && len(b) <= skiplock.MaxMetadataBytes {
			return m
		}
	}
	return m
}

// clampAttempts keeps a remaining-attempts figure within skiplock's range.
func clampAttempts(n int) int {
	return min(max(n, 1), skiplock.MaxAttemptsLimit)
}
