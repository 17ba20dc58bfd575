// Package measure holds the instruments skiplock bench measures with: a
// concurrent histogram of durations, a precise sleep for the harness's
// handler and the process's resident memory. The peer benchmarks under
// bench/peers import it too, so every side of a comparison is measured by
// the same code.
package measure

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// Hist is a concurrent, fixed-size log-linear histogram of durations with
// microsecond resolution and 1/64 relative precision. It holds any number of
// samples in 30 KiB, so a million-job run records every wait without growing
// the process. The zero value is ready to use.
type Hist struct {
	counts [histBuckets]atomic.Uint64
	n      atomic.Uint64
	sumUS  atomic.Uint64
	maxUS  atomic.Uint64
}

const (
	histSubBits = 6 // 64 sub-buckets per power of two
	histLinear  = 2 << histSubBits
	histBuckets = histLinear + 58<<histSubBits
)

func bucketOf(us uint64) int {
	if us < histLinear {
		return int(us)
	}
	shift := bits.Len64(us) - histSubBits - 1
	return histLinear + (shift-1)<<histSubBits + int(us>>shift) - 1<<histSubBits
}

// valueOf returns the midpoint of bucket i in microseconds.
func valueOf(i int) float64 {
	if i < histLinear {
		return float64(i)
	}
	i -= histLinear
	shift := i>>histSubBits + 1
	m := uint64(i&(1<<histSubBits-1)) + 1<<histSubBits
	lo := m << shift
	return float64(lo) + float64(uint64(1)<<shift)/2
}

// Add records d (a negative d counts as 0).
func (h *Hist) Add(d time.Duration) {
	us := uint64(0)
	if d > 0 {
		us = uint64(d / time.Microsecond)
	}
	h.counts[bucketOf(us)].Add(1)
	h.n.Add(1)
	h.sumUS.Add(us)
	for {
		m := h.maxUS.Load()
		if us <= m || h.maxUS.CompareAndSwap(m, us) {
			break
		}
	}
}

// Count returns the number of samples.
func (h *Hist) Count() uint64 { return h.n.Load() }

// QuantileMS returns quantile q (0..1) in milliseconds, 0 without samples.
func (h *Hist) QuantileMS(q float64) float64 {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(n)))
	if rank < 1 {
		rank = 1
	}
	var seen uint64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= rank {
			v := valueOf(i)
			if mx := float64(h.maxUS.Load()); v > mx {
				v = mx
			}
			return v / 1000
		}
	}
	return float64(h.maxUS.Load()) / 1000
}

// MeanMS returns the mean in milliseconds.
func (h *Hist) MeanMS() float64 {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	return float64(h.sumUS.Load()) / float64(n) / 1000
}

// MaxMS returns the largest sample in milliseconds.
func (h *Hist) MaxMS() float64 { return float64(h.maxUS.Load()) / 1000 }
