package bench

import (
	"context"
	"embed"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/sqlfile"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

// referenceSQL holds sql/reference.sql's statements, unrendered.
var referenceSQL = sqlfile.MustParse(sqlFiles, "sql")

// The plain-SQL reference's shape, as issue 40 measures the drain against
// it: 8 clients, each repeating a life cycle of PerStatement jobs in three
// autocommit transactions (a batched enqueue, a batched claim, a batched
// completion), at 10 and at 50 jobs a statement.
const (
	ReferenceClients = 8
	// MaxReference bounds how long one reference runs.
	MaxReference = 10 * time.Minute
)

// ReferenceResult is one run of the plain-SQL reference (RunReference).
type ReferenceResult struct {
	// PerStatement is how many jobs each statement touched.
	PerStatement int `json:"per_statement"`
	// Clients is how many connections ran the life cycle at once.
	Clients int `json:"clients"`
	// Seconds is how long it ran; Jobs how many life cycles it completed in
	// that time (enqueued, claimed and deleted), and JobsPerS their rate.
	Seconds  float64 `json:"seconds"`
	Jobs     int64   `json:"jobs"`
	JobsPerS float64 `json:"jobs_per_s"`
}

// RunReference runs the plain-SQL reference for d: the life cycle of a job
// as plain statements on a minimal table (enqueue as an INSERT, claim as an
// UPDATE, completion as a DELETE, perStatement jobs in each, three
// autocommit transactions), from ReferenceClients connections at once, as
// the pgbench scripts issue 40 is measured against
// (../shared/reference/pgbench/job_3tx_bN.sql; the same statements, sent as
// pgbench sends them by default, with the simple protocol). It is the rate
// this server gives the same row work with nothing in between: a drain's
// ratio to it, measured in the same minutes, takes out the machine's drift
// from one day to the next (on the development VM, 2-3x), though not its
// swings from one minute to the next. The table lives in a schema of its own
// (skiplock_ref_<random>), dropped after the run whatever happened.
func RunReference(ctx context.Context, pool *pgxpool.Pool, perStatement int, d time.Duration) (ReferenceResult, error) {
	if perStatement < 1 || perStatement > 1000 {
		return ReferenceResult{}, optErr("reference", "jobs per statement must be between 1 and 1000, got %d", perStatement)
	}
	if err := checkReference(d); err != nil {
		return ReferenceResult{}, err
	}
	schema := "skiplock_ref_" + randomID()
	q := sqlfile.Render(referenceSQL, schema, nil)
	rp, err := ownPool(ctx, pool, nil, ReferenceClients, "reference")
	if err != nil {
		return ReferenceResult{}, err
	}
	defer rp.Close()
	defer dropSchema(pool, schema)
	for _, name := range []string{"reference_schema", "reference_table", "reference_index"} {
		if _, err := rp.Exec(ctx, q[name]); err != nil {
			return ReferenceResult{}, fmt.Errorf("bench: reference: %s: %w", name, err)
		}
	}
	res := ReferenceResult{PerStatement: perStatement, Clients: ReferenceClients}
	var (
		jobs     atomic.Int64
		wg       sync.WaitGroup
		firstErr error
		errOnce  sync.Once
	)
	// Every connection open before the clock starts, as pgbench's are.
	conns := make([]*pgxpool.Conn, 0, ReferenceClients)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range ReferenceClients {
		c, err := rp.Acquire(ctx)
		if err != nil {
			return res, fmt.Errorf("bench: reference: connect: %w", err)
		}
		conns = append(conns, c)
	}
	start := time.Now()
	deadline := start.Add(d)
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := referenceClient(ctx, c.Conn(), q, perStatement, deadline, &jobs); err != nil {
				errOnce.Do(func() { firstErr = err })
			}
		}()
	}
	wg.Wait()
	res.Seconds = time.Since(start).Seconds()
	if firstErr != nil {
		return res, fmt.Errorf("bench: reference: %w", firstErr)
	}
	res.Jobs = jobs.Load()
	res.JobsPerS = float64(res.Jobs) / res.Seconds
	return res, nil
}

// checkReference checks how long a reference is to run (Options.Reference,
// RunReference's d).
func checkReference(d time.Duration) error {
	if d < time.Second || d > MaxReference {
		return optErr("reference", "must be between 1s and %s, got %s", MaxReference, d)
	}
	return nil
}

// referenceClient repeats the life cycle on c until deadline, adding the
// jobs of each one it finished to jobs.
func referenceClient(ctx context.Context, c *pgx.Conn, q map[string]string, n int, deadline time.Time,
	jobs *atomic.Int64) error {
	simple := pgx.QueryExecModeSimpleProtocol
	for time.Now().Before(deadline) {
		var ids []int64
		if err := c.QueryRow(ctx, q["reference_enqueue"], simple, n).Scan(&ids); err != nil {
			return fmt.Errorf("enqueue: %w", err)
		}
		if len(ids) != n {
			return fmt.Errorf("enqueue: %d ids for %d jobs", len(ids), n)
		}
		if _, err := c.Exec(ctx, q["reference_claim"], simple, ids); err != nil {
			return fmt.Errorf("claim: %w", err)
		}
		if _, err := c.Exec(ctx, q["reference_complete"], simple, ids); err != nil {
			return fmt.Errorf("complete: %w", err)
		}
		jobs.Add(int64(n))
	}
	return nil
}
