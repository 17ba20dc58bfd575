package health

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// OrphanSchedule is a schedule whose queue and kind no live worker serves:
// its fires wait forever, most often because the code that declared it was
// removed while the schedule stayed in the table.
type OrphanSchedule struct {
	Name  string `json:"name"`
	Queue string `json:"queue"`
	Kind  string `json:"kind"`
	// Owner is the ScheduleSync owner that declared it ("" if none).
	Owner string `json:"owner,omitempty"`
	// Waiting counts its fires waiting as ready jobs; Oldest is the oldest
	// one's fire time (nil: none waiting).
	Waiting int64      `json:"waiting"`
	Oldest  *time.Time `json:"oldest,omitempty"`
}

// Fix is what to do about it, for doctor and the dashboard.
func (o OrphanSchedule) Fix() string {
	owner := "the service that declares it"
	if o.Owner != "" {
		owner = fmt.Sprintf("its owner %q", o.Owner)
	}
	return fmt.Sprintf("if its code was removed: `skiplock schedule remove %s` (or let %s drop it with Client.ScheduleSync), "+
		"then delete its waiting fires (`skiplock job list --kind %s --state ready`); otherwise deploy a worker that handles kind %q on queue %q",
		o.Name, owner, o.Kind, o.Kind, o.Queue)
}

// OrphanSchedules returns the schedules whose queue and kind no worker live
// within LiveWindow serves, by name; none while no worker is live at all.
func OrphanSchedules(ctx context.Context, db DBTX, schema string) ([]OrphanSchedule, error) {
	q, err := query(schema, "orphan_schedules")
	if err != nil {
		return nil, err
	}
	out, err := collect(ctx, db, schema, q, []any{LiveWindow.Microseconds()}, func(r pgx.CollectableRow) (OrphanSchedule, error) {
		var o OrphanSchedule
		err := r.Scan(&o.Name, &o.Queue, &o.Kind, &o.Owner, &o.Waiting, &o.Oldest)
		return o, err
	})
	return out, wrap("orphan schedules", err)
}

func (d *doctor) checkOrphanSchedules(ctx context.Context) Check {
	const name = "orphan_schedules"
	qctx, cancel := d.timeout(ctx)
	defer cancel()
	orphans, err := OrphanSchedules(qctx, d.read, d.schema)
	if err != nil {
		return broken(name, err)
	}
	if len(orphans) == 0 {
		return Check{Name: name, Status: StatusOK, Figure: "every schedule's kind is handled by a live worker of its queue (or no worker is live: see workers)"}
	}
	var parts []string
	for i, o := range orphans {
		if i == 5 {
			parts = append(parts, fmt.Sprintf("and %d more", len(orphans)-5))
			break
		}
		p := fmt.Sprintf("%s (kind %q, queue %s", o.Name, o.Kind, o.Queue)
		if o.Owner != "" {
			p += ", owner " + o.Owner
		}
		parts = append(parts, p+fmt.Sprintf(", %d fire(s) waiting)", o.Waiting))
	}
	return Check{Name: name, Status: StatusWarn,
		Figure: fmt.Sprintf("%d schedule(s) fire into a kind no live worker handles: %s", len(orphans), strings.Join(parts, "; ")),
		Fix: "a schedule outlives the code that declared it: " + orphans[0].Fix() +
			". Declare a service's schedules with Client.ScheduleSync(owner, ...) so that a deploy without one deletes it."}
}
