package maintenance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/internal/health"
	"github.com/skiplock/skiplock/internal/history"
	"github.com/skiplock/skiplock/internal/service"
	"github.com/skiplock/skiplock/internal/store"
)

// Retention defaults.
const (
	// DefaultRetentionInterval is how often each retention pass runs (with
	// ±25% jitter; the first pass runs at start).
	DefaultRetentionInterval = time.Hour
	// DefaultPartitionsAhead is how many daily jobs_done partitions are kept
	// created ahead of today, so a completion always finds its day's
	// partition even when no process ran for days.
	DefaultPartitionsAhead = 7
	// DefaultDeadLetterBatch bounds the dead letters one purge transaction
	// deletes.
	DefaultDeadLetterBatch = 1000
	// DefaultDeadLetterBatches bounds the purge transactions of one pass; the
	// rest waits for the next pass.
	DefaultDeadLetterBatches = 100
	// DefaultWorkflowBatch bounds the finished workflows one purge
	// transaction deletes (each with its tasks, edges and signals).
	DefaultWorkflowBatch = 200
	// retentionStatementTimeout bounds every statement of a pass.
	retentionStatementTimeout = 30 * time.Second
	// retentionLockTimeout bounds how long partition DDL waits for its table
	// locks: it gives up (and retries next pass) rather than queue behind a
	// long reader of jobs_done and block every archive write behind it.
	retentionLockTimeout = 2 * time.Second
	// retentionIdleTimeout ends the session of a pass whose process stalls
	// mid-transaction.
	retentionIdleTimeout = 5 * time.Second
)

// RetentionConfig configures a Retention.
type RetentionConfig struct {
	// DB runs the passes; a *pgxpool.Pool in production. Each batch is its
	// own short transaction.
	DB health.DBTX
	// Schema holds skiplock's tables (already validated).
	Schema string
	// Logger receives a line per pass that did something; nil discards.
	Logger *slog.Logger
	// Interval between passes. Default DefaultRetentionInterval.
	Interval time.Duration
	// Archive creates the jobs_done partitions ahead (archive mode). Old
	// partitions are dropped either way, so turning archive mode off still
	// retires the history.
	Archive bool
	// PartitionsAhead is how many days of partitions are created ahead of
	// today. Default DefaultPartitionsAhead.
	PartitionsAhead int
	// CompletedRetention is how long archived jobs are kept: a daily
	// partition is dropped whole once its day ended longer ago than this.
	// Zero or negative keeps them forever.
	CompletedRetention time.Duration
	// DeadLetterRetention is how long dead letters are kept. Zero or
	// negative keeps them forever.
	DeadLetterRetention time.Duration
	// DeadLetterBatch bounds one purge transaction. Default
	// DefaultDeadLetterBatch.
	DeadLetterBatch int
	// DeadLetterBatches bounds the purge transactions of one pass. Default
	// DefaultDeadLetterBatches.
	DeadLetterBatches int
	// WorkflowRetention is how long finished workflows are kept. Zero or
	// negative keeps them forever.
	WorkflowRetention time.Duration
	// WorkflowBatch bounds one workflow purge transaction. Default
	// DefaultWorkflowBatch; a pass runs at most DeadLetterBatches of them.
	WorkflowBatch int
	// ExportDir, when set, is where each jobs_done day past
	// CompletedRetention is exported (internal/history) before its
	// partition is dropped; a day whose export fails is not dropped, and a
	// day is dropped only if its partition still holds exactly the rows
	// exported.
	ExportDir string
	// ExportTimeout bounds the export and drop of one day. Default
	// DefaultExportTimeout.
	ExportTimeout time.Duration
}

// DefaultExportTimeout bounds one day's export before its drop.
const DefaultExportTimeout = 10 * time.Minute

