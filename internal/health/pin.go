package health

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// HorizonHolder is something holding back this database's xmin horizon: a
// session of this database with a snapshot or an xid, a session of any
// database with an xid (an xid is in every snapshot on the server), a
// prepared transaction, or a replication slot with an xmin. It never carries
// a literal of the holder's statement.
type HorizonHolder struct {
	// Holder is "backend", "prepared_xact" or "replication_slot".
	Holder string `json:"holder"`
	// PID is the backend's process id (0 for a prepared transaction or an
	// inactive slot).
	PID int `json:"pid"`
	// Database is the holder's database; OtherDatabase says it is not this
	// one (it still pins this one through the snapshots).
	Database      string `json:"database"`
	OtherDatabase bool   `json:"other_database"`
	// Application is the session's application_name, a prepared
	// transaction's gid or a slot's name.
	Application string `json:"application"`
	// ClientAddr is the session's client address (empty for a local socket).
	ClientAddr string `json:"client_addr"`
	// State is the session's state ("idle in transaction", "active", …),
	// "prepared", or a slot's "active"/"inactive".
	State string `json:"state"`
	// BackendType is pg_stat_activity's backend_type or a slot's type.
	BackendType string `json:"backend_type"`
	// XminAgeXIDs is how many transactions old the xmin it holds is.
	XminAgeXIDs int64 `json:"xmin_age_xids"`
	// XactAgeSeconds is how long its transaction has been open (0 for a
	// slot).
	XactAgeSeconds float64 `json:"xact_age_seconds"`
	// Query is the first words of its current or last statement, cut before
	// the first literal (quote, dollar sign or digit).
	Query string `json:"query"`
}

// Who names the holder in words: "pid 123 (app, 10.0.0.1, database x)".
func (h HorizonHolder) Who() string {
	switch h.Holder {
	case "prepared_xact":
		return "prepared transaction " + strconv.Quote(h.Application) + h.inDB()
	case "replication_slot":
		return "replication slot " + strconv.Quote(h.Application) + " (" + h.State + ")"
	}
	var parts []string
	if h.Application != "" {
		parts = append(parts, h.Application)
	}
	if h.ClientAddr != "" {
		parts = append(parts, h.ClientAddr)
	}
	if h.OtherDatabase {
		parts = append(parts, "database "+h.Database)
	}
	who := "pid " + strconv.Itoa(h.PID)
	if len(parts) > 0 {
		who += " (" + strings.Join(parts, ", ") + ")"
	}
	return who
}

func (h HorizonHolder) inDB() string {
	if h.OtherDatabase {
		return " (database " + h.Database + ")"
	}
	return ""
}

// HorizonHolders returns what holds back this database's xmin horizon, the
// oldest xmin first.
func HorizonHolders(ctx context.Context, db DBTX, schema string, limit int) ([]HorizonHolder, error) {
	q, err := query(schema, "horizon_holders")
	if err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = 10
	}
	out, err := collect(ctx, db, schema, q, []any{limit}, func(r pgx.CollectableRow) (HorizonHolder, error) {
		var h HorizonHolder
		var pid *int32
		var xidAge *int64
		var xactAge *float64
		err := r.Scan(&h.Holder, &pid, &h.Database, &h.Application, &h.ClientAddr, &h.State, &h.BackendType,
			&xidAge, &xactAge, &h.OtherDatabase, &h.Query)
		if pid != nil {
			h.PID = int(*pid)
		}
		if xidAge != nil {
			h.XminAgeXIDs = *xidAge
		}
		if xactAge != nil {
			h.XactAgeSeconds = *xactAge
		}
		return h, err
	})
	return out, wrap("horizon holders", err)
}

// ClaimCost is the claim's latency now against its baseline, from the live
// workers' beats, and the hot table's dead tuples.
type ClaimCost struct {
	// ClaimP99MS is the worst live worker's claim p99 over its last 1,024
	// claims (nil when no live worker has claimed).
	ClaimP99MS *float64 `json:"claim_p99_ms"`
	// BaselineMS is the worst live worker's baseline: a moving average of
	// its claim p99 over the beats taken while nothing pinned the horizon
	// for 30 s (nil until one was taken).
	BaselineMS *float64 `json:"claim_p99_baseline_ms"`
	// Ratio is ClaimP99MS ÷ BaselineMS (0 when either is missing).
	Ratio float64 `json:"ratio"`
	// LiveWorkers counts the workers the figures come from.
	LiveWorkers int `json:"live_workers"`
	// DeadTuples is the hot table's n_dead_tup.
	DeadTuples int64 `json:"dead_tuples"`
}

// ClaimCostNow reads the claim's p99 and baseline from the live workers.
func ClaimCostNow(ctx context.Context, db DBTX, schema string) (ClaimCost, error) {
	var c ClaimCost
	q, err := query(schema, "claim_cost")
	if err != nil {
		return c, err
	}
	var dead *int64
	if err := readRow(ctx, db, schema, q, []any{LiveWindow.Microseconds()}, &c.ClaimP99MS, &c.BaselineMS, &c.LiveWorkers, &dead); err != nil {
		return c, wrap("claim cost", err)
	}
	if dead != nil {
		c.DeadTuples = *dead
	}
	if c.ClaimP99MS != nil && c.BaselineMS != nil && *c.BaselineMS > 0 {
		c.Ratio = *c.ClaimP99MS / *c.BaselineMS
	}
	return c, nil
}

// String says the cost in words: "claim p99 20.1 ms against a 2.8 ms
// baseline (7.2×), 398,000 dead tuples".
func (c ClaimCost) String() string {
	var s string
	switch {
	case c.ClaimP99MS == nil:
		s = "no live worker reports a claim p99"
	case c.BaselineMS == nil:
		s = fmt.Sprintf("claim p99 %.1f ms (no baseline yet: one is taken while nothing pins the horizon)", *c.ClaimP99MS)
	default:
		s = fmt.Sprintf("claim p99 %.1f ms against a %.1f ms baseline (%.1f×)", *c.ClaimP99MS, *c.BaselineMS, c.Ratio)
	}
	return s + fmt.Sprintf(", %d dead tuples in the hot table", c.DeadTuples)
}

// Pin is the doctor's and the dashboard's account of a pinned horizon: who
// holds it, for how long, and what it costs.
type Pin struct {
	// Holder is the oldest holder (nil when nothing holds the horizon).
	Holder *HorizonHolder `json:"holder"`
	// Holders counts everything holding the horizon.
	Holders int `json:"holders"`
	// Cost is the claim's latency against its baseline.
	Cost ClaimCost `json:"cost"`
}

// PinNow reads who pins this database's horizon and what it costs.
func PinNow(ctx context.Context, db DBTX, schema string) (Pin, error) {
	var p Pin
	hs, err := HorizonHolders(ctx, db, schema, 20)
	if err != nil {
		return p, err
	}
	p.Holders = len(hs)
	if len(hs) > 0 {
		p.Holder = &hs[0]
	}
	p.Cost, err = ClaimCostNow(ctx, db, schema)
	return p, err
}

// Age is how long the pin has held: its transaction's age (0 for a slot).
func (p Pin) Age() time.Duration {
	if p.Holder == nil {
		return 0
	}
	return time.Duration(p.Holder.XactAgeSeconds * float64(time.Second))
}
