package worker

import (
	"time"

	"github.com/skiplock/skiplock/internal/store"
)

// keyset decides where each of a pool's claims starts reading the ready
// index: at the front, or after the last job the pool claimed from each
// queue (store.ClaimParams.After).
//
// Claiming from the front is exact (a higher-priority job that just arrived
// is the next one taken) and, on a healthy server, cheap: the index holds
// only ready jobs. While a long transaction pins the vacuum horizon it is
// not: every job claimed since the pin leaves an index entry and a row
// version at the front that vacuum may not remove, and a claim from the
// front reads all of them, so its cost grows with the jobs processed since
// the pin (docs/performance.md, "Claiming under a pinned horizon"). A claim
// after the bound reads none of them.
//
// So the pool claims from the front while that stays cheap, and once a claim
// from the front costs more than keysetCheap it claims after its bounds,
// with one claim from the front every 20 times that claim's cost (between
// keysetMinGap and keysetMaxGap) to pick up jobs that sort behind a bound: a
// higher priority enqueued meanwhile, a job handed back by a stopping
// worker, a job whose entity was busy. Those wait at most that gap; nothing
// else changes.
type keyset struct {
	cheap    time.Duration // claims from the front cheaper than this stay there (keysetCheap)
	after    map[string]store.Bound
	lastFull time.Time
	fullCost time.Duration          // moving average of claims from the front
	last     map[string]store.Bound // observe's scratch: this claim's last job per queue
}

const (
	keysetCheap  = 5 * time.Millisecond
	keysetMinGap = 50 * time.Millisecond
	keysetMaxGap = 2 * time.Second
)

// bounds returns the bounds for the next claim, or nil for a claim from the
// front.
func (k *keyset) bounds(now time.Time) map[string]store.Bound {
	if len(k.after) == 0 || k.fullCost < k.cheap {
		return nil
	}
	if now.Sub(k.lastFull) >= k.gap() {
		return nil
	}
	return k.after
}

// gap is the time between claims from the front while bounds are in use.
func (k *keyset) gap() time.Duration {
	return min(max(20*k.fullCost, keysetMinGap), keysetMaxGap)
}

// observe records a claim: whether it was from the front (bounded false),
// what it cost, whether it filled its batch, and what it took.
func (k *keyset) observe(bounded bool, took time.Duration, filled bool, jobs []store.ClaimedJob, now time.Time) {
	if !bounded {
		k.lastFull = now
		if k.fullCost == 0 {
			k.fullCost = took
		} else {
			k.fullCost = (3*k.fullCost + took) / 4
		}
	}
	if k.after == nil {
		k.after = map[string]store.Bound{}
	}
	if k.last == nil {
		k.last = map[string]store.Bound{}
	}
	last := k.last // reused: no allocation per claim
	clear(last)
	for _, j := range jobs {
		b := store.BoundOf(j)
		if cur, ok := last[j.Queue]; !ok || cur.Before(b) {
			last[j.Queue] = b
		}
	}
	for q, b := range last {
		cur, ok := k.after[q]
		switch {
		case !ok, cur.Before(b):
			k.after[q] = b
		case !bounded && filled:
			// A full batch from the front ended behind the bound: jobs may
			// wait between the two, so read on from where this claim ended.
			k.after[q] = b
		}
	}
}