// Retention retires old data without row-by-row DELETE on the hot path: it
// keeps jobs_done's daily partitions created ahead and drops those past
// CompletedRetention (a catalog operation that leaves no dead tuples), and
// purges dead letters past DeadLetterRetention in small batches, each its
// own short transaction, so no pass holds locks or the xmin horizon for
// long. Any number of processes may run one: each batch of each pass first
// takes a transaction-scoped advisory lock keyed on the schema and the pass
// (pg_try_advisory_xact_lock, which also works behind a transaction-mode
// pooler); a process that finds it taken leaves that pass to the holder.
type Retention struct {
	cfg        RetentionConfig
	st         *store.Store
	partitions *service.Periodic
	dead       *service.Periodic
	workflows  *service.Periodic
	keys       *service.Periodic
}

// NewRetention returns a stopped Retention with defaults filled in.
func NewRetention(cfg RetentionConfig) *Retention {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultRetentionInterval
	}
	if cfg.PartitionsAhead <= 0 {
		cfg.PartitionsAhead = DefaultPartitionsAhead
	}
	if cfg.DeadLetterBatch <= 0 {
		cfg.DeadLetterBatch = DefaultDeadLetterBatch
	}
	if cfg.DeadLetterBatches <= 0 {
		cfg.DeadLetterBatches = DefaultDeadLetterBatches
	}
	if cfg.WorkflowBatch <= 0 {
		cfg.WorkflowBatch = DefaultWorkflowBatch
	}
	if cfg.ExportTimeout <= 0 {
		cfg.ExportTimeout = DefaultExportTimeout
	}
	r := &Retention{cfg: cfg, st: store.New(cfg.Schema)}
	r.partitions = &service.Periodic{Name: "partitions", Interval: cfg.Interval, RunAtStart: true, Logger: cfg.Logger,
		Tick: func(ctx context.Context) error {
			_, err := r.MaintainPartitions(ctx)
			return err
		}}
	r.dead = &service.Periodic{Name: "dead_letter_retention", Interval: cfg.Interval, RunAtStart: true, Logger: cfg.Logger,
		Tick: func(ctx context.Context) error {
			if _, err := r.PurgeDeadLetters(ctx); err != nil {
				return err
			}
			_, err := r.PurgeJobActions(ctx)
			return err
		}}
	r.workflows = &service.Periodic{Name: "workflow_retention", Interval: cfg.Interval, RunAtStart: true, Logger: cfg.Logger,
		Tick: func(ctx context.Context) error {
			_, err := r.PurgeWorkflows(ctx)
			return err
		}}
	r.keys = &service.Periodic{Name: "unique_keys_retention", Interval: cfg.Interval, RunAtStart: true, Logger: cfg.Logger,
		Tick: func(ctx context.Context) error {
			_, err := r.PurgeUniqueKeys(ctx)
			return err
		}}
	return r
}

// Services returns the passes that have work to do as services: the
// partition pass when archiving or when old partitions are to be dropped,
// the dead-letter pass when dead letters expire, and the workflow pass when
// finished workflows do. The held-keys pass always runs: a unique period's
// or a throttle's key leaves unique_keys only through it.
func (r *Retention) Services() []service.Service {
	out := []service.Service{r.keys}
	if r.cfg.Archive || r.cfg.CompletedRetention > 0 {
		out = append(out, r.partitions)
	}
	if r.cfg.DeadLetterRetention > 0 {
		out = append(out, r.dead)
	}
	if r.cfg.WorkflowRetention > 0 {
		out = append(out, r.workflows)
	}
	return out
}

// PartitionStats counts what one partition pass did.
type PartitionStats struct {
	// Created and Dropped count daily jobs_done partitions.
	Created, Dropped int
	// Exported counts the days written by the export before their drop
	// (ExportDir); a day exported by an earlier pass is not counted again.
	Exported int
	// Skipped reports that another process held the pass's lock.
	Skipped bool
}

