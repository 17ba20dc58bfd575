package maintenance

import (
	"context"
	"log/slog"
	"time"

	"github.com/skiplock/skiplock/internal/service"
	"github.com/skiplock/skiplock/internal/store"
)

// Aging defaults.
const (
	// DefaultAgingInterval is how often a client runs the aging pass.
	DefaultAgingInterval = 10 * time.Second
	// agingBatch bounds the jobs one pass promotes per queue.
	agingBatch   = 1000
	agingTimeout = 30 * time.Second
)

// AgingConfig configures NewAging.
type AgingConfig struct {
	DB       store.DBTX
	Schema   string
	Logger   *slog.Logger
	Interval time.Duration // default DefaultAgingInterval
}

// NewAging returns the priority-aging pass (migration 010): in the queues
// configured for it (Client.QueueAgingSet), ready jobs due for longer than
// the queue's age are promoted to its priority, so higher-priority work
// cannot starve them forever. Every started client runs it; passes in
// several processes at once are safe (SKIP LOCKED), and a pass with no
// queue configured reads only the (small) queues table.
func NewAging(cfg AgingConfig) service.Service {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultAgingInterval
	}
	st := store.New(cfg.Schema)
	return &service.Periodic{Name: "priority_aging", Interval: cfg.Interval, Logger: cfg.Logger,
		Tick: func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, agingTimeout)
			defer cancel()
			n, err := st.AgeReady(ctx, cfg.DB, agingBatch)
			if err == nil && n > 0 && cfg.Logger != nil {
				cfg.Logger.Info("skiplock: priority aging promoted jobs", slog.Int64("jobs", n))
			}
			return err
		}}
}

// limitStartsBatch bounds the rows one prune deletes.
const limitStartsBatch = 10_000

// NewLimitPrune returns the pass that forgets the job starts no rate limit
// counts any more (older than the limit's window, or of a removed limit),
// so limit_starts stays about the size of the windows. Every started
// client runs it, every DefaultAgingInterval.
func NewLimitPrune(cfg AgingConfig) service.Service {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultAgingInterval
	}
	st := store.New(cfg.Schema)
	return &service.Periodic{Name: "limit_starts_prune", Interval: cfg.Interval, Logger: cfg.Logger,
		Tick: func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, agingTimeout)
			defer cancel()
			_, err := st.PruneLimitStarts(ctx, cfg.DB, limitStartsBatch)
			return err
		}}
}
