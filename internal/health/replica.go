package health

import (
	"context"
	"fmt"
	"time"
)

// ReplicaStatus says how stale reads on a server are: what `--replica-url`
// (the dashboard, stats, top, doctor) shows beside every figure it reads
// there.
type ReplicaStatus struct {
	// InRecovery is true on a standby. False means the server is a primary
	// (a promoted standby, or a primary given as the replica): its figures
	// are current.
	InRecovery bool `json:"in_recovery"`
	// Streaming is true while the standby's WAL receiver runs. A standby
	// that stopped streaming falls further behind with every commit on the
	// primary, and its lag then counts from its last replayed transaction.
	Streaming bool `json:"streaming"`
	// LagSeconds is how far the standby's data is behind the primary: the
	// age of the last replayed transaction's commit, or 0 while streaming
	// with nothing left to replay (an idle primary has nothing to send).
	LagSeconds float64 `json:"lag_seconds"`
	// LastReplayAt is when the last replayed transaction committed on the
	// primary (nil before the first one, and on a primary).
	LastReplayAt *time.Time `json:"last_replay_at,omitempty"`
}

// Replica reads the replication status of the server db is connected to
// (pg_is_in_recovery, pg_stat_wal_receiver, pg_last_xact_replay_timestamp).
// schema only selects the rendered statements; no table is read.
func Replica(ctx context.Context, db DBTX, schema string) (ReplicaStatus, error) {
	q, err := query(schema, "replica_status")
	if err != nil {
		return ReplicaStatus{}, err
	}
	var s ReplicaStatus
	err = readRow(ctx, db, schema, q, nil, &s.InRecovery, &s.Streaming, &s.LagSeconds, &s.LastReplayAt)
	return s, wrap("replica status", err)
}

// Describe says in words how stale the replica's figures are, for the line
// the CLI and the dashboard print beside them.
func (s ReplicaStatus) Describe() string {
	switch {
	case !s.InRecovery:
		return "read on the replica URL, which is not a standby (a primary: figures are current)"
	case !s.Streaming:
		return fmt.Sprintf("read on a replica that is NOT streaming from the primary: %s behind and falling further", dur(secs(s.LagSeconds)))
	case s.LagSeconds == 0:
		return "read on a replica, caught up with the primary"
	default:
		return fmt.Sprintf("read on a replica, %s behind the primary", dur(secs(s.LagSeconds)))
	}
}
