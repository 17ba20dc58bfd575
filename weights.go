package skiplock

import (
	"context"
	"fmt"
	"time"
)

// MaxTenantWeight is the largest fair-share weight a tenant may have.
const MaxTenantWeight = 100

// TenantWeight is a tenant's fair-share weight in a queue.
type TenantWeight struct {
	Queue     string
	Tenant    string
	Weight    int
	UpdatedAt time.Time
}

// TenantWeightSet gives tenant a fair-share weight in queue, for worker
// pools with a TenantCap: in each round of the round robin the tenant takes
// weight jobs where others take one, and up to weight times the cap of a
// batch. Weight 1 is every tenant's default (setting it removes the
// tenant's weight); at most MaxTenantWeight. Weights are stored in the
// database, so every process uses them from its next claim. Invalid
// arguments are refused with a *FieldError naming the field, and nothing
// changes.
func (c *Client) TenantWeightSet(ctx context.Context, queue, tenant string, weight int) error {
	if err := validateName("queue", queue); err != nil {
		return err
	}
	if tenant == "" {
		return invalidJob("tenant", "must not be empty")
	}
	if err := validateKey("tenant", tenant, MaxKeyBytes); err != nil {
		return err
	}
	if weight < 1 || weight > MaxTenantWeight {
		return invalidJob("weight", "must be between 1 and %d, got %d", MaxTenantWeight, weight)
	}
	if err := c.store.SetTenantWeight(ctx, c.pool, queue, tenant, weight); err != nil {
		return fmt.Errorf("skiplock: tenant weight: %w", err)
	}
	return nil
}

// TenantWeightList returns the tenant weights set in queue ("": every queue),
// by queue and tenant. Tenants without one have weight 1.
func (c *Client) TenantWeightList(ctx context.Context, queue string) ([]TenantWeight, error) {
	rows, err := c.store.TenantWeights(ctx, c.pool, queue)
	if err != nil {
		return nil, fmt.Errorf("skiplock: tenant weights: %w", err)
	}
	out := make([]TenantWeight, len(rows))
	for i, r := range rows {
		out[i] = TenantWeight{Queue: r.Queue, Tenant: r.Tenant, Weight: r.Weight, UpdatedAt: r.UpdatedAt}
	}
	return out, nil
}
