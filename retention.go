package skiplock

import (
	"github.com/skiplock/skiplock/internal/maintenance"
	"github.com/skiplock/skiplock/internal/service"
)

// retentionServices returns the maintenance services for dead-letter
// retention and jobs_done partitions: in archive mode the daily partitions
// are created a week ahead; partitions older than CompletedRetention are
// dropped whole; dead letters older than DeadLetterRetention are purged in
// small batches. Every process runs them; an advisory lock per pass (keyed
// on the schema) lets one process at a time do each pass.
func (c *Client) retentionServices() []service.Service {
	return maintenance.NewRetention(maintenance.RetentionConfig{
		DB:                  c.pool,
		Schema:              c.cfg.Schema,
		Logger:              c.cfg.Logger,
		Archive:             c.cfg.keepCompleted(),
		CompletedRetention:  c.cfg.CompletedRetention,
		DeadLetterRetention: c.cfg.DeadLetterRetention,
	}).Services()
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
