package faults

import (
	"context"
	_ "embed"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

//go:embed testdata/checker_scale.sql
var checkerScaleSQL string

// TestWorkflowChecksScale runs the workflow checker over the data a
// 30-minute chaos run (`make chaos-long`) leaves behind: ~300k runs, 3,600
// workflows, 21,600 dependencies. Each check must answer within the
// checker's own statement deadline (env.count: 10 s); a check that reads
// public.runs once per dependency took hours here, and failed the 20-minute
// run after it had checked every job.
func TestWorkflowChecksScale(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	_, err := e.pool.Exec(ctx, wfEffectsTable)
	require.NoError(t, err)
	_, err = e.pool.Exec(ctx, checkerScaleSQL)
	require.NoError(t, err)
	require.Equal(t, 303800, e.count("SELECT count(*) FROM public.runs"))
	require.Equal(t, 21600, e.count("SELECT count(*) FROM skiplock.workflow_deps"))
	start := time.Now()
	require.Empty(t, workflowViolations(t, e), "the synthetic run keeps every invariant")
	t.Logf("workflow checker over %d runs and %d workflows: %s", 303800, 3600, time.Since(start).Round(time.Millisecond))
}
