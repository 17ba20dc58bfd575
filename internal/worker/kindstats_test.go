package worker

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The per-kind counts: outcomes and run durations per (queue, kind), the
// histogram cumulative, a job that never ran not observed, and the label
// set bounded: pairs beyond MaxKindSeries count as OtherKind.
func TestKindStats(t *testing.T) {
	var k kindStats
	k.add("q", "a", Completed, true, 3*time.Millisecond)
	k.add("q", "a", Retried, true, 2*time.Second)
	k.add("q", "a", Released, false, 0)
	for i := range MaxKindSeries + 5 {
		k.add("bulk", fmt.Sprintf("k%03d", i), DeadLettered, true, time.Hour+time.Second)
	}
	s := k.snapshot()
	require.Len(t, s, MaxKindSeries+1, "bounded: the pairs beyond the cap share one series")
	var a, other *KindStats
	for i := range s {
		switch {
		case s[i].Queue == "q" && s[i].Kind == "a":
			a = &s[i]
		case s[i].Kind == OtherKind:
			other = &s[i]
		}
	}
	require.NotNil(t, a)
	require.Equal(t, int64(1), a.Completed)
	require.Equal(t, int64(1), a.Retried)
	require.Equal(t, int64(1), a.Released)
	require.Equal(t, uint64(2), a.Runs, "the released job never ran")
	require.Equal(t, 2*time.Second+3*time.Millisecond, a.RunSum)
	require.Len(t, a.RunCounts, len(RunBuckets))
	require.Equal(t, uint64(1), a.RunCounts[0], "3 ms is within 5 ms")
	require.Equal(t, uint64(2), a.RunCounts[len(RunBuckets)-1])
	require.NotNil(t, other)
	require.Equal(t, "bulk", other.Queue)
	require.Equal(t, int64(6), other.DeadLettered)
	require.Equal(t, uint64(0), other.RunCounts[len(RunBuckets)-1], "over an hour: only in +Inf")
	require.Equal(t, uint64(6), other.Runs)
}