// MaintainPartitions runs one partition pass as a single statement (see
// store.MaintainDonePartitions: a process paused mid-pass cannot hold the
// DDL locks that archive completions need):
// creates the partitions from today through PartitionsAhead days ahead
// (archive mode) and drops those whose day ended more than
// CompletedRetention ago.
func (r *Retention) MaintainPartitions(ctx context.Context) (PartitionStats, error) {
	var st PartitionStats
	if !r.cfg.Archive && r.cfg.CompletedRetention <= 0 {
		return st, nil
	}
	keep := r.cfg.CompletedRetention
	if r.cfg.ExportDir != "" {
		keep = 0 // the days past retention are dropped below, each after its export
	}
	mctx, cancel := context.WithTimeout(ctx, retentionStatementTimeout)
	p, err := r.st.MaintainDonePartitions(mctx, r.cfg.DB, RetentionLockKey(r.cfg.Schema, "partitions"),
		r.cfg.Archive, r.cfg.PartitionsAhead, keep, retentionLockTimeout)
	cancel()
	st.Created, st.Dropped, st.Skipped = p.Created, p.Dropped, !p.Locked && err == nil
	if err != nil {
		return st, fmt.Errorf("retention: jobs_done partitions: %w", err)
	}
	if r.cfg.ExportDir != "" && r.cfg.CompletedRetention > 0 {
		exported, dropped, err := r.exportThenDrop(ctx)
		st.Exported, st.Dropped = exported, st.Dropped+dropped
		if err != nil {
			return st, err
		}
	}
	if r.cfg.Logger != nil && (st.Created > 0 || st.Dropped > 0) {
		r.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "skiplock: retention maintained jobs_done partitions",
			slog.Int("created", st.Created), slog.Int("dropped", st.Dropped), slog.Int("exported", st.Exported),
			slog.Duration("completed_retention", r.cfg.CompletedRetention))
	}
	return st, nil
}

// PurgeStats counts what one batched purge pass did.
type PurgeStats struct {
	// Purged counts the rows (dead letters, workflows) deleted; Batches the
	// transactions.
	Purged  int64
	Batches int
	// Skipped reports that another process held the pass's lock.
	Skipped bool
}

// DeadLetterStats counts what one dead-letter pass did.
type DeadLetterStats = PurgeStats

// PurgeDeadLetters runs one dead-letter pass: batches of at most
// DeadLetterBatch dead letters older than DeadLetterRetention, oldest
// first, each in its own transaction, until none is left or
// DeadLetterBatches ran. It stops as soon as another process holds the
// pass's lock.
func (r *Retention) PurgeDeadLetters(ctx context.Context) (DeadLetterStats, error) {
	if r.cfg.DeadLetterRetention <= 0 {
		return PurgeStats{}, nil
	}
	return r.purge(ctx, purgePass{lock: "dead_letters", what: "dead letters", size: r.cfg.DeadLetterBatch,
		retention: r.cfg.DeadLetterRetention, retentionAttr: "dead_letter_retention"},
		func(tx pgx.Tx) (int64, error) {
			return r.st.PurgeDeadBatch(ctx, tx, r.cfg.DeadLetterRetention, r.cfg.DeadLetterBatch)
		})
}

// JobActionRetention is how long a job's retry, cancel or delete is
// remembered, so that a repeated call answers what the first did.
const JobActionRetention = 7 * 24 * time.Hour

// PurgeJobActions runs one pass over the job action records (migration
// 018): batches of at most DeadLetterBatch records older than
// JobActionRetention, as PurgeDeadLetters does.
func (r *Retention) PurgeJobActions(ctx context.Context) (PurgeStats, error) {
	return r.purge(ctx, purgePass{lock: "job_actions", what: "job action records", size: r.cfg.DeadLetterBatch,
		retention: JobActionRetention, retentionAttr: "job_action_retention"},
		func(tx pgx.Tx) (int64, error) {
			return r.st.PruneJobActions(ctx, tx, r.cfg.DeadLetterBatch)
		})
}

