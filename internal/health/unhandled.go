package health

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// UnhandledKind is a queue and kind with due ready jobs that no live worker
// serves: a kind mistyped at the producer, or a handler not deployed. Such
// jobs wait forever, since workers claim only kinds they handle.
type UnhandledKind struct {
	Queue string `json:"queue"`
	Kind  string `json:"kind"`
	// Ready counts the due jobs; each queue is sampled in claim order up to
	// UnhandledSample jobs, so beyond that it is a lower bound.
	Ready int64 `json:"ready"`
	// OldestReadyAgeSeconds is how long the oldest of them has waited.
	OldestReadyAgeSeconds float64 `json:"oldest_ready_age_seconds"`
}

// UnhandledSample is how many due jobs of a queue unhandled_kinds() reads
// (in claim order); a count that reaches it is a lower bound.
const UnhandledSample = 10000

// ReadyText is Ready as a person should read it: "10000 or more" once the
// count reaches the sample's size, since the jobs beyond it were not read.
func (u UnhandledKind) ReadyText() string {
	if u.Ready >= UnhandledSample {
		return fmt.Sprintf("%d or more", u.Ready)
	}
	return fmt.Sprintf("%d", u.Ready)
}

// UnhandledKinds returns the queues and kinds with due ready jobs that no
// worker live within LiveWindow serves, most jobs first. Workers record
// what they serve (queues and kinds per pool) with every heartbeat; a
// worker from before migration 005 counts as serving every kind of its
// queues.
func UnhandledKinds(ctx context.Context, db DBTX, schema string) ([]UnhandledKind, error) {
	q, err := query(schema, "unhandled_kinds")
	if err != nil {
		return nil, err
	}
	out, err := collect(ctx, db, schema, q, []any{LiveWindow.Microseconds()}, func(r pgx.CollectableRow) (UnhandledKind, error) {
		var u UnhandledKind
		err := r.Scan(&u.Queue, &u.Kind, &u.Ready, &u.OldestReadyAgeSeconds)
		return u, err
	})
	return out, wrap("unhandled kinds", err)
}

func (d *doctor) checkUnhandledKinds(ctx context.Context) Check {
	const name = "unhandled_kinds"
	qctx, cancel := d.timeout(ctx)
	defer cancel()
	kinds, err := UnhandledKinds(qctx, d.read, d.schema)
	if err != nil {
		return broken(name, err)
	}
	if len(kinds) == 0 {
		return Check{Name: name, Status: StatusOK, Figure: "every due job's kind is handled by a live worker of its queue"}
	}
	c := Check{Name: name, Status: StatusWarn}
	var parts []string
	var oldest float64
	for i, u := range kinds {
		oldest = max(oldest, u.OldestReadyAgeSeconds)
		if i < 5 {
			parts = append(parts, fmt.Sprintf("kind %q in queue %s: %s ready, oldest %s", u.Kind, u.Queue, u.ReadyText(),
				dur(secs(u.OldestReadyAgeSeconds))))
		}
	}
	if len(kinds) > 5 {
		parts = append(parts, fmt.Sprintf("and %d more", len(kinds)-5))
	}
	if secs(oldest) > d.o.LagFail {
		c.Status = StatusFail
	}
	c.Figure = "no live worker handles " + strings.Join(parts, "; ")
	c.Fix = "workers claim only the kinds they handle, so these jobs wait forever: this is not vacuum debt or too few workers. " +
		"If the kind is a typo at the producer, fix the producer and cancel or delete the jobs (skiplock job list --state ready --kind K); " +
		"otherwise deploy a worker with a handler for it on that queue (skiplock.Handle or skiplock.HandleArgs). " +
		"With no live worker at all, see the workers check."
	return c
}
