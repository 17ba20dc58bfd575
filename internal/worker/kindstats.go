package worker

import (
	"sort"
	"sync"
	"time"
)

// RunBuckets are the upper bounds of the handler-duration histogram
// (KindStats.RunCounts), in seconds: 5 ms to 1 hour.
var RunBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// MaxKindSeries bounds how many (queue, kind) pairs a process keeps
// separate counts for; the pairs seen after that are counted under their
// queue with kind OtherKind. A fallback handler (work --exec) runs any
// kind, so the label set of the metrics built on these counts must be
// bounded here.
const MaxKindSeries = 200

// OtherKind is the kind the pairs beyond MaxKindSeries are counted under.
const OtherKind = "_other"

// KindStats is one (queue, kind) pair's handler runs and outcomes in this
// process since Start.
type KindStats struct {
	Queue, Kind string
	// What became of the jobs (see Settled): completed, retried after a
	// failure, snoozed, handed back (released), moved to the dead-letter
	// table, whose lease was lost, and whose outcome the database refused
	// (unwritten).
	Completed, Retried, Snoozed, Released, DeadLettered, LeaseLost, Unwritten int64
	// Runs counts the handler runs; RunCounts is the cumulative count of
	// those that took at most each RunBuckets bound; RunSum is their total
	// duration (a Prometheus histogram's parts).
	Runs      uint64
	RunCounts []uint64
	RunSum    time.Duration
}

type kindKey struct{ queue, kind string }

// kindCounts are one pair's counts (not cumulative buckets).
type kindCounts struct {
	settled [Unwritten + 1]int64
	buckets [17]uint64 // per RunBuckets bound, then +Inf
	runs    uint64
	sum     time.Duration
}

// kindStats counts handler runs and outcomes per (queue, kind).
type kindStats struct {
	mu sync.Mutex // guards m
	m  map[kindKey]*kindCounts
}

// add counts one settled job, and its handler's run when ran (the handler
// was called; a job handed back before it started was not run).
func (k *kindStats) add(queue, kind string, s Settled, ran bool, d time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m == nil {
		k.m = map[kindKey]*kindCounts{}
	}
	key := kindKey{queue, kind}
	c := k.m[key]
	if c == nil {
		if len(k.m) >= MaxKindSeries {
			key.kind = OtherKind
			c = k.m[key]
		}
		if c == nil {
			c = &kindCounts{}
			k.m[key] = c
		}
	}
	c.settled[s]++
	if ran {
		c.buckets[sort.SearchFloat64s(RunBuckets, d.Seconds())]++
		c.runs++
		c.sum += d
	}
}

// snapshot returns every pair's counts, sorted by queue and kind.
func (k *kindStats) snapshot() []KindStats {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]KindStats, 0, len(k.m))
	for key, c := range k.m {
		ks := KindStats{Queue: key.queue, Kind: key.kind,
			Completed: c.settled[Completed], Retried: c.settled[Retried], Snoozed: c.settled[Snoozed],
			Released: c.settled[Released], DeadLettered: c.settled[DeadLettered], LeaseLost: c.settled[LeaseLost],
			Unwritten: c.settled[Unwritten], Runs: c.runs, RunSum: c.sum, RunCounts: make([]uint64, len(RunBuckets))}
		var acc uint64
		for i := range RunBuckets {
			acc += c.buckets[i]
			ks.RunCounts[i] = acc
		}
		out = append(out, ks)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Queue != out[j].Queue {
			return out[i].Queue < out[j].Queue
		}
		return out[i].Kind < out[j].Kind
	})
	return out
}
