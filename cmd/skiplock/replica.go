package main

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/skiplock/skiplock/internal/health"
)

// replicaURLFlag adds --replica-url to a command that reads figures (serve,
// stats, top, doctor).
func replicaURLFlag(cmd *cobra.Command, v *string) {
	cmd.Flags().StringVar(v, "replica-url", "", "a streaming replica (hot standby) of the database: read-only queries go there, "+
		"with its lag shown beside the figures; actions and what only the primary knows stay on --database-url (default $SKIPLOCK_REPLICA_URL)")
}

// replicaURL resolves --replica-url, then $SKIPLOCK_REPLICA_URL.
func (g *globals) replicaURL(flag string) string {
	if flag != "" {
		return flag
	}
	return g.getenv("SKIPLOCK_REPLICA_URL")
}

// connectReplica opens a pool on the replica URL, or returns nil when none
// is configured. Its sessions are read-only (default_transaction_read_only),
// so a write sent there by mistake fails instead of landing on whatever
// primary the URL reaches. A multi-host URL with
// target_session_attrs=prefer-standby keeps reading after a failover.
func (g *globals) connectReplica(ctx context.Context, flag string, maxConns int32) (*pgxpool.Pool, error) {
	u := g.replicaURL(flag)
	if u == "" {
		return nil, nil
	}
	return connectTo(ctx, u, "--replica-url", maxConns, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
		if cfg.ConnConfig.RuntimeParams["application_name"] == "skiplock" {
			cfg.ConnConfig.RuntimeParams["application_name"] = "skiplock-replica"
		}
	})
}

// readReplicaStatus reads how stale the replica is, with the operations
// commands' statement timeout; nil when there is no replica.
func (g *globals) readReplicaStatus(ctx context.Context, replica *pgxpool.Pool) (*health.ReplicaStatus, error) {
	if replica == nil {
		return nil, nil
	}
	qctx, cancel := context.WithTimeout(ctx, opsStatementTimeout)
	defer cancel()
	s, err := health.Replica(qctx, replica, g.schema)
	if err != nil {
		return nil, err
	}
	return &s, nil
}
