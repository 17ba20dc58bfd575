package faults

import (
	"os"
	"regexp"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Synthetic histories for checkHistory: times are milliseconds after s0,
// every job's max_attempts is 3 unless set, and the workers are fw-a.1 and
// fw-b.1 (a connection named X holds the leases locked by X).

var s0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func at(ms int) time.Time         { return s0.Add(time.Duration(ms) * time.Millisecond) }
func atp(ms int) *time.Time       { t := at(ms); return &t }
func sp(s string) *string         { return &s }
func ip(n int) *int               { return &n }
func i64p(n int64) *int64         { return &n }
func sameApp(app, by string) bool { return app == by }

func seedInsert(job int64, ms, maxAttempts int) auditEvent {
	return auditEvent{tbl: "jobs", op: "insert", job: job, newState: sp("ready"), attempts: ip(0),
		maxAttempts: ip(maxAttempts), queue: "default", app: "producer", txNow: at(ms), at: at(ms)}
}

// seedClaim: ready→running under token tok held by by, valid until expMs.
func seedClaim(job, tok int64, by string, ms, expMs int) auditEvent {
	return auditEvent{tbl: "jobs", op: "update", job: job, oldState: sp("ready"), newState: sp("running"),
		newToken: i64p(tok), newBy: sp(by), newExpires: atp(expMs), oldRunAt: atp(0), attempts: ip(1), maxAttempts: ip(3),
		queue: "default", app: by, txNow: at(ms), at: at(ms)}
}

// seedBeat: app extends lease tok (held by holder) from oldMs to newMs,
// presenting tok.
func seedBeat(job, tok int64, holder, app string, ms, oldMs, newMs int) auditEvent {
	return auditEvent{tbl: "jobs", op: "update", job: job, oldState: sp("running"), newState: sp("running"),
		oldToken: i64p(tok), newToken: i64p(tok), presented: i64p(tok), oldBy: sp(holder), newBy: sp(holder),
		oldExpires: atp(oldMs), newExpires: atp(newMs), maxAttempts: ip(3), queue: "default", app: app, txNow: at(ms), at: at(ms)}
}

// seedEnd: app deletes the running row of lease tok (a completion or the
// first half of a dead letter), presenting tok.
func seedEnd(job, tok int64, app string, ms int) auditEvent {
	return auditEvent{tbl: "jobs", op: "delete", job: job, oldState: sp("running"), oldToken: i64p(tok), presented: i64p(tok),
		oldBy: sp(app), oldExpires: atp(ms + 1000), maxAttempts: ip(3), queue: "default", app: app, txNow: at(ms), at: at(ms)}
}

// seedRetry: app returns the running row of lease tok to ready.
func seedRetry(job, tok int64, app string, ms int) auditEvent {
	return auditEvent{tbl: "jobs", op: "update", job: job, oldState: sp("running"), newState: sp("ready"), oldToken: i64p(tok),
		presented: i64p(tok), oldBy: sp(app), oldExpires: atp(ms + 1000), maxAttempts: ip(3), queue: "default", app: app,
		txNow: at(ms), at: at(ms)}
}

// seedReap: the reaper returns lease tok, which expired at expMs, to ready.
func seedReap(job, tok int64, ms, expMs int) auditEvent {
	return auditEvent{tbl: "jobs", op: "update", job: job, oldState: sp("running"), newState: sp("ready"), oldToken: i64p(tok),
		oldExpires: atp(expMs), maxAttempts: ip(3), queue: "default", app: "fw-b.1", reaper: true, txNow: at(ms), at: at(ms)}
}

func seedTo(tbl string, job int64, ms int) auditEvent {
	return auditEvent{tbl: tbl, op: "insert", job: job, reason: sp("failed"), queue: "default", app: "fw-a.1", txNow: at(ms), at: at(ms)}
}

func seedRun(id, job, tok int64, from, to int, outcome string) runRow {
	r := runRow{id: id, job: job, token: tok, attempt: 1, worker: "fw-a.1", start: at(from), outcome: &outcome}
	if to >= 0 {
		r.end = atp(to)
	}
	return r
}

// seedOK is job 1 done right: enqueued, claimed by fw-a.1, run to success,
// completed by its holder.
func seedOK() history {
	return history{
		events: []auditEvent{seedInsert(1, 0, 3), seedClaim(1, 101, "fw-a.1", 10, 2010), seedEnd(1, 101, "fw-a.1", 40)},
		runs:   []runRow{seedRun(1, 1, 101, 20, 30, "ok")},
	}
}

// seedRetaken is job 1 whose first lease (101, fw-a.1) the reaper took
// after it expired, claimed again under 102 by claimer and run to success.
func seedRetaken(claimer string, maxAttempts int) history {
	c1, c2 := seedClaim(1, 101, "fw-a.1", 10, 2010), seedClaim(1, 102, claimer, 2200, 4200)
	c1.maxAttempts, c2.maxAttempts = ip(maxAttempts), ip(maxAttempts)
	return history{
		events: []auditEvent{seedInsert(1, 0, maxAttempts), c1, seedReap(1, 101, 2100, 2010), c2, seedEnd(1, 102, claimer, 2500)},
		runs:   []runRow{seedRun(1, 1, 102, 2300, 2400, "ok")},
	}
}

type seedCase struct {
	kind string
	why  string
	o    checkOpts
	h    func() history
}

var one = checkOpts{committed: []int64{1}}

// seedCases: for every kind the checker reports, a history with exactly
// that one fault.
var seedCases = []seedCase{
	{vLeftBehind, "job 2 still ready after the drain", checkOpts{committed: []int64{1, 2}}, func() history {
		h := seedOK()
		h.events = append(h.events, seedInsert(2, 5, 3))
		h.left = []leftRow{{id: 2, state: "ready"}}
		return h
	}},
	{vNeverInserted, "job 2 committed, no trace of it", checkOpts{committed: []int64{1, 2}}, seedOK},
	{vUncommittedInAudit, "job 2 inserted, the test never committed it", one, func() history {
		h := seedOK()
		h.events = append(h.events, seedInsert(2, 5, 3))
		return h
	}},
	{vRolledBackRan, "job 3 was rolled back and ran", checkOpts{committed: []int64{1}, rolledBack: []int64{3}}, func() history {
		h := seedOK()
		h.runs = append(h.runs, seedRun(2, 3, 300, 20, 30, "ok"))
		return h
	}},
	{vUncommittedRan, "job 3 was never enqueued and ran", one, func() history {
		h := seedOK()
		h.runs = append(h.runs, seedRun(2, 3, 300, 20, 30, "ok"))
		return h
	}},
	{vRunWithoutClaim, "a run under token 999", one, func() history {
		h := seedOK()
		h.runs = append(h.runs, seedRun(2, 1, 999, 25, 35, "ok"))
		return h
	}},
	{vTokenRanTwice, "lease 101 ran twice", one, func() history {
		h := seedOK()
		h.runs = append(h.runs, seedRun(2, 1, 101, 22, 28, "ok"))
		return h
	}},
	{vRunBeforeClaim, "the run started before its claim", one, func() history {
		h := seedOK()
		h.runs = []runRow{seedRun(1, 1, 101, 5, 30, "ok")}
		return h
	}},
	{vRunOverlap, "fw-a.1 retried its lease while its run went on; fw-b.1's run overlaps it", one, func() history {
		return history{
			events: []auditEvent{seedInsert(1, 0, 3), seedClaim(1, 101, "fw-a.1", 10, 2010), seedRetry(1, 101, "fw-a.1", 100),
				seedClaim(1, 102, "fw-b.1", 200, 2200), seedEnd(1, 102, "fw-b.1", 500)},
			runs: []runRow{seedRun(1, 1, 101, 20, 3000, "fail"), seedRun(2, 1, 102, 300, 400, "ok")},
		}
	}},
	{vClaimWhileHeld, "a second claim with no end of the first lease", one, func() history {
		return history{
			events: []auditEvent{seedInsert(1, 0, 3), seedClaim(1, 101, "fw-a.1", 10, 2010), seedClaim(1, 102, "fw-a.1", 20, 2020),
				seedEnd(1, 102, "fw-a.1", 50)},
			runs: []runRow{seedRun(1, 1, 102, 30, 40, "ok")},
		}
	}},
	{vClaimOverlapsLease, "a heartbeat extended lease 101 to 4000, a claim at 2200", one, func() history {
		h := seedRetaken("fw-b.1", 3)
		h.events = append(h.events[:2], append([]auditEvent{seedBeat(1, 101, "fw-a.1", "fw-a.1", 500, 2010, 4000)}, h.events[2:]...)...)
		return h
	}},
	{vClaimWithoutLease, "a claim that set no expiry", one, func() history {
		h := seedOK()
		h.events[1].newExpires = nil
		return h
	}},
	{vClaimBeyondMax, "two claims of a job with max_attempts 1", one, func() history { return seedRetaken("fw-b.1", 1) }},
	{vClaimBeforeRunAt, "claimed at 10, run_at 50", one, func() history {
		h := seedOK()
		h.events[1].oldRunAt = atp(50)
		return h
	}},
	{vUnknownLease, "a write to the running row under token 999", one, func() history {
		h := seedOK()
		b := seedBeat(1, 999, "fw-a.1", "fw-a.1", 25, 2010, 2025)
		b.presented = nil
		h.events = []auditEvent{h.events[0], h.events[1], b, h.events[2]}
		return h
	}},
	{vLeaseChangedHands, "the running row's holder changed to fw-b.1", one, func() history {
		h := seedOK()
		b := seedBeat(1, 101, "fw-a.1", "fw-a.1", 25, 2010, 2010)
		b.newBy = sp("fw-b.1")
		h.events = []auditEvent{h.events[0], h.events[1], b, h.events[2]}
		return h
	}},
	{vStaleHeartbeat, "fw-b.1 extended fw-a.1's lease", one, func() history {
		h := seedOK()
		b := seedBeat(1, 101, "fw-a.1", "fw-b.1", 25, 2010, 2025)
		b.presented = nil // no token recorded (an --exec worker): only the process check sees it
		h.events = []auditEvent{h.events[0], h.events[1], b, h.events[2]}
		return h
	}},
	{vStaleWrite, "fw-b.1 completed fw-a.1's lease", one, func() history {
		h := seedOK()
		h.events[2].app, h.events[2].presented = "fw-b.1", nil
		return h
	}},
	{vStaleToken, "fw-a.1, holding lease 102, completed with its reaped lease 101", one, func() history {
		h := seedRetaken("fw-a.1", 3)
		h.events[4].presented = i64p(101)
		return h
	}},
	{vTokenOnIdleRow, "fw-a.1's heartbeat for reaped lease 101 touched the ready row", one, func() history {
		h := seedRetaken("fw-b.1", 3)
		idle := auditEvent{tbl: "jobs", op: "update", job: 1, oldState: sp("ready"), newState: sp("ready"), presented: i64p(101),
			maxAttempts: ip(3), queue: "default", app: "fw-a.1", txNow: at(2150), at: at(2150)}
		h.events = append(h.events[:3], append([]auditEvent{idle}, h.events[3:]...)...)
		return h
	}},
	{vReapedValidLease, "the reaper took lease 101 at 1000, valid until 2010", one, func() history {
		h := seedRetaken("fw-b.1", 3)
		h.events[2] = seedReap(1, 101, 1000, 2010)
		return h
	}},
	{vDeadTwice, "job 1 in jobs_dead twice", one, func() history {
		h := seedOK()
		h.runs[0].outcome = sp("fail")
		h.events = append(h.events, seedTo("jobs_dead", 1, 40), seedTo("jobs_dead", 1, 41))
		return h
	}},
	{vArchivedTwice, "job 1 in jobs_done twice", checkOpts{committed: []int64{1}, archive: true}, func() history {
		h := seedOK()
		h.events = append(h.events, seedTo("jobs_done_p1", 1, 40), seedTo("jobs_done_p1", 1, 41))
		return h
	}},
	{vCompletedAndDead, "job 1 archived and dead-lettered", one, func() history {
		h := seedOK()
		h.events = append(h.events, seedTo("jobs_done_p1", 1, 40), seedTo("jobs_dead", 1, 41))
		return h
	}},
	{vLost, "job 1 deleted while ready, not dead-lettered", one, func() history {
		return history{events: []auditEvent{seedInsert(1, 0, 3),
			{tbl: "jobs", op: "delete", job: 1, oldState: sp("ready"), queue: "default", app: "x", txNow: at(5), at: at(5)}}}
	}},
	{vCompletedNoOKRun, "completed after a failed run", one, func() history {
		h := seedOK()
		h.runs[0].outcome = sp("fail")
		return h
	}},
	{vUniqueKeyTwice, "jobs 1 and 2 with unique key k live at once", checkOpts{committed: []int64{1, 2}}, func() history {
		h := seedOK()
		h.events[0].uniqueKey = sp("k")
		i2 := seedInsert(2, 20, 3)
		i2.uniqueKey = sp("k")
		h.events = append(h.events, i2, seedClaim(2, 201, "fw-a.1", 50, 2050), seedEnd(2, 201, "fw-a.1", 80))
		h.runs = append(h.runs, seedRun(2, 2, 201, 60, 70, "ok"))
		return h
	}},
	{vSupersededDone, "job 1's lease ended by a supersede, then job 1 archived", checkOpts{committed: []int64{1}, archive: true,
		supersede: true}, func() history {
		h := seedSupersede()
		h.events = h.events[:3] // job 1: insert, claim, the supersede's delete
		h.events = append(h.events, seedTo("jobs_done_20261123", 1, 40))
		h.runs = h.runs[:1]
		return h
	}},
	{vAwaitNotReturned, "the caller's context ended before job 1's end", awaitOpts(&awaitCall{caller: "c", ids: []int64{1},
		err: "context deadline exceeded"}), seedAwaited},
	{vAwaitMissing, "Wait returned without job 1's end", awaitOpts(&awaitCall{caller: "c", ids: []int64{1}, returned: true}), seedAwaited},
	{vAwaitTwice, "job 1's end reported twice", awaitOpts(&awaitCall{caller: "c", ids: []int64{1}, returned: true,
		reports: []jobEnd{seedEnd1, seedEnd1}}), seedAwaited},
	{vAwaitUnasked, "job 2's end reported to a caller of job 1", awaitOpts(&awaitCall{caller: "c", ids: []int64{1}, returned: true,
		reports: []jobEnd{seedEnd1, {id: 2, state: "completed"}}}), seedAwaited},
	{vAwaitWrongEnd, "job 1 reported with another result", awaitOpts(&awaitCall{caller: "c", ids: []int64{1}, returned: true,
		reports: []jobEnd{{id: 1, state: "completed", result: `{"attempt": 2}`}}}), seedAwaited},
	{vPlainAtRest, "job 1 enqueued sealed, its claim stored it in plaintext", sealedOne, func() history {
		h := seedSealed()
		h.events[1].sealed, h.events[1].marker = bp(false), bp(true)
		return h
	}},
	{vPayloadMismatch, "job 1's handler got another payload", sealedOne, func() history {
		h := seedSealed()
		h.runs[0].payload = []byte(`{"marker": "fault-plaintext-marker-2"}`)
		return h
	}},
	{vEntityOverlap, "jobs 1 and 2 of entity e running at once", checkOpts{committed: []int64{1, 2}}, func() history {
		h := seedOK()
		h.events[1].entity = sp("e")
		c2 := seedClaim(2, 201, "fw-b.1", 20, 2020)
		c2.entity = sp("e")
		h.events = append(h.events, seedInsert(2, 5, 3), c2, seedEnd(2, 201, "fw-b.1", 60))
		h.runs = append(h.runs, seedRun(2, 2, 201, 25, 55, "ok"))
		return h
	}},
}

// seedEnd1 is how seedAwaited's job 1 ended: completed with a result.
var seedEnd1 = jobEnd{id: 1, state: "completed", result: `{"attempt":1}`}

// seedAwaited is seedOK with the end jobs_done records for job 1.
func seedAwaited() history {
	h := seedOK()
	h.ends = map[int64][]jobEnd{1: {{id: 1, state: "completed", result: `{"attempt": 1}`}}}
	return h
}

func awaitOpts(calls ...*awaitCall) checkOpts {
	return checkOpts{committed: []int64{1}, awaits: calls}
}

// Reported ends that match what the database records pass: a result
// equal as JSON (jsonb re-spaces it), a dead job's reason and error; one
// caller's end is not another's duplicate.
func TestAwaitHistory(t *testing.T) {
	t.Parallel()
	ok := awaitOpts(&awaitCall{caller: "a", ids: []int64{1}, returned: true, reports: []jobEnd{seedEnd1}},
		&awaitCall{caller: "b", ids: []int64{1}, returned: true, reports: []jobEnd{seedEnd1}})
	r := checkHistory(sortHistory(seedAwaited()), ok, sameApp)
	require.Empty(t, r.violations)
	require.Equal(t, 2, r.AwaitCalls)
	require.Equal(t, 2, r.AwaitReports)

	h := seedAwaited()
	h.runs[0].outcome = sp("fail")
	h.events = append(h.events, seedTo("jobs_dead", 1, 40))
	h.ends = map[int64][]jobEnd{1: {{id: 1, state: "dead", reason: "error", err: "failing on purpose"}}}
	dead := jobEnd{id: 1, state: "dead", reason: "error", err: "failing on purpose"}
	r = checkHistory(sortHistory(h), awaitOpts(&awaitCall{caller: "a", ids: []int64{1}, returned: true, reports: []jobEnd{dead}}), sameApp)
	require.Empty(t, r.violations)
	dead.err = "an earlier attempt's error"
	r = checkHistory(sortHistory(h), awaitOpts(&awaitCall{caller: "a", ids: []int64{1}, returned: true, reports: []jobEnd{dead}}), sameApp)
	require.Equal(t, map[string]int{vAwaitWrongEnd: 1}, r.kinds())
}

func bp(b bool) *bool { return &b }

// sealedOne: job 1 enqueued sealed, with a marked payload.
var sealedOne = checkOpts{committed: []int64{1}, payloads: map[int64]enqueuedPayload{
	1: {json: []byte(`{"sleep":[300],"marker":"fault-plaintext-marker-1"}`), sealed: true}}}

// seedSealed is seedOK with payloads sealed: its insert and claim stored
// an envelope, and the run got the plaintext enqueued (members reordered, as
// jsonb prints them).
func seedSealed() history {
	h := seedOK()
	for _, i := range []int{0, 1} {
		h.events[i].sealed, h.events[i].marker = bp(true), bp(false)
	}
	h.runs[0].payload = []byte(`{"sleep": [300], "marker": "fault-plaintext-marker-1"}`)
	return h
}

// seedSupersede: job 1 (key k) claimed by fw-a.1, superseded at 20 by the
// producer (its row moved to jobs_dead); job 2 (key k) inserted in the same
// transaction, claimed by fw-b.1 and completed. Job 1's handler still ran to
// "ok" (its completion refused by the fence, so not in the audit).
func seedSupersede() history {
	i1 := seedInsert(1, 0, 3)
	i1.uniqueKey = sp("k")
	sup := auditEvent{tbl: "jobs", op: "delete", job: 1, oldState: sp("running"), oldToken: i64p(101), oldBy: sp("fw-a.1"),
		oldExpires: atp(2010), maxAttempts: ip(3), queue: "default", uniqueKey: sp("k"), app: "producer", txNow: at(20), at: at(20)}
	dead := seedTo("jobs_dead", 1, 20)
	dead.reason = sp("cancelled")
	i2 := seedInsert(2, 20, 3)
	i2.uniqueKey = sp("k")
	return history{
		events: []auditEvent{i1, seedClaim(1, 101, "fw-a.1", 10, 2010), sup, dead,
			i2, seedClaim(2, 201, "fw-b.1", 30, 2030), seedEnd(2, 201, "fw-b.1", 60), seedTo("jobs_done_20261123", 2, 60)},
		runs: []runRow{seedRun(1, 1, 101, 11, 45, "ok"), seedRun(2, 2, 201, 31, 55, "ok")},
	}
}

// A supersede is a legitimate end of a lease when producers supersede, and
// a stale write when they do not.
func TestSupersedeHistory(t *testing.T) {
	t.Parallel()
	sup := checkOpts{committed: []int64{1, 2}, archive: true, supersede: true}
	r := checkHistory(sortHistory(seedSupersede()), sup, sameApp)
	require.Empty(t, r.violations)
	require.Equal(t, 1, r.Superseded)
	require.Equal(t, 1, r.Dead)
	require.Equal(t, 1, r.Completed)

	sup.supersede = false
	r = checkHistory(sortHistory(seedSupersede()), sup, sameApp)
	require.Equal(t, map[string]int{vStaleWrite: 1}, r.kinds(), "without supersede the producer's delete is a stale write")
}

// sortHistory orders the events as loadAudit does: by job, then time.
func sortHistory(h history) history {
	sort.SliceStable(h.events, func(i, j int) bool {
		a, b := h.events[i], h.events[j]
		if a.job != b.job {
			return a.job < b.job
		}
		return a.at.Before(b.at)
	})
	return h
}

// TestEveryCheckCanFire proves each of the checker's checks can fail: for
// every violation kind it reports, a history with exactly that fault makes
// exactly that kind fire (and nothing else), and the faultless histories
// the cases start from pass clean. A check that cannot fire would make
// every fault test's "0 violations" vacuous.
func TestEveryCheckCanFire(t *testing.T) {
	t.Parallel()
	for name, h := range map[string]history{"seedOK": seedOK(), "seedRetaken": seedRetaken("fw-b.1", 3),
		"seedRetaken by the same process": seedRetaken("fw-a.1", 3)} {
		r := checkHistory(sortHistory(h), one, sameApp)
		require.Empty(t, r.violations, "%s must pass clean", name)
		require.Equal(t, 1, r.Completed, name)
	}
	r := checkHistory(sortHistory(seedSealed()), sealedOne, sameApp)
	require.Empty(t, r.violations, "seedSealed must pass clean")
	require.Equal(t, []int{2, 0, 1}, []int{r.SealedWrites, r.PlainWrites, r.PayloadRuns})
	covered := map[string]bool{}
	for _, c := range seedCases {
		t.Run(c.kind, func(t *testing.T) {
			r := checkHistory(sortHistory(c.h()), c.o, sameApp)
			t.Logf("%s: %v", c.why, r.violations)
			require.Equal(t, map[string]int{c.kind: 1}, r.kinds(), "%s: exactly one %s", c.why, c.kind)
		})
		covered[c.kind] = true
	}
	for _, k := range allKinds {
		require.True(t, covered[k], "no seeded history makes %s fire", k)
	}
	require.Len(t, covered, len(allKinds), "a seeded kind is missing from allKinds")

	// Every kind declared in checker_test.go is in allKinds, so a check
	// added later without a seeded history fails here.
	src, err := os.ReadFile("checker_test.go")
	require.NoError(t, err)
	declared := regexp.MustCompile(`(?m)^\tv[A-Z]\w*\s+= "([^"]+)"`).FindAllStringSubmatch(string(src), -1)
	require.NotEmpty(t, declared)
	for _, m := range declared {
		require.True(t, covered[m[1]], "kind %s is declared but has no seeded history", m[1])
	}
	require.Len(t, declared, len(allKinds))
}

// TestCheckerCountsAttemptsFromClaims: the attempts the checker reports
// come from the audit's claims, whatever the library's attempts column
// says, and a claim handed back before its lease ran is refunded.
func TestCheckerCountsAttemptsFromClaims(t *testing.T) {
	t.Parallel()
	h := seedRetaken("fw-b.1", 3)
	for i := range h.events {
		h.events[i].attempts = ip(1) // a library that never counted
	}
	r := checkHistory(sortHistory(h), one, sameApp)
	require.Empty(t, r.violations)
	require.Equal(t, 2, r.Attempts[1], "a reaped claim spends an attempt")

	// A hand-back of a claim that never ran is refunded; with a run it is not.
	h = history{
		events: []auditEvent{seedInsert(1, 0, 1), seedClaim(1, 101, "fw-a.1", 10, 2010), seedRetry(1, 101, "fw-a.1", 20),
			seedClaim(1, 102, "fw-a.1", 30, 2030), seedEnd(1, 102, "fw-a.1", 50)},
		runs: []runRow{seedRun(1, 1, 102, 35, 45, "ok")},
	}
	for i := range h.events {
		h.events[i].maxAttempts = ip(1)
	}
	r = checkHistory(sortHistory(h), one, sameApp)
	require.Empty(t, r.violations)
	require.Equal(t, 1, r.Attempts[1])
	h.runs = append(h.runs, seedRun(2, 1, 101, 12, 18, "fail"))
	r = checkHistory(sortHistory(h), one, sameApp)
	require.Equal(t, map[string]int{vClaimBeyondMax: 1}, r.kinds())
}

// A run parked by a signal wait gave its lease up in the wait's own
// transaction; its record of the end (endRun) may land seconds later when
// a network fault holds it back, while the signalled job runs elsewhere.
// That run ends with its lease: no overlap. The same late end after a
// retry (the handler still running) is one (seedCases' run-overlap).
func TestRunParkedBySignalWaitEndsWithItsLease(t *testing.T) {
	t.Parallel()
	h := func(outcome string) history {
		return history{
			events: []auditEvent{seedInsert(1, 0, 3), seedClaim(1, 101, "fw-a.1", 10, 2010), seedRetry(1, 101, "fw-a.1", 100),
				seedClaim(1, 102, "fw-b.1", 200, 2200), seedEnd(1, 102, "fw-b.1", 500)},
			runs: []runRow{seedRun(1, 1, 101, 20, 3000, outcome), seedRun(2, 1, 102, 300, 400, "ok")},
		}
	}
	r := checkHistory(sortHistory(h("wait")), one, sameApp)
	require.Empty(t, r.violations)
	r = checkHistory(sortHistory(h("sleep")), one, sameApp)
	require.Equal(t, map[string]int{vRunOverlap: 1}, r.kinds(), "a timer's run ends before its lease does: a late end is still an overlap")
}
