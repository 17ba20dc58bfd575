package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// TenantWeight is a tenant's fair-share weight in a queue (migration 013).
type TenantWeight struct {
	Queue     string
	Tenant    string
	Weight    int
	UpdatedAt time.Time
}

// SetTenantWeight sets tenant's weight in queue (validated by the caller;
// the table's constraint refuses what slips through); weight 1 removes it.
func (s *Store) SetTenantWeight(ctx context.Context, db DBTX, queue, tenant string, weight int) error {
	_, err := db.Exec(ctx, s.SQL("tenant_weight_set"), queue, tenant, weight)
	return err
}

// TenantWeights returns the weights set in queue ("": every queue).
func (s *Store) TenantWeights(ctx context.Context, db DBTX, queue string) ([]TenantWeight, error) {
	rows, err := db.Query(ctx, s.SQL("tenant_weight_list"), nullable(queue))
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[TenantWeight])
}
