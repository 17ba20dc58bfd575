package skiplock

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/migrations"
	"github.com/skiplock/skiplock/internal/store"
)

// TenantMoveOptions configure TenantMove.
type TenantMoveOptions struct {
	// Tenant is the tenant whose jobs move (required).
	Tenant string
	// Schema holds skiplock's tables in both databases. Default "skiplock".
	Schema string
	// BatchSize is how many jobs move per batch: each batch is one
	// transaction in each database, holding the batch's rows locked in the
	// source while it lasts. Default 500, at most 10,000.
	BatchSize int

	// afterTarget and afterSource, when set (tests only), run after a
	// batch's target commit and after its source commit; an error stops the
	// move there, as a crash would.
	afterTarget, afterSource func(batch int) error
}

// TenantMoveResult says what TenantMove did.
type TenantMoveResult struct {
	// Moved is the jobs now in the target and runnable there (released).
	Moved int64 `json:"moved"`
	// Merged is the jobs whose queue and unique key a live job in the target
	// already had: the source's copy was deleted, the target's job kept (the
	// same rule as a duplicate enqueue).
	Merged int64 `json:"merged"`
	// Batches is how many batches moved jobs.
	Batches int `json:"batches"`
	// Recovered is the jobs an interrupted move had left held in the target
	// that this run released (their source copy was gone by the move), and
	// Discarded the held copies it deleted unrun because their source job
	// was claimed in the source meanwhile (it ran there).
	Recovered int64 `json:"recovered"`
	Discarded int64 `json:"discarded"`
	// LeftRunning, LeftWorkflowTasks and LeftDead are the tenant's jobs the
	// move leaves in the source: running ones (they finish there; run the
	// move again once they have, for any retry), workflow tasks (their
	// workflow lives there) and dead letters (replay them there, or purge).
	LeftRunning       int64 `json:"left_running"`
	LeftWorkflowTasks int64 `json:"left_workflow_tasks"`
	LeftDead          int64 `json:"left_dead"`
}

// moveHoldBatch bounds how many held jobs of an interrupted move are
// settled per round.
const moveHoldBatch = 1000

// TenantMove moves a tenant's ready and scheduled jobs from one database to
// another (each with its own migrated skiplock schema), in batches, as
// docs/scaling.md §4 describes. Route the tenant's new enqueues to the
// target first; workers serving both databases run the jobs wherever they
// are.
//
// Each batch locks the tenant's next ready jobs in the source (claims skip
// them), inserts them in the target held (never due) with a moved_in row
// each and commits there, deletes them in the source with a moved_out row
// each and commits there, then releases them in the target (their own
// run_at back, a wake-up per queue). A job keeps its attempts, attempt
// budget, priority, run_at, creation time, unique key, entity and
// metadata; its id is new (ids are per database). So at every moment a job
// is runnable in exactly one database, and a crash (or an error) at any
// step loses none: run TenantMove again. It first settles what an
// interrupted run left held: released when the source deleted its copy,
// moved on when the source copy is still ready, discarded unrun when the
// source copy was claimed there meanwhile (it ran there, once). A re-run
// after a complete move finds nothing to do.
//
// Running jobs, workflow tasks and dead letters stay in the source
// (counted in the result). Two moves of the same tenant between the same
// databases may run at once: the source locks serialize their batches.
func TenantMove(ctx context.Context, from, to *pgxpool.Pool, opts TenantMoveOptions) (TenantMoveResult, error) {
	var res TenantMoveResult
	if opts.Schema == "" {
		opts.Schema = "skiplock"
	}
	if opts.BatchSize == 0 {
		opts.BatchSize = 500
	}
	switch {
	case from == nil:
		return res, &FieldError{Field: "from", Message: "must not be nil", base: ErrInvalidConfig}
	case to == nil:
		return res, &FieldError{Field: "to", Message: "must not be nil", base: ErrInvalidConfig}
	case opts.Tenant == "":
		return res, &FieldError{Field: "Tenant", Message: "required", base: ErrInvalidConfig}
	case opts.BatchSize < 1 || opts.BatchSize > 10000:
		return res, &FieldError{Field: "BatchSize", Message: "must be between 1 and 10000", base: ErrInvalidConfig}
	}
	if err := migrations.ValidateSchema(opts.Schema); err != nil {
		return res, &FieldError{Field: "Schema", Message: err.Error(), base: ErrInvalidConfig}
	}
	st := store.New(opts.Schema)
	source, err := st.MoveIdentity(ctx, from)
	if err != nil {
		return res, fmt.Errorf("skiplock: move: source: %w", err)
	}
	target, err := st.MoveIdentity(ctx, to)
	if err != nil {
		return res, fmt.Errorf("skiplock: move: target: %w", err)
	}
	if source == target {
		return res, &FieldError{Field: "to", Message: "is the source database itself", base: ErrInvalidConfig}
	}
	m := &mover{st: st, from: from, to: to, source: source, target: target, opts: opts, res: &res}
	if err := m.settleHeld(ctx); err != nil {
		return res, err
	}
	for {
		n, err := m.batch(ctx, res.Batches+1)
		if err != nil {
			return res, err
		}
		if n == 0 {
			break
		}
		res.Batches++
	}
	res.LeftRunning, res.LeftWorkflowTasks, res.LeftDead, err = st.MoveLeft(ctx, from, opts.Tenant)
	if err != nil {
		return res, fmt.Errorf("skiplock: move: source: %w", err)
	}
	return res, nil
}