// PurgeWorkflows runs one workflow pass: batches of at most WorkflowBatch
// workflows (and batches) that finished longer than WorkflowRetention ago,
// oldest first, each deleted with its tasks, edges and signals in one
// transaction, until none is left or DeadLetterBatches ran. Running
// workflows are never touched.
func (r *Retention) PurgeWorkflows(ctx context.Context) (PurgeStats, error) {
	if r.cfg.WorkflowRetention <= 0 {
		return PurgeStats{}, nil
	}
	return r.purge(ctx, purgePass{lock: "workflows", what: "finished workflows", size: r.cfg.WorkflowBatch,
		retention: r.cfg.WorkflowRetention, retentionAttr: "workflow_retention"},
		func(tx pgx.Tx) (int64, error) {
			return r.st.PurgeWorkflows(ctx, tx, r.cfg.WorkflowRetention, r.cfg.WorkflowBatch)
		})
}

// PurgeUniqueKeys runs one held-keys pass: batches of at most
// DeadLetterBatch rows of unique_keys whose hold ended (a unique period's
// bucket or a throttle's window is over), each in its own transaction.
func (r *Retention) PurgeUniqueKeys(ctx context.Context) (PurgeStats, error) {
	return r.purge(ctx, purgePass{lock: "unique_keys", what: "held unique keys", size: r.cfg.DeadLetterBatch,
		retentionAttr: "retention"},
		func(tx pgx.Tx) (int64, error) {
			return r.st.PurgeUniqueKeys(ctx, tx, r.cfg.DeadLetterBatch)
		})
}

// purgePass names one batched purge: its lock, what it deletes (for the log
// line and errors), its batch size and its retention.
type purgePass struct {
	lock, what    string
	size          int
	retention     time.Duration
	retentionAttr string
}

// purge runs batch under the pass's lock, each call its own transaction,
// until a call deletes fewer than size rows, DeadLetterBatches calls ran, or
// another process holds the lock; it logs what it deleted.
func (r *Retention) purge(ctx context.Context, p purgePass, batch func(pgx.Tx) (int64, error)) (PurgeStats, error) {
	var st PurgeStats
	var err error
	for st.Batches < r.cfg.DeadLetterBatches {
		var n int64
		err = r.locked(ctx, p.lock, func(tx pgx.Tx) error {
			var err error
			n, err = batch(tx)
			return err
		})
		if errors.Is(err, errLockTaken) {
			st.Skipped, err = true, nil
			break
		}
		if err != nil {
			err = fmt.Errorf("retention: %s: %w", p.what, err)
			break
		}
		st.Batches++
		st.Purged += n
		if n < int64(p.size) {
			break
		}
	}
	if r.cfg.Logger != nil && st.Purged > 0 {
		r.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "skiplock: retention purged "+p.what,
			slog.Int64("purged", st.Purged), slog.Int("batches", st.Batches), slog.Duration(p.retentionAttr, p.retention))
	}
	return st, err
}

