package skiplock

import (
	"context"
	"fmt"
)

// RoleKind names what a database role may do with skiplock's schema
// (docs/security.md "Roles").
type RoleKind string

// The kinds of role RoleGrant gives. Limits and validation hold for all of
// them: only the schema's owner can change the limits (the settings table).
const (
	// RoleProducer may enqueue and signal, through the SQL functions
	// skiplock.enqueue and skiplock.signal and Client.Enqueue/EnqueueTx,
	// and write no table (EnqueueMany's bulk COPY is not open to it).
	RoleProducer RoleKind = "producer"
	// RoleWorker may run jobs: read and write the job tables, run the
	// maintenance every started client runs.
	RoleWorker RoleKind = "worker"
	// RoleReader may read everything but payloads and outputs: the
	// dashboard's read-only mode and stats.
	RoleReader RoleKind = "reader"
	// RoleAdmin has the worker's privileges and TRUNCATE: every CLI and
	// dashboard action. No DDL, and not the limits.
	RoleAdmin RoleKind = "admin"
)

// RoleGrant gives the existing database role what kind needs in the
// client's schema (the SQL function skiplock.grant_role) and returns the
// statements that ran. The client's connection must be the schema's owner
// (or a superuser). Run it again after an upgrade that adds a table.
func (c *Client) RoleGrant(ctx context.Context, kind RoleKind, role string) ([]string, error) {
	switch kind {
	case RoleProducer, RoleWorker, RoleReader, RoleAdmin:
	default:
		return nil, &FieldError{Field: "kind", Message: fmt.Sprintf("must be producer, worker, reader or admin, got %q", string(kind))}
	}
	if role == "" {
		return nil, &FieldError{Field: "role", Message: "must not be empty"}
	}
	stmts, err := c.store.GrantRole(ctx, c.pool, string(kind), role)
	if err != nil {
		return nil, fmt.Errorf("skiplock: grant %s to %s: %w", kind, role, err)
	}
	return stmts, nil
}
