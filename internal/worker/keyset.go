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
// with one claim from the front every 20 times that claim's cost (at least
// keysetMinGap, at most keysetMaxGap or keysetMaxShare's bound when that is
// longer) to pick up jobs that sort behind a bound: a higher priority
// enqueued meanwhile, a job handed back by a stopping worker, a job whose
// entity was busy. Those wait at most that gap; nothing else changes.
//
// That periodic claim from the front runs beside the claims after the
// bounds, not in their place (frontDue, pool.startFront): its cost grows
// with the pin's length (hundreds of milliseconds ten minutes into one), and
// a producer waiting for it claimed nothing meanwhile, so every job enqueued
// during it waited as long: the pickup p99 of a long pin grew with the pin
// while the claim after the bounds stayed flat (docs/performance.md).
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
	// keysetMaxShare bounds the share of a connection the claims from the
	// front take once one costs more than keysetMaxGap/keysetMaxShare: the
	// gap grows with their cost instead of staying at keysetMaxGap, where a
	// pin's growing cost would have them read the dead entries without
	// pause (a second each every three seconds ten minutes into a 2,000
	// jobs/s pin: a third of one of the two cores it was measured on).
	keysetMaxShare = 10
)

// bounds returns the bounds for the next claim, or nil for a claim from the
// front; aside: a claim from the front is running beside this one.
func (k *keyset) bounds(now time.Time, aside bool) map[string]store.Bound {
	if len(k.after) == 0 || k.fullCost < k.cheap {
		return nil
	}
	if !aside && now.Sub(k.lastFull) >= k.gap() {
		return nil
	}
	return k.after
}

// frontDue reports whether the periodic claim from the front is due while
// bounds are in use, to run beside the claims after them (when none runs
// already); observe(false, …) records its end.
func (k *keyset) frontDue(now time.Time) bool {
	return len(k.after) > 0 && k.fullCost >= k.cheap && now.Sub(k.lastFull) >= k.gap()
}

// gap is the time between claims from the front while bounds are in use.
func (k *keyset) gap() time.Duration {
	return min(max(20*k.fullCost, keysetMinGap), max(keysetMaxGap, (keysetMaxShare-1)*k.fullCost))
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