// Start launches the passes that have work to do.
func (r *Retention) Start(ctx context.Context) error {
	for _, s := range r.Services() {
		if err := s.Start(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Stop stops every pass and waits for the current ones.
func (r *Retention) Stop(ctx context.Context) error {
	var err error
	for _, p := range []*service.Periodic{r.partitions, r.dead, r.workflows, r.keys} {
		if err2 := p.Stop(ctx); err == nil {
			err = err2
		}
	}
	return err
}

// errLockTaken reports that another process holds a pass's lock.
var errLockTaken = errors.New("retention: another process holds the pass's lock")

// RetentionLockKey is the text whose hashtextextended(…, 0) keys the
// advisory lock of a retention pass: "<schema>.retention.<pass>".
func RetentionLockKey(schema, pass string) string { return schema + ".retention." + pass }

// locked runs fn in a transaction that first takes the pass's advisory lock
// (errLockTaken when another process has it), with a statement timeout and
// an idle-in-transaction timeout: should this process be paused between
// two statements, the server ends the session, and its row locks with it,
// instead of holding them until the process resumes.
func (r *Retention) locked(ctx context.Context, pass string, fn func(pgx.Tx) error) error {
	ctx, cancel := context.WithTimeout(ctx, retentionStatementTimeout+time.Second)
	defer cancel()
	return pgx.BeginFunc(ctx, r.cfg.DB, func(tx pgx.Tx) error {
		got, err := r.st.BeginRetentionPass(ctx, tx, RetentionLockKey(r.cfg.Schema, pass),
			retentionStatementTimeout, retentionIdleTimeout)
		if err != nil {
			return err
		}
		if !got {
			return errLockTaken
		}
		return fn(tx)
	})
}

// exportThenDrop exports each jobs_done day past CompletedRetention to
// ExportDir and drops its partition, oldest first, each day in its own
// transaction under the export pass's lock: the day's rows are read, the
// file and the manifest written, and the partition dropped only if it
// still holds exactly the rows written (drop_done_partition). A day whose
// export fails is not dropped, and the pass stops there with the error
// (the next pass retries it); a day the manifest already lists is not
// written again.
func (r *Retention) exportThenDrop(ctx context.Context) (exported, dropped int, err error) {
	days, err := r.st.HistoryDays(ctx, r.cfg.DB, r.cfg.CompletedRetention)
	if err != nil {
		return 0, 0, fmt.Errorf("retention: history days: %w", err)
	}
	ex := &history.Exporter{Store: r.st, Schema: r.cfg.Schema, Dir: r.cfg.ExportDir}
	for _, d := range days {
		if !d.Expired {
			continue
		}
		var f history.File
		var resumed, gone bool
		err := r.lockedFor(ctx, "history_export", r.cfg.ExportTimeout, func(tx pgx.Tx) error {
			var err error
			for attempt := 0; attempt < 2 && !gone; attempt++ {
				// A partition that changed since an earlier export (a row
				// moved in) is exported again before it is dropped.
				if f, resumed, err = ex.ExportDay(ctx, tx, d.Day, attempt > 0); err != nil {
					return err
				}
				if gone, err = r.st.HistoryDropDay(ctx, tx, d.Day, f.Rows, retentionLockTimeout); err != nil {
					return err
				}
			}
			return nil
		})
		if errors.Is(err, errLockTaken) {
			return exported, dropped, nil
		}
		if err != nil {
			if r.cfg.Logger != nil {
				r.cfg.Logger.LogAttrs(ctx, slog.LevelError, "skiplock: retention did not drop a jobs_done day: its export failed",
					slog.String("day", d.Day.Format(time.DateOnly)), slog.String("dir", r.cfg.ExportDir), slog.Any("error", err))
			}
			return exported, dropped, fmt.Errorf("retention: export of %s (not dropped): %w", d.Day.Format(time.DateOnly), err)
		}
		if !resumed {
			exported++
		}
		if gone {
			dropped++
		} else if r.cfg.Logger != nil {
			r.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "skiplock: retention kept a jobs_done day: its rows changed during the export",
				slog.String("day", d.Day.Format(time.DateOnly)))
		}
	}
	return exported, dropped, nil
}

// lockedFor is locked with its own statement timeout: an export reads a
// whole day.
func (r *Retention) lockedFor(ctx context.Context, pass string, timeout time.Duration, fn func(pgx.Tx) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout+time.Second)
	defer cancel()
	return pgx.BeginFunc(ctx, r.cfg.DB, func(tx pgx.Tx) error {
		got, err := r.st.BeginRetentionPass(ctx, tx, RetentionLockKey(r.cfg.Schema, pass), timeout, retentionIdleTimeout)
		if err != nil {
			return err
		}
		if !got {
			return errLockTaken
		}
		return fn(tx)
	})
}
