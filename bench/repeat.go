package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/migrations"
)

// MaxRepeat bounds RunRepeated's n.
const MaxRepeat = 100

// Spread is one figure over repeated runs: its least, median and greatest
// value, and Ratio, the greatest over the least (1 when every run agreed;
// 2.3 for runs of 10,137 and 23,630 jobs/s).
type Spread struct {
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
	Max    float64 `json:"max"`
	Ratio  float64 `json:"ratio"`
}

// spreadOf summarises vs (at least one value).
func spreadOf(vs []float64) Spread {
	s := slices.Clone(vs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	sp := Spread{Min: s[0], Median: m, Max: s[len(s)-1]}
	if sp.Min > 0 {
		sp.Ratio = sp.Max / sp.Min
	}
	return sp
}

// Repeated is RunRepeated's report: every run's result, in order, and the
// spread of the figures a user sizes workers by.
type Repeated struct {
	Runs           []Result `json:"runs"`
	JobsPerS       Spread   `json:"jobs_per_s"`
	ClaimP50MS     Spread   `json:"claim_p50_ms"`
	ClaimP99MS     Spread   `json:"claim_p99_ms"`
	WALBytesPerJob Spread   `json:"wal_bytes_per_job"`
	// With Options.Reference: the drain's ratio to the plain-SQL reference
	// at 10 and at 50 jobs a statement, each run's to the references run
	// just before it. Their Ratio is the steadiness issue 40 asks of the
	// drain (min ≥ 0.75 × max: Ratio ≤ 1.33); RefB50OverB10 is the same of
	// the references against each other, the steadiness the machine itself
	// gave in those minutes.
	VsRefB10      *Spread `json:"vs_reference_b10,omitempty"`
	VsRefB50      *Spread `json:"vs_reference_b50,omitempty"`
	RefB50OverB10 *Spread `json:"reference_b50_over_b10,omitempty"`
}

// RunRepeated runs the benchmark n times, each in a fresh schema of its
// own (migrated before the run, dropped after it, whatever happened), so no
// run inherits the previous one's dead rows, statistics or cached plans:
// what a user sees is the spread of the figure, not one lucky run.
// o.Schema names the schemas' prefix (default "skiplock").
func RunRepeated(ctx context.Context, pool *pgxpool.Pool, o Options, n int) (Repeated, error) {
	if n < 1 || n > MaxRepeat {
		return Repeated{}, optErr("repeat", "must be between 1 and %d, got %d", MaxRepeat, n)
	}
	o = o.withDefaults()
	if _, err := o.validate(); err != nil {
		return Repeated{}, err
	}
	progress := o.Progress
	if progress == nil {
		progress = io.Discard
	}
	var rep Repeated
	for i := range n {
		schema, err := freshSchema(ctx, pool, o.Schema)
		if err != nil {
			return rep, err
		}
		fmt.Fprintf(progress, "bench: run %d of %d in schema %s\n", i+1, n, schema)
		ro := o
		ro.Schema = schema
		res, err := Run(ctx, pool, ro)
		dropSchema(pool, schema)
		if err != nil {
			return rep, fmt.Errorf("bench: run %d of %d: %w", i+1, n, err)
		}
		rep.Runs = append(rep.Runs, res)
	}
	pick := func(f func(Result) float64) Spread {
		vs := make([]float64, len(rep.Runs))
		for i, r := range rep.Runs {
			vs[i] = f(r)
		}
		return spreadOf(vs)
	}
	rep.JobsPerS = pick(func(r Result) float64 { return r.JobsPerS })
	rep.ClaimP50MS = pick(func(r Result) float64 { return r.ClaimP50MS })
	rep.ClaimP99MS = pick(func(r Result) float64 { return r.ClaimP99MS })
	rep.WALBytesPerJob = pick(func(r Result) float64 { return r.WALBytesPerJob })
	if o.Reference > 0 {
		b10 := pick(func(r Result) float64 { return r.Reference.VsB10 })
		b50 := pick(func(r Result) float64 { return r.Reference.VsB50 })
		m := pick(func(r Result) float64 { return r.Reference.B50.JobsPerS / r.Reference.B10.JobsPerS })
		rep.VsRefB10, rep.VsRefB50, rep.RefB50OverB10 = &b10, &b50, &m
	}
	return rep, nil
}

// freshSchema creates and migrates a schema named prefix_r<random>.
func freshSchema(ctx context.Context, pool *pgxpool.Pool, prefix string) (string, error) {
	schema := prefix + "_r" + randomID()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := migrations.UpTx(ctx, tx, schema, 0)
		return err
	})
	if err != nil {
		dropSchema(pool, schema)
		return "", fmt.Errorf("bench: migrate a fresh schema: %w", err)
	}
	return schema, nil
}

// dropSchema removes a schema freshSchema made, with all it holds.
func dropSchema(pool *pgxpool.Pool, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
}
