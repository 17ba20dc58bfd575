package measure

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestHistQuantiles(t *testing.T) {
	var h Hist
	var all []time.Duration
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		d := time.Duration(r.ExpFloat64() * float64(3*time.Millisecond))
		all = append(all, d)
		h.Add(d)
	}
	h.Add(-time.Second) // clamped to 0
	all = append(all, 0)
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		exact := float64(all[int(q*float64(len(all)))]) / 1e6
		require.InEpsilon(t, exact, h.QuantileMS(q), 0.03, "q=%v", q)
	}
	require.InDelta(t, float64(all[len(all)-1])/1e6, h.MaxMS(), 0.001)
	require.Equal(t, uint64(len(all)), h.Count())

	// Every bucket's midpoint maps back to the bucket.
	for i := 0; valueOf(i) < 1<<52; i++ {
		require.Equal(t, i, bucketOf(uint64(valueOf(i))), "bucket %d", i)
	}
	var empty Hist
	require.Zero(t, empty.QuantileMS(0.99))
	require.Zero(t, empty.MeanMS())
}

// Sleep never returns before its deadline, and returns the context's cause
// at once when the context ends first.
func TestSleep(t *testing.T) {
	for _, d := range []time.Duration{0, 300 * time.Microsecond, 2 * time.Millisecond, 5 * time.Millisecond} {
		deadline := time.Now().Add(d)
		require.NoError(t, Sleep(context.Background(), deadline))
		require.False(t, time.Now().Before(deadline), "woke before the deadline (%v)", d)
	}

	stop := errors.New("stop")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(stop)
	start := time.Now()
	require.ErrorIs(t, Sleep(ctx, start.Add(time.Hour)), stop)
	require.Less(t, time.Since(start), time.Minute)
}

func TestProcStatus(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		require.Zero(t, ProcStatus("VmRSS"))
		return
	}
	rss, hwm := ProcStatus("VmRSS"), ProcStatus("VmHWM")
	require.Positive(t, rss)
	require.GreaterOrEqual(t, hwm, rss)
	require.Zero(t, ProcStatus("NoSuchField"))
}
