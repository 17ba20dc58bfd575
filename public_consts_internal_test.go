package skiplock

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/worker"
)

// The public constants are written out (so that go doc shows their values,
// not an internal package's names); the runtime's are the ones that act.
// They must agree.
func TestPublicConstantsAreTheRuntimes(t *testing.T) {
	require.Equal(t, worker.MaxKindSeries, MaxKindSeries)
	require.Equal(t, worker.OtherKind, OtherKind)
	require.Equal(t, worker.ProgressInterval, ProgressInterval)
	require.Equal(t, worker.RunBuckets, RunBuckets)
	require.Equal(t, worker.ClaimBuckets, ClaimBuckets)
}
