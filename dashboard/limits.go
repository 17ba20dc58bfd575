package dashboard

import (
	"fmt"
	"net/http"
	"time"

	"github.com/skiplock/skiplock"
)

// limitRow is one limit on the limits page: what it allows and its use now.
type limitRow struct {
	skiplock.LimitStatus
	Covers  string // "queue mail" or "kind send-email"
	Allows  string // "5 running" or "100 starts per 1m0s"
	Cap     int64  // running jobs or starts in the window, per partition value
	Full    bool   // some partition value (or the whole) is at the limit
	HeldFor string // how long the oldest due job it covers has waited, while full
}

// limits renders every limit with its use: running jobs (or starts within
// the window) against the cap, in the fullest partition value and in all,
// the values at the limit, and the ready jobs it covers. Read from the
// primary, like the schedules page: limits are configuration.
func (d *Dashboard) limits(w http.ResponseWriter, r *http.Request) {
	sh := d.shardFor(w, r)
	if sh == nil {
		return
	}
	ctx, cancel := d.timeout(r)
	defer cancel()
	list, err := sh.client.LimitList(ctx)
	if err != nil {
		d.dbFail(w, r, "limits", err)
		return
	}
	rows := make([]limitRow, len(list))
	for i, l := range list {
		row := limitRow{LimitStatus: l, Covers: "queue " + l.Queue, Cap: int64(l.Concurrency),
			Allows: fmt.Sprintf("%d running", l.Concurrency)}
		if l.Kind != "" {
			row.Covers = "kind " + l.Kind
		}
		if l.Rate > 0 {
			row.Cap, row.Allows = int64(l.Rate), fmt.Sprintf("%d starts per %v", l.Rate, l.Per)
		}
		row.Full = l.FullValues > 0
		if row.Full && l.OldestDue > 0 {
			row.HeldFor = l.OldestDue.Round(time.Second).String()
		}
		rows[i] = row
	}
	d.render(w, r, http.StatusOK, "limits", "", d.view("limits", "Limits", rows))
}
