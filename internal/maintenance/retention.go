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
	// summarizeInterval is how often the history's BRIN index is
	// summarized over the ranges filled since (SummarizeHistory): the
	// pages a look-up of a finished job by id reads beyond the ranges
	// that hold it are those written in about this long.
	summarizeInterval = 10 * time.Second
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
	// ExportTo, when set, is the destination (a directory or a
	// gocloud.dev/blob bucket URL; internal/history) where each jobs_done
	// day past CompletedRetention is exported before its partition is
	// dropped, and each UTC day of dead letters wholly past
	// DeadLetterRetention before it is purged (then dead letters leave a
	// whole day at a time, instead of in batches). A day whose export fails
	// is kept, and a day is dropped or purged only if the table still holds
	// exactly the rows exported.
	ExportTo string
	// ExportTimeout bounds the export and drop (or purge) of one day.
	// Default DefaultExportTimeout.
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
	summarize  *service.Periodic
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
	r.summarize = &service.Periodic{Name: "history_summarize", Interval: summarizeInterval, Logger: cfg.Logger,
		Tick: func(ctx context.Context) error {
			_, err := r.SummarizeHistory(ctx)
			return err
		}}
	return r
}

// Services returns the passes that have work to do as services: the
// partition pass when archiving or when old partitions are to be dropped,
// the dead-letter pass when dead letters expire, and the workflow pass when
// finished workflows do, and the history's summaries when archiving. The
// held-keys pass always runs: a unique period's or a throttle's key leaves
// unique_keys only through it.
func (r *Retention) Services() []service.Service {
	out := []service.Service{r.keys}
	if r.cfg.Archive || r.cfg.CompletedRetention > 0 {
		out = append(out, r.partitions)
	}
	if r.cfg.Archive {
		out = append(out, r.summarize)
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
	// (ExportTo); a day exported by an earlier pass is not counted again.
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
	if r.cfg.ExportTo != "" {
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
	if r.cfg.ExportTo != "" && r.cfg.CompletedRetention > 0 {
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

// SummarizeHistory summarizes jobs_done's BRIN index on id over the whole
// page ranges filled since the last time (summarize_done, in today's
// partition and the default one) and returns how many it summarized. The
// index leaves them to it (migration 025): asked of autovacuum, one
// request per range, they overflowed its work-item list at a few thousand
// completions a second, and each request dropped was a LOG line in the
// server's log. One session at a time summarizes (the others return 0 at
// once); a role that may not run summarize_done (a reader) is told once
// and the pass stops trying (store.SummarizeDone).
func (r *Retention) SummarizeHistory(ctx context.Context) (int, error) {
	sctx, cancel := context.WithTimeout(ctx, retentionStatementTimeout)
	defer cancel()
	n, err := r.st.SummarizeDone(sctx, r.cfg.DB)
	if store.CannotSummarize(err) {
		if r.cfg.Logger != nil {
			r.cfg.Logger.LogAttrs(ctx, slog.LevelWarn,
				"skiplock: this role may not summarize the history's index; look-ups of finished jobs read more of it until autovacuum vacuums it",
				slog.String("error", err.Error()))
		}
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("retention: summarizing jobs_done's index: %w", err)
	}
	return n, nil
}

// PurgeStats counts what one batched purge pass did.
type PurgeStats struct {
	// Purged counts the rows (dead letters, workflows) deleted; Batches the
	// transactions.
	Purged  int64
	Batches int
	// Exported counts the days of dead letters written by the export before
	// their purge (ExportTo); a day exported by an earlier pass is not
	// counted again.
	Exported int
	// Skipped reports that another process held the pass's lock.
	Skipped bool
}

// DeadLetterStats counts what one dead-letter pass did.
type DeadLetterStats = PurgeStats

// PurgeDeadLetters runs one dead-letter pass: batches of at most
// DeadLetterBatch dead letters older than DeadLetterRetention, oldest
// first, each in its own transaction, until none is left or
// DeadLetterBatches ran. It stops as soon as another process holds the
// pass's lock. With ExportTo, the dead letters leave a UTC day at a time
// instead, each day once it is wholly past DeadLetterRetention and after
// its export (exportThenPurgeDead).
func (r *Retention) PurgeDeadLetters(ctx context.Context) (DeadLetterStats, error) {
	if r.cfg.DeadLetterRetention <= 0 {
		return PurgeStats{}, nil
	}
	if r.cfg.ExportTo != "" {
		return r.exportThenPurgeDead(ctx)
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
	for _, p := range []*service.Periodic{r.partitions, r.dead, r.workflows, r.keys, r.summarize} {
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
// ExportTo and drops its partition, oldest first, each day in its own
// transaction under the export's lock (ExportLocked): the day's rows are
// read, the file and then the manifest written, and the partition dropped
// only if it still holds exactly the rows written (drop_done_partition). A
// day whose export fails is not dropped, and the pass stops there with the
// error (the next pass retries it); a day the manifest already lists is not
// written again.
func (r *Retention) exportThenDrop(ctx context.Context) (exported, dropped int, err error) {
	days, err := r.st.HistoryDays(ctx, r.cfg.DB, r.cfg.CompletedRetention)
	if err != nil {
		return 0, 0, fmt.Errorf("retention: history days: %w", err)
	}
	failed, _, err := r.exportEach(ctx, days, len(days), func(tx pgx.Tx, ex *history.Exporter, day time.Time) error {
		var f history.File
		var resumed, gone bool
		var err error
		for attempt := 0; attempt < 2 && !gone; attempt++ {
			// A partition that changed since an earlier export (a row moved
			// in) is exported again before it is dropped.
			if f, resumed, err = ex.ExportDay(ctx, tx, history.TableDone, day, attempt > 0); err != nil {
				return err
			}
			if gone, err = r.st.HistoryDropDay(ctx, tx, day, f.Rows, retentionLockTimeout); err != nil {
				return err
			}
		}
		if !resumed {
			exported++
		}
		if gone {
			dropped++
		} else if r.cfg.Logger != nil {
			r.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "skiplock: retention kept a jobs_done day: its rows changed during the export",
				slog.String("day", day.Format(time.DateOnly)))
		}
		return nil
	})
	if err != nil {
		r.logExportFailed(ctx, "skiplock: retention did not drop a jobs_done day: its export failed", failed, err)
		return exported, dropped, fmt.Errorf("retention: export of %s (not dropped): %w", failed.Format(time.DateOnly), err)
	}
	return exported, dropped, nil
}

// exportThenPurgeDead exports each UTC day of dead letters wholly past
// DeadLetterRetention to ExportTo (jobs_dead_YYYYMMDD.ndjson.gz, in the
// same manifest as the finished jobs' days) and purges it, oldest first,
// each day in its own transaction under the export's lock: the day's dead
// letters are locked (no replay takes one between the export and the
// purge), read and written, and deleted only if they are still exactly the
// rows written (count and id range, history_dead_purge_day). A day whose
// export fails is kept, and the pass stops there with the error. Dead
// letters of a day not yet wholly past the retention wait for the pass
// after its end: with an export, they leave a day at a time. A pass handles
// at most DeadLetterBatches days.
func (r *Retention) exportThenPurgeDead(ctx context.Context) (PurgeStats, error) {
	var st PurgeStats
	days, err := r.st.HistoryDeadDays(ctx, r.cfg.DB, r.cfg.DeadLetterRetention)
	if err != nil {
		return st, fmt.Errorf("retention: dead letters: days: %w", err)
	}
	failed, skipped, err := r.exportEach(ctx, days, r.cfg.DeadLetterBatches, func(tx pgx.Tx, ex *history.Exporter, day time.Time) error {
		if _, err := r.st.HistoryDeadLockDay(ctx, tx, day); err != nil {
			return err
		}
		var f history.File
		var resumed, matched bool
		var purged int64
		var err error
		for attempt := 0; attempt < 2 && !matched; attempt++ {
			// A day that changed since an earlier export (a dead letter
			// replayed) is exported again before it is purged.
			if f, resumed, err = ex.ExportDay(ctx, tx, history.TableDead, day, attempt > 0); err != nil {
				return err
			}
			if matched, purged, err = r.st.HistoryDeadPurgeDay(ctx, tx, day, f.Rows, f.MinID, f.MaxID); err != nil {
				return err
			}
		}
		st.Batches++
		st.Purged += purged
		if !resumed {
			st.Exported++
		}
		if !matched && r.cfg.Logger != nil {
			r.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "skiplock: retention kept a day of dead letters: its rows changed during the export",
				slog.String("day", day.Format(time.DateOnly)))
		}
		return nil
	})
	st.Skipped = skipped
	if err != nil {
		r.logExportFailed(ctx, "skiplock: retention did not purge a day of dead letters: its export failed", failed, err)
		return st, fmt.Errorf("retention: export of the dead letters of %s (not purged): %w", failed.Format(time.DateOnly), err)
	}
	if r.cfg.Logger != nil && st.Purged > 0 {
		r.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "skiplock: retention exported and purged dead letters",
			slog.Int64("purged", st.Purged), slog.Int("days", st.Batches), slog.Int("exported", st.Exported),
			slog.Duration("dead_letter_retention", r.cfg.DeadLetterRetention))
	}
	return st, nil
}

func (r *Retention) logExportFailed(ctx context.Context, msg string, day time.Time, err error) {
	if r.cfg.Logger == nil {
		return
	}
	r.cfg.Logger.LogAttrs(ctx, slog.LevelError, msg, slog.String("day", day.Format(time.DateOnly)),
		slog.String("to", history.DisplayName(r.cfg.ExportTo)), slog.Any("error", err))
}

// exportEach runs fn for each expired day, oldest first and at most limit
// of them, each in its own transaction under the export's lock
// (ExportLocked, without waiting), with ExportTo opened at the first day:
// a pass with nothing to export opens nothing. It stops at the first
// error, returning the day that failed, or when another process holds the
// lock (skipped).
func (r *Retention) exportEach(ctx context.Context, days []store.HistoryDay, limit int,
	fn func(tx pgx.Tx, ex *history.Exporter, day time.Time) error) (failed time.Time, skipped bool, err error) {
	var ex *history.Exporter
	for _, d := range days {
		if !d.Expired {
			continue
		}
		if limit <= 0 {
			break // the rest waits for the next pass
		}
		limit--
		if ex == nil {
			dest, err := history.Open(ctx, r.cfg.ExportTo)
			if err != nil {
				return d.Day, false, err
			}
			defer dest.Close()
			ex = &history.Exporter{Store: r.st, Schema: r.cfg.Schema, Dest: dest}
		}
		err := ExportLocked(ctx, r.cfg.DB, r.cfg.Schema, r.cfg.ExportTimeout, false, func(tx pgx.Tx) error {
			return fn(tx, ex, d.Day)
		})
		if errors.Is(err, errLockTaken) {
			return time.Time{}, true, nil
		}
		if err != nil {
			return d.Day, false, err
		}
	}
	return time.Time{}, false, nil
}

// ExportLocked runs fn in a transaction that holds the history export's
// lock, the advisory lock every writer of the schema's export manifests
// takes (the retention passes of every process, Client.HistoryExport), so
// that no two of them read and rewrite a manifest at once. timeout is the
// statement timeout and the idle-in-transaction timeout (a day's rows are
// read in one statement; its file may take long to upload after it). With
// wait, a taken lock is tried again every second until ctx ends; without,
// ExportLocked returns an error saying another process holds it.
func ExportLocked(ctx context.Context, db health.DBTX, schema string, timeout time.Duration, wait bool, fn func(pgx.Tx) error) error {
	if timeout <= 0 {
		timeout = DefaultExportTimeout
	}
	st := store.New(schema)
	for {
		err := func() error {
			ctx, cancel := context.WithTimeout(ctx, timeout+time.Second)
			defer cancel()
			return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
				got, err := st.BeginRetentionPass(ctx, tx, RetentionLockKey(schema, "history_export"), timeout, timeout)
				if err != nil {
					return err
				}
				if !got {
					return errLockTaken
				}
				return fn(tx)
			})
		}()
		if !wait || !errors.Is(err, errLockTaken) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("history export: waiting for another process's export: %w", ctx.Err())
		case <-time.After(time.Second):
		}
	}
}
