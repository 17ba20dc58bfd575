package worker

import (
	"slices"
	"time"

	"github.com/skiplock/skiplock/internal/store"
)

// keyset decides where each of a pool's claims starts reading the ready
// index: at the front, or after the last job the pool claimed from each
// queue (store.ClaimRequest.After).
//
// Claiming from the front is exact (a higher-priority job that just arrived
// is the next one taken) and, on a healthy server, cheap: the index holds
// only ready jobs. While a long transaction pins the vacuum horizon it is
// not: every job claimed since the pin leaves an index entry and a row
// version at the front that vacuum may not remove, and a claim from the
// front reads all of them, so its cost grows with the jobs processed since
// the pin (docs/performance-log.md, "Claiming under a pinned horizon"). A claim
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
// bounds, not in their place (frontDue, pool.startAside): its cost grows
// with the pin's length (hundreds of milliseconds ten minutes into one), and
// a producer waiting for it claimed nothing meanwhile, so every job enqueued
// during it waited as long: the pickup p99 of a long pin grew with the pin
// while the claim after the bounds stayed flat (docs/performance-log.md).
//
// A tenant-capped pool (perTenant) keeps a bound per tenant as well
// (tenantBounds, tenantWindow: the capped claim visits tenants in turn and
// reads each from the front of its own range of the tenant index, where
// the pin's dead entries of that tenant are; after the bounds it is
// claim_capped_after), and goes after its bounds only past
// keysetCheapCapped.
type keyset struct {
	cheap     time.Duration // claims from the front cheaper than this stay there (keysetCheap, keysetCheapCapped)
	perTenant bool          // keep tenants' bounds (a tenant-capped pool)
	after     map[string]store.Bound
	tenants   map[string]*tenantBounds // per queue
	seen      map[[2]string]bool       // observeTenants' scratch: (queue, tenant) met in this claim
	lastFull  time.Time
	fullCost  time.Duration          // moving average of claims from the front (of frontTypical's)
	recent    [3]time.Duration       // the costs of the last claims from the front but the first (frontTypical)
	fronts    int                    // claims from the front observed
	last      map[string]store.Bound // observe's scratch: this claim's last job per queue
}

