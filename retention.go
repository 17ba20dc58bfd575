package skiplock

import (
	"context"

	"github.com/skiplock/skiplock/internal/maintenance"
	"github.com/skiplock/skiplock/internal/service"
)

// retentionServices returns the maintenance services for dead-letter
// retention and jobs_done partitions: in archive mode the daily partitions
// are created a week ahead; partitions older than CompletedRetention are
// dropped whole; dead letters older than DeadLetterRetention are purged in
// small batches, and so are workflows that finished longer ago than
// WorkflowRetention. Every process runs them; an advisory lock per pass (keyed
// on the schema) lets one process at a time do each pass.
func (c *Client) retentionServices() []service.Service {
	return c.retention().Services()
}

func (c *Client) retention() *maintenance.Retention {
	return maintenance.NewRetention(maintenance.RetentionConfig{
		DB:                  c.pool,
		Schema:              c.cfg.Schema,
		Logger:              c.cfg.Logger,
		Archive:             c.cfg.keepCompleted(),
		CompletedRetention:  c.cfg.CompletedRetention,
		DeadLetterRetention: c.cfg.DeadLetterRetention,
		WorkflowRetention:   c.cfg.WorkflowRetention,
		ExportTo:            c.cfg.HistoryExportDir,
	})
}

// ensureHistoryPartitions runs one partition pass before the workers start,
// so the first completions find today's jobs_done partition instead of the
// default one (a completion routed there while the partition pass attaches
// today's partition fails with SQLSTATE 23514). A failure is logged and
// not fatal: the default partition still catches completions, and the
// periodic pass retries.
func (c *Client) ensureHistoryPartitions(ctx context.Context) {
	if !c.cfg.keepCompleted() {
		return
	}
	if _, err := c.retention().MaintainPartitions(ctx); err != nil {
		c.cfg.Logger.Warn("skiplock: creating the jobs_done partitions failed; the periodic pass will retry",
			"error", err.Error())
	}
}

// vacuumServices returns the vacuum guard of the jobs table, unless
// disabled (Config.VacuumDeadTuples < 0).
func (c *Client) vacuumServices() []service.Service {
	if c.cfg.VacuumDeadTuples < 0 {
		return nil
	}
	return []service.Service{maintenance.NewVacuumGuard(maintenance.VacuumConfig{
		Pool:       c.pool,
		Schema:     c.cfg.Schema,
		Logger:     c.cfg.Logger,
		DeadTuples: c.cfg.VacuumDeadTuples,
	})}
}

// agingServices are the priority-aging pass (QueueAgingSet) and the prune
// of rate limits' recorded starts, run by every started client.
func (c *Client) agingServices() []service.Service {
	cfg := maintenance.AgingConfig{DB: c.pool, Schema: c.cfg.Schema, Logger: c.cfg.Logger}
	return []service.Service{maintenance.NewAging(cfg), maintenance.NewLimitPrune(cfg)}
}