// mover is one TenantMove run.
type mover struct {
	st             *store.Store
	from, to       *pgxpool.Pool
	source, target string // the databases' identities (move_identity)
	opts           TenantMoveOptions
	res            *TenantMoveResult
}

// batch moves the tenant's next batch of ready jobs and returns how many
// it found (0: none left).
func (m *mover) batch(ctx context.Context, n int) (int, error) {
	stx, err := m.from.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("skiplock: move: source: %w", err)
	}
	defer func() { _ = stx.Rollback(context.WithoutCancel(ctx)) }()
	jobs, err := m.st.MoveLockBatch(ctx, stx, m.opts.Tenant, m.opts.BatchSize)
	if err != nil || len(jobs) == 0 {
		if err != nil {
			return 0, fmt.Errorf("skiplock: move: source: %w", err)
		}
		return 0, stx.Commit(ctx)
	}
	ids := make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	guard, err := m.st.MoveGuard(ctx, m.to, m.source, ids)
	if err != nil {
		return 0, fmt.Errorf("skiplock: move: target: %w", err)
	}
	merged := int64(0)
	var fresh []store.MoveJob
	for _, j := range jobs {
		if s, ok := guard[j.ID]; !ok || s == "discarded" {
			fresh = append(fresh, j) // else moved in by an interrupted run, settled already
		}
	}
	err = pgx.BeginFunc(ctx, m.to, func(ttx pgx.Tx) error {
		if len(fresh) == 0 {
			return nil
		}
		states, err := m.st.MoveInsert(ctx, ttx, m.source, fresh)
		for _, s := range states {
			if s == "merged" {
				merged++
			}
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("skiplock: move: target: %w", err)
	}
	if m.opts.afterTarget != nil {
		if err := m.opts.afterTarget(n); err != nil {
			return 0, err
		}
	}
	if _, err := m.st.MoveDelete(ctx, stx, ids, m.target); err != nil {
		return 0, fmt.Errorf("skiplock: move: source: %w", err)
	}
	if err := stx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("skiplock: move: source: %w", err)
	}
	m.res.Merged += merged
	if m.opts.afterSource != nil {
		if err := m.opts.afterSource(n); err != nil {
			return 0, err
		}
	}
	released, err := m.st.MoveRelease(ctx, m.to, m.source, ids)
	if err != nil {
		return 0, fmt.Errorf("skiplock: move: target: %w", err)
	}
	m.res.Moved += released
	return len(jobs), nil
}

// settleHeld finishes what an interrupted run left: jobs held in the
// target. A held job whose source copy is still ready moves on (deleted
// there, released here); one the source recorded as moved out is released;
// one whose source copy is neither was claimed there meanwhile and ran
// there, so its held copy is deleted unrun.
func (m *mover) settleHeld(ctx context.Context) error {
	for {
		held, err := m.st.MoveHeld(ctx, m.to, m.source, moveHoldBatch)
		if err != nil {
			return fmt.Errorf("skiplock: move: target: %w", err)
		}
		if len(held) == 0 {
			return nil
		}
		var ready []int64
		err = pgx.BeginFunc(ctx, m.from, func(stx pgx.Tx) error {
			if ready, err = m.st.MoveLockIDs(ctx, stx, held); err != nil {
				return err
			}
			_, err = m.st.MoveDelete(ctx, stx, ready, m.target)
			return err
		})
		if err != nil {
			return fmt.Errorf("skiplock: move: source: %w", err)
		}
		gone := slices.DeleteFunc(slices.Clone(held), func(id int64) bool { return slices.Contains(ready, id) })
		out, err := m.st.MoveMovedOut(ctx, m.from, gone)
		if err != nil {
			return fmt.Errorf("skiplock: move: source: %w", err)
		}
		ran := slices.DeleteFunc(slices.Clone(gone), func(id int64) bool { return slices.Contains(out, id) })
		released, err := m.st.MoveRelease(ctx, m.to, m.source, append(ready, out...))
		if err != nil {
			return fmt.Errorf("skiplock: move: target: %w", err)
		}
		m.res.Recovered += released
		if len(ran) > 0 {
			discarded, err := m.st.MoveDiscard(ctx, m.to, m.source, ran)
			if err != nil {
				return fmt.Errorf("skiplock: move: target: %w", err)
			}
			m.res.Discarded += discarded
		}
	}
}