const (
	keysetCheap = 5 * time.Millisecond
	// keysetCheapCapped is keysetCheap for a tenant-capped pool: its claim
	// after the tenants' bounds (claim_capped_after) costs about twice its
	// claim from the front on a healthy server (2.7 against 1.3 ms over
	// 1,000 tenants: the bounds it carries and a larger plan), and a capped
	// claim from the front passes 5 ms now and then without any pin (a 1,000-
	// tenant drain whose claims went after the bounds fell from 20,000 to
	// 12,000 jobs/s). Under a pin its claims from the front cost 40 ms ten
	// seconds in and hundreds of ms soon after.
	keysetCheapCapped = 4 * keysetCheap
	keysetMinGap      = 50 * time.Millisecond
	keysetMaxGap      = 2 * time.Second
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

// newKeyset is a pool's keyset; capped: the pool has a tenant cap.
func newKeyset(capped bool) keyset {
	if capped {
		return keyset{cheap: keysetCheapCapped, perTenant: true}
	}
	return keyset{cheap: keysetCheap}
}

// keysetTenantWindow is the fewest tenants' bounds a capped claim gets (the
// next ones after its cursor; 4 × its batch when more): its visit steps
// through empty tenants too (no ready job after their bound), and a
// tenant beyond the window is read from its front. With the window at twice
// the batch, a 3-minute pin on 100 mostly idle tenants had visits of 75
// steps run past it and read 25 tenants from their front: 3 s claims.
const keysetTenantWindow = 256

// keysetMaxTenants bounds the tenants a pool keeps bounds for per queue:
// past it the queue's bounds start over (those tenants' next claims read
// from the front once, then have bounds again).
const keysetMaxTenants = 20000

// tenantBounds are one queue's tenant bounds ("": the jobs without a
// tenant), with the tenants in name order for tenantWindow.
type tenantBounds struct {
	at    map[string]store.Bound
	names []string // sorted, without ""
}

func (t *tenantBounds) get(tenant string) (store.Bound, bool) {
	if t == nil {
		return store.Bound{}, false
	}
	b, ok := t.at[tenant]
	return b, ok
}

func (t *tenantBounds) set(tenant string, b store.Bound) {
	if _, ok := t.at[tenant]; !ok && tenant != "" {
		i, _ := slices.BinarySearch(t.names, tenant)
		t.names = slices.Insert(t.names, i, tenant)
	}
	t.at[tenant] = b
}

// tenantWindow returns the tenant bounds for the next capped claim: per
// queue, the untenanted jobs' bound and those of the next n tenants after
// the queue's cursor in name order, wrapping (the caller passes at least 4
// × the batch, the most tenants one visit steps through). Byte order here,
// the database's collation there: where they differ, a tenant the window
// misses is read from its front, which is slower, not wrong.
func (k *keyset) tenantWindow(cursors map[string]string, n int) map[string]map[string]store.Bound {
	out := make(map[string]map[string]store.Bound, len(k.tenants))
	for q, tb := range k.tenants {
		w := make(map[string]store.Bound, min(n, len(tb.names))+1)
		if b, ok := tb.at[""]; ok {
			w[""] = b
		}
		i, found := slices.BinarySearch(tb.names, cursors[q])
		if found {
			i++
		}
		for c := range min(n, len(tb.names)) {
			name := tb.names[(i+c)%len(tb.names)]
			w[name] = tb.at[name]
		}
		out[q] = w
	}
	return out
}

// ringClaims is how many capped claims of n jobs it takes to visit every
// tenant this pool keeps a bound for, in the queue that has most: a visit
// steps through at most 4 × n of them (claim_capped_after), and tenants
// without a bound it reads from their front, where an empty one is no step.
func (k *keyset) ringClaims(n int) int {
	most := 0
	for _, tb := range k.tenants {
		most = max(most, len(tb.names))
	}
	return (most + 4*n - 1) / (4 * n)
}

// frontTypical is the cost of a claim from the front the moving average
// takes in: the median of the last three, the first left out (it plans the
// statement); none for the second, the cheaper of the second and third.
// One slow claim in a healthy drain (each connection's first plans the
// statement; a checkpoint, a stall of the VM) moved the average past a
// capped pool's keysetCheapCapped, and its claims went after the bounds,
// which cost it 2.8 times as much (claim_capped_after: 6.5 ms against 2.3,
// 20,000 tenants), for 18 % of a drain's claims (issue 40). Two slow in a
// row count, as every one does under a pin, whose claims from the front
// only grow.
func (k *keyset) frontTypical() time.Duration {
	n := max(0, min(k.fronts-1, len(k.recent))) // the first is not in recent
	sorted := k.recent                          // a copy: recent keeps its order
	slices.Sort(sorted[:n])
	switch {
	case n < 2:
		return 0
	case n == 2:
		return sorted[0]
	}
	return sorted[1]
}

// observe records a claim: whether it was from the front (bounded false),
// what it cost, whether it filled its batch, and what it took.
func (k *keyset) observe(bounded bool, took time.Duration, filled bool, jobs []store.ClaimedJob, now time.Time) {
	if !bounded {
		k.lastFull = now
		// From zero, not from the first claim's cost: a connection's first
		// claim plans the statement (tens of ms for the capped claim's
		// generic plan), which no later claim pays; taken as the cost, it
		// sent a healthy pool's claims after its bounds for seconds.
		if k.fronts > 0 {
			k.recent[(k.fronts-1)%len(k.recent)] = took
		}
		k.fronts++
		k.fullCost = (3*k.fullCost + k.frontTypical()) / 4
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
	if k.perTenant {
		k.observeTenants(bounded, jobs)
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

// observeTenants records a capped claim's jobs in the tenants' bounds: a
// claim after the bounds moves a tenant's bound forward; a claim from the
// front sets it to where that claim ended in the tenant's jobs (a tenant's
// jobs are taken in its own claim order, so anything of it left between
// there and the old bound is read next time).
func (k *keyset) observeTenants(bounded bool, jobs []store.ClaimedJob) {
	if k.tenants == nil {
		k.tenants = map[string]*tenantBounds{}
	}
	if k.seen == nil {
		k.seen = map[[2]string]bool{}
	}
	seen := k.seen // reused: no allocation per claim
	clear(seen)
	for _, j := range jobs {
		tb := k.tenants[j.Queue]
		cur, ok := tb.get(j.Tenant)
		if tb == nil || !ok && len(tb.names) >= keysetMaxTenants {
			tb = &tenantBounds{at: map[string]store.Bound{}}
			k.tenants[j.Queue] = tb
		}
		b := store.BoundOf(j)
		key := [2]string{j.Queue, j.Tenant}
		switch {
		case !ok, cur.Before(b):
			tb.set(j.Tenant, b)
		case !bounded && !seen[key]:
			tb.set(j.Tenant, b) // the first of this claim's jobs of the tenant behind the bound
		}
		seen[key] = true
	}
}
