package dbtest

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// The jobs table is partitioned (migration 016): a plan scans jobs_g0 ..
// jobs_g2 and jobs_keyed by their own indexes (jobs_pkey_g0,
// jobs_ready_keyed, ...) under aliases j_1, j_2, ...
var (
	partitionIndex = regexp.MustCompile(`\b(jobs(?:_pkey|_ready|_ready_tenant|_ready_weighted|_running)?)_(?:g[0-9]+|keyed)\b`)
	partitionAlias = regexp.MustCompile(`\bon jobs ([a-z]+)_[0-9]+\b`)
)

// PlanText rewrites an EXPLAIN text so that a scan of any partition of jobs
// reads as a scan of jobs by the parent's index and alias ("Index Scan using
// jobs_pkey_g0 on jobs_g0 j_1" → "Index Scan using jobs_pkey on jobs j"):
// the plan tests hold every partition to the rule they hold the table to.
func PlanText(plan string) string {
	return partitionAlias.ReplaceAllString(partitionIndex.ReplaceAllString(plan, "$1"), "on jobs $1")
}

// Querier is what Explain runs its statement on: a pool, a connection or a
// transaction (whose settings the plan is then made under).
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Explain runs an EXPLAIN statement on q and returns its text, one line per
// row, through PlanText.
func Explain(t testing.TB, q Querier, explain string, args ...any) string {
	t.Helper()
	rows, err := q.Query(context.Background(), explain, args...)
	if err != nil {
		t.Fatalf("dbtest: %s: %v", explain, err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("dbtest: %s: %v", explain, err)
	}
	return PlanText(strings.Join(lines, "\n"))
}
