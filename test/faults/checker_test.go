package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The checker reads two histories the library cannot tamper with: the
// audit trail (triggers on skiplock's tables, in DB time) and the runs
// table (one row per execution, written by the handler itself before and
// after its work). From them it checks, after the queue drained, the
// invariants below; each violation carries a stable kind (the v*
// constants), and checker_seed_test.go seeds, for every kind, a history that
// makes exactly that check fire:
//
//   - nothing lost: every committed job is completed (deleted by its lease
//     holder after a successful run, or archived in jobs_done exactly once)
//     or in jobs_dead exactly once, never both; nothing is left in jobs;
//   - nothing unexpected: no run of a job that was never committed;
//   - attempts, counted from the audit's claims (ready→running), not from
//     the library's attempts column: the claims that spent an attempt never
//     exceed max_attempts (a claim handed back by its holder before any run
//     of its lease started is refunded, as PRODUCT §4.4 says); one run per
//     claim; no claim before the job's run_at;
//   - fencing, per lease token: every heartbeat and every completion, retry,
//     release or dead-lettering of a running job carried the token of the
//     row's current lease (the faultworker's tracer records the token each
//     write presented; see presentedTokens), and came from the process
//     holding that lease (its connection's application_name); a write that
//     presented a token never touched a row that was not running;
//   - the reaper only took leases that had expired (by the database clock);
//   - valid leases of a job never overlap; no execution outlives a lease its
//     holder gave up while another lease's execution runs;
//   - at most one live job (in skiplock.jobs) per queue and unique key, and
//     at most one running job per entity, at every moment of the audit;
//   - supersede (checkOpts.supersede): a producer's enqueue may end a
//     running lease it does not hold by moving the row to jobs_dead (the
//     supersede of enqueue_unique); that lease then ends at the move, and a
//     superseded job never completes (its holder's late completion must be
//     refused by the fence). With one row per key, the live-key check above
//     is what says that a key never has two leases at once;
//   - payloads: every run of a job the test enqueued (env.enqueueTo) saw
//     exactly the payload enqueued (the handler records what it got: opened,
//     when sealed), and every version of a sealed job's rows written to
//     jobs, jobs_done and jobs_dead held an envelope and no plaintext
//     marker (docs/security.md "Payload encryption");
//   - awaits (checkOpts.awaits): every Wait call returned (its context did
//     not end first), and reported each job it awaited exactly once, none
//     it did not await, each with the end the database finally records
//     (completed with the result in jobs_done, or dead with the reason and
//     last error in jobs_dead).
//
// A lease is valid from its claim until its holder gives it up (completes,
// retries, releases, dead-letters) or, otherwise, until its last expiry
// (as extended by heartbeats).

// Violation kinds: stable names the tests assert on.
const (
	vLeftBehind         = "left-behind"          // a row still in skiplock.jobs after the drain
	vNeverInserted      = "never-inserted"       // committed, but the audit has no trace of it
	vUncommittedInAudit = "uncommitted-in-audit" // the audit has a job the test did not commit
	vRolledBackRan      = "rolled-back-ran"      // a job from a rolled-back transaction ran
	vUncommittedRan     = "uncommitted-ran"      // a run of a job the test never committed
	vRunWithoutClaim    = "run-without-claim"    // a run whose lease token no claim granted
	vTokenRanTwice      = "token-ran-twice"      // one claim, several executions
	vRunBeforeClaim     = "run-before-claim"     // a run started before its lease's claim
	vRunOverlap         = "run-overlap"          // executions under two leases overlap (checkRunOverlap)
	vClaimWhileHeld     = "claim-while-held"     // a claim while the previous lease was never given up
	vClaimOverlapsLease = "claim-overlaps-lease" // a claim before the previous lease's validity ended
	vClaimWithoutLease  = "claim-without-lease"  // a claim that set no full lease (token, holder, expiry)
	vClaimBeyondMax     = "claim-beyond-max-attempts"
	vClaimBeforeRunAt   = "claim-before-run-at"
	vUnknownLease       = "write-to-unknown-lease" // a write to a running row under a lease never claimed
	vLeaseChangedHands  = "lease-changed-hands"    // running→running with another token or holder
	vStaleHeartbeat     = "stale-holder-heartbeat" // a heartbeat by a process that does not hold the lease
	vStaleWrite         = "stale-holder-write"     // a completion/retry/dead letter by another process
	vStaleToken         = "stale-token"            // a write that presented another lease's token
	vTokenOnIdleRow     = "token-write-to-idle-row"
	vReapedValidLease   = "reaped-valid-lease"
	vDeadTwice          = "dead-twice"
	vArchivedTwice      = "archived-twice"
	vCompletedAndDead   = "completed-and-dead"
	vLost               = "lost"
	vCompletedNoOKRun   = "completed-without-ok-run"
	vUniqueKeyTwice     = "unique-key-twice-live"
	vEntityOverlap      = "entity-running-twice"
	vSupersededDone     = "superseded-completed" // a job whose lease a supersede ended was completed anyway
	vAwaitNotReturned   = "await-not-returned"   // a Wait call's context ended before every job it awaited ended
	vAwaitMissing       = "await-missing"        // a Wait call returned without reporting a job it awaited
	vAwaitTwice         = "await-reported-twice" // a Wait call reported one job more than once
	vAwaitUnasked       = "await-unasked"        // a Wait call reported a job it did not await
	vAwaitWrongEnd      = "await-wrong-end"      // a reported end is not the one the database records
	vPlainAtRest        = "plaintext-at-rest"    // a sealed job's row version stored without an envelope, or with plaintext
	vPayloadMismatch    = "payload-mismatch"     // a handler saw a payload other than the one enqueued
)

// allKinds lists every kind the checker reports; TestEveryCheckCanFire
// requires a seeded history for each.
var allKinds = []string{vLeftBehind, vNeverInserted, vUncommittedInAudit, vRolledBackRan, vUncommittedRan,
	vRunWithoutClaim, vTokenRanTwice, vRunBeforeClaim, vRunOverlap, vClaimWhileHeld, vClaimOverlapsLease,
	vClaimWithoutLease, vClaimBeyondMax, vClaimBeforeRunAt, vUnknownLease, vLeaseChangedHands, vStaleHeartbeat,
	vStaleWrite, vStaleToken, vTokenOnIdleRow, vReapedValidLease, vDeadTwice, vArchivedTwice, vCompletedAndDead,
	vLost, vCompletedNoOKRun, vUniqueKeyTwice, vEntityOverlap, vSupersededDone,
	vAwaitNotReturned, vAwaitMissing, vAwaitTwice, vAwaitUnasked, vAwaitWrongEnd, vPlainAtRest, vPayloadMismatch}

type auditEvent struct {
	tbl, op                string
	job                    int64
	oldState, newState     *string
	oldToken, newToken     *int64
	presented              *int64 // the lease token the write carried, when the writer's tracer recorded it
	sealed, marker         *bool  // a row version written: its payload an envelope; its text with a plaintext marker
	oldBy, newBy           *string
	oldExpires, newExpires *time.Time
	oldRunAt               *time.Time
	attempts, maxAttempts  *int
	reason                 *string
	queue                  string
	uniqueKey, entity      *string
	app                    string
	reaper                 bool
	txNow, at              time.Time
}

type leaseSpan struct {
	token       int64
	holder      string
	claimAt     time.Time
	maxExpires  time.Time
	end         time.Time // end of validity; zero while held
	ended       bool
	byHolder    bool
	reaped      bool
	handedBack  bool // the holder returned the job to ready (retry, snooze, hand-back)
	maxAttempts int
}

type runRow struct {
	id, job, token int64
	attempt        int
	worker         string
	start          time.Time
	end            *time.Time
	outcome        *string
	payload        []byte // what the handler got
}

// leftRow is a row still in skiplock.jobs when the checker runs.
type leftRow struct {
	id       int64
	state    string
	attempts int
}

// jobEnd is how a job ended, as the database finally records it (a row
// of jobs_done or jobs_dead) or as a Wait call reported it.
type jobEnd struct {
	id     int64
	state  string // completed, dead (or gone, in a report)
	result string // a completed job's result, JSON text; "" for none
	reason string // a dead job's reason
	err    string // a dead job's last error
}

// awaitCall is one Wait call as the test saw it: the jobs it awaited,
// every end it reported (in the order reported), and whether it returned
// without error (every job ended) before the test's deadline.
type awaitCall struct {
	caller   string
	ids      []int64
	reports  []jobEnd
	returned bool
	err      string // Wait's error when it did not return cleanly
}

// history is everything the checker reads: the audit trail (ordered by
// job, then time), the runs, the rows left in the hot table and, when the
// test awaited jobs, the ends the tables record.
type history struct {
	events []auditEvent
	runs   []runRow
	left   []leftRow
	ends   map[int64][]jobEnd
}

type violation struct {
	kind, msg string
}

func (v violation) String() string { return v.kind + ": " + v.msg }

// report is the checker's summary, for logs and for the tests' own
// assertions on what the faults did.
type report struct {
	Jobs, Completed, Dead, Claims, Runs, Reaped, Reruns int
	// Superseded counts the running leases a producer's supersede ended.
	Superseded int
	// AwaitCalls and AwaitReports count the Wait calls checked and the
	// ends they reported.
	AwaitCalls, AwaitReports int
	DeadReasons              map[string]int
	// Attempts is, per job, the claims that spent an attempt, counted from
	// the audit's ready→running transitions (not the library's column).
	Attempts   map[int64]int
	RunsPerJob map[int64]int
	// TokenWrites counts the holder writes whose presented token the audit
	// recorded: the per-token fencing check saw that many writes.
	TokenWrites int
	// SealedWrites and PlainWrites count the row versions of enqueued jobs
	// written with an envelope and with a plaintext marker; PayloadRuns the
	// runs whose payload was compared with what was enqueued.
	SealedWrites, PlainWrites, PayloadRuns int
	violations                             []violation
}

func (r *report) String() string {
	return fmt.Sprintf("jobs %d: completed %d, dead %d %v; claims %d, runs %d (jobs run more than once: %d), reaped leases %d, superseded %d; holder writes with a recorded token %d; row versions sealed %d, with plaintext %d; runs that saw the payload enqueued %d; awaited: %d ends reported to %d Wait calls; violations %d %v",
		r.Jobs, r.Completed, r.Dead, r.DeadReasons, r.Claims, r.Runs, r.Reruns, r.Reaped, r.Superseded, r.TokenWrites,
		r.SealedWrites, r.PlainWrites, r.PayloadRuns, r.AwaitReports, r.AwaitCalls, len(r.violations), r.kinds())
}

func (r *report) violate(kind, format string, args ...any) {
	r.violations = append(r.violations, violation{kind, fmt.Sprintf(format, args...)})
}

// kinds counts the violations by kind.
func (r *report) kinds() map[string]int {
	m := map[string]int{}
	for _, v := range r.violations {
		m[v.kind]++
	}
	return m
}

// checkOpts says what the test committed (and rolled back).
type checkOpts struct {
	committed  []int64
	rolledBack []int64
	archive    bool // completed jobs must be in jobs_done
	// supersede: producers enqueue with Supersede, so a delete of a running
	// row by a process that holds no lease and presents no token is a
	// supersede, not a stale write.
	supersede bool
	// awaits: the Wait calls the test made, each checked against the ends
	// the database records.
	awaits []*awaitCall
	// payloads: what the test enqueued, by job id (analyze takes it from
	// the env): each run of such a job must have seen it, and a sealed
	// one's rows must never hold it in plaintext.
	payloads map[int64]enqueuedPayload
}

// checkInvariants checks every invariant above and fails the test on any
// violation. Call it after the queue drained and the faults healed.
func checkInvariants(t *testing.T, e *env, o checkOpts) *report {
	t.Helper()
	r := analyze(t, e, o)
	t.Logf("checker: %s", r)
	for i, v := range r.violations {
		if i == 30 {
			t.Errorf("... and %d more violations", len(r.violations)-30)
			break
		}
		t.Errorf("invariant violated: %s", v)
	}
	return r
}

// analyze loads the histories of e's database and checks them.
func analyze(t *testing.T, e *env, o checkOpts) *report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var h history
	rows, err := e.pool.Query(ctx, "SELECT id, state, attempts FROM skiplock.jobs ORDER BY id")
	require.NoError(t, err)
	for rows.Next() {
		var l leftRow
		require.NoError(t, rows.Scan(&l.id, &l.state, &l.attempts))
		h.left = append(h.left, l)
	}
	require.NoError(t, rows.Err())
	h.events = loadAudit(t, ctx, e)
	h.runs = loadRuns(t, ctx, e)
	if o.awaits != nil {
		h.ends = loadEnds(t, ctx, e)
	}
	if o.payloads == nil {
		o.payloads = e.enqueuedPayloads()
	}
	return checkHistory(h, o, e.owns)
}

// interval is a stretch of time a job held something (a unique key, an
// entity's running slot).
type interval struct {
	job      int64
	from, to time.Time
}

// checker is the state of one checkHistory call.
type checker struct {
	r                     *report
	o                     checkOpts
	owns                  func(app, lockedBy string) bool
	committed, rolledBack map[int64]bool
	left                  map[int64]bool
	okRuns                map[[2]int64]bool
	runTokens             map[[2]int64]bool
	live                  map[string][]interval // queue + unique key -> when a job with it was in skiplock.jobs
	running               map[string][]interval // entity -> when a job of it was running
}

var far = time.Unix(math.MaxInt32, 0)

// checkHistory checks every invariant over h. It reads no database: the
// seeded histories of checker_seed_test.go go through exactly this code.
// owns reports whether the connection named app belongs to the process
// whose lease is lockedBy.
func checkHistory(h history, o checkOpts, owns func(app, lockedBy string) bool) *report {
	r := &report{DeadReasons: map[string]int{}, Attempts: map[int64]int{}, RunsPerJob: map[int64]int{}}
	c := &checker{r: r, o: o, owns: owns, committed: map[int64]bool{}, rolledBack: map[int64]bool{},
		left: map[int64]bool{}, okRuns: map[[2]int64]bool{}, runTokens: map[[2]int64]bool{},
		live: map[string][]interval{}, running: map[string][]interval{}}

	// Nothing left in the hot table: drained, nothing running.
	var left []string
	for _, l := range h.left {
		c.left[l.id] = true
		left = append(left, fmt.Sprintf("%d(%s, attempt %d)", l.id, l.state, l.attempts))
	}
	if len(left) > 0 {
		r.violate(vLeftBehind, "jobs left in the hot table after the drain: %s", strings.Join(left, ", "))
	}
	for _, id := range o.committed {
		c.committed[id] = true
	}
	for _, id := range o.rolledBack {
		c.rolledBack[id] = true
	}
	r.Jobs = len(c.committed)

	byJob := map[int64][]auditEvent{}
	var jobIDs []int64
	for _, ev := range h.events {
		if _, ok := byJob[ev.job]; !ok {
			jobIDs = append(jobIDs, ev.job)
		}
		byJob[ev.job] = append(byJob[ev.job], ev)
	}
	for _, run := range h.runs {
		c.runTokens[[2]int64{run.job, run.token}] = true
		if run.outcome != nil && *run.outcome == "ok" {
			c.okRuns[[2]int64{run.job, run.token}] = true
		}
	}
	leases := map[int64][]*leaseSpan{}
	for _, id := range jobIDs {
		leases[id] = c.jobHistory(id, byJob[id])
	}
	for id := range c.committed {
		if _, ok := byJob[id]; !ok {
			r.violate(vNeverInserted, "job %d was committed but never inserted (audit has no trace)", id)
		}
	}
	checkExclusive(r, vUniqueKeyTwice, "unique key", c.live)
	checkExclusive(r, vEntityOverlap, "entity", c.running)

	// Runs: only of committed jobs, one per claim, and executions under
	// different leases never overlap.
	runsByJob := map[int64][]runRow{}
	for _, run := range h.runs {
		runsByJob[run.job] = append(runsByJob[run.job], run)
	}
	r.Runs = len(h.runs)
	for id, rs := range runsByJob {
		r.RunsPerJob[id] = len(rs)
		if len(rs) > 1 {
			r.Reruns++
		}
		if c.rolledBack[id] {
			r.violate(vRolledBackRan, "job %d from a rolled-back transaction ran %d times", id, len(rs))
			continue
		}
		if !c.committed[id] {
			r.violate(vUncommittedRan, "job %d ran but the test never committed it", id)
			continue
		}
		spans := map[int64]*leaseSpan{}
		for _, l := range leases[id] {
			spans[l.token] = l
		}
		perToken := map[int64]int{}
		for _, run := range rs {
			perToken[run.token]++
			if spans[run.token] == nil {
				r.violate(vRunWithoutClaim, "job %d: run %d carries lease token %d, which no claim granted", id, run.id, run.token)
			}
		}
		for tok, n := range perToken {
			if n > 1 {
				r.violate(vTokenRanTwice, "job %d: lease token %d ran %d times (one claim, several executions)", id, tok, n)
			}
		}
		checkRunOverlap(r, id, rs, spans)
		checkRunPayloads(r, id, rs, o.payloads)
	}

	// Attempts, from the audit's claims: every claim spends one, except a
	// claim its holder handed back before any run of its lease started.
	for _, id := range jobIDs {
		if !c.committed[id] {
			continue
		}
		spent, maxAttempts := 0, 0
		for _, l := range leases[id] {
			maxAttempts = max(maxAttempts, l.maxAttempts)
			if l.handedBack && !c.runTokens[[2]int64{id, l.token}] {
				continue
			}
			spent++
		}
		if len(leases[id]) == 0 {
			continue
		}
		r.Attempts[id] = spent
		if spent > maxAttempts {
			r.violate(vClaimBeyondMax, "job %d: %d claims spent an attempt (%d claims in the audit), max_attempts is %d",
				id, spent, len(leases[id]), maxAttempts)
		}
	}
	for _, call := range o.awaits {
		checkAwait(r, call, h.ends)
	}
	return r
}

// checkAwait holds one Wait call to its promise: it returns once every job
// it awaited ended, with each job's end exactly once, and that end is the
// one the database records.
func checkAwait(r *report, call *awaitCall, ends map[int64][]jobEnd) {
	r.AwaitCalls++
	r.AwaitReports += len(call.reports)
	awaited := map[int64]bool{}
	for _, id := range call.ids {
		awaited[id] = true
	}
	reported := map[int64]int{}
	for _, got := range call.reports {
		reported[got.id]++
		if !awaited[got.id] {
			r.violate(vAwaitUnasked, "%s: reported job %d, which it did not await", call.caller, got.id)
			continue
		}
		if reported[got.id] == 2 {
			r.violate(vAwaitTwice, "%s: reported job %d more than once", call.caller, got.id)
		}
		recorded := ends[got.id]
		switch {
		case len(recorded) != 1:
			r.violate(vAwaitWrongEnd, "%s: reported job %d %s, the database records %d ends of it", call.caller, got.id, got, len(recorded))
		case !sameEnd(got, recorded[0]):
			r.violate(vAwaitWrongEnd, "%s: reported job %d %s, the database records %s", call.caller, got.id, got, recorded[0])
		}
	}
	if !call.returned {
		unreported := 0
		for id := range awaited {
			if reported[id] == 0 {
				unreported++
			}
		}
		r.violate(vAwaitNotReturned, "%s: Wait did not return (%s) with %d of its %d jobs unreported", call.caller, call.err, unreported, len(awaited))
		return
	}
	for _, id := range call.ids {
		if reported[id] == 0 {
			r.violate(vAwaitMissing, "%s: returned without reporting job %d", call.caller, id)
		}
	}
}

func (e jobEnd) String() string {
	if e.state == "dead" {
		return fmt.Sprintf("dead (%s: %q)", e.reason, e.err)
	}
	return fmt.Sprintf("%s (result %s)", e.state, e.result)
}

// sameEnd compares a reported end with a recorded one: the state, a
// completed job's result (as JSON values: jsonb re-spaces the text), a dead
// job's reason and error.
func sameEnd(got, want jobEnd) bool {
	if got.state != want.state || got.reason != want.reason || got.err != want.err {
		return false
	}
	if got.result == want.result {
		return true
	}
	var a, b any
	return got.result != "" && want.result != "" && json.Unmarshal([]byte(got.result), &a) == nil &&
		json.Unmarshal([]byte(want.result), &b) == nil && reflect.DeepEqual(a, b)
}

// jobHistory replays one job's audit events and returns its leases.
func (c *checker) jobHistory(id int64, evs []auditEvent) []*leaseSpan {
	r, o := c.r, c.o
	var spans []*leaseSpan
	var cur *leaseSpan
	dead, done := 0, 0
	var lastDelete *leaseSpan
	superseded := false
	var liveFrom, runFrom time.Time
	var liveKey, runKey string
	if !c.committed[id] {
		r.violate(vUncommittedInAudit, "job %d exists in the audit trail but the test did not commit it (rolled back: %v)", id, c.rolledBack[id])
	}
	endRunning := func(at time.Time) {
		if runKey != "" {
			c.running[runKey] = append(c.running[runKey], interval{id, runFrom, at})
			runKey = ""
		}
	}
	for _, ev := range evs {
		c.checkStoredPayload(id, ev)
		if ev.tbl == "jobs" {
			switch {
			case ev.op == "insert" && ev.uniqueKey != nil:
				liveFrom, liveKey = ev.at, ev.queue+"\x00"+*ev.uniqueKey
			case ev.op == "delete" && liveKey != "":
				c.live[liveKey] = append(c.live[liveKey], interval{id, liveFrom, ev.at})
				liveKey = ""
			}
			if ev.presented != nil && str(ev.oldState) != "running" && ev.op != "insert" {
				r.violate(vTokenOnIdleRow, "job %d: a %s carrying lease token %d by %q changed the row while it was %s",
					id, ev.op, *ev.presented, ev.app, str(ev.oldState))
			}
		}
		switch {
		case ev.tbl == "jobs_dead":
			dead++
			if ev.reason != nil {
				r.DeadReasons[*ev.reason]++
			}
		case strings.HasPrefix(ev.tbl, "jobs_done"): // a partition
			done++
		case ev.op == "insert":
		case ev.op == "update" && str(ev.oldState) == "ready" && str(ev.newState) == "running":
			r.Claims++
			if cur != nil && !cur.ended {
				r.violate(vClaimWhileHeld, "job %d claimed while lease %d was still held", id, cur.token)
			}
			if len(spans) > 0 {
				prev := spans[len(spans)-1]
				if prev.ended && ev.at.Before(prev.end) {
					r.violate(vClaimOverlapsLease, "job %d: claim at %s overlaps the previous lease %d (valid until %s)", id, ts(ev.at), prev.token, ts(prev.end))
				}
			}
			if ev.newToken == nil || ev.newExpires == nil || ev.newBy == nil {
				r.violate(vClaimWithoutLease, "job %d claimed without a full lease (token %v, holder %v, expiry %v)", id, ev.newToken, ev.newBy, ev.newExpires)
			}
			if ev.oldRunAt != nil && ev.txNow.Before(*ev.oldRunAt) {
				r.violate(vClaimBeforeRunAt, "job %d claimed at %s before its run_at %s", id, ts(ev.txNow), ts(*ev.oldRunAt))
			}
			cur = &leaseSpan{token: deref64(ev.newToken), holder: str(ev.newBy), claimAt: ev.at,
				maxAttempts: deref(ev.maxAttempts)}
			if ev.newExpires != nil {
				cur.maxExpires = *ev.newExpires
			}
			spans = append(spans, cur)
			if ev.entity != nil {
				runFrom, runKey = ev.at, *ev.entity
			}
		case str(ev.oldState) == "running":
			if cur == nil || ev.oldToken == nil || *ev.oldToken != cur.token {
				r.violate(vUnknownLease, "job %d: %s of a running row under lease %v, which the checker never saw claimed", id, ev.op, ev.oldToken)
				continue
			}
			if ev.presented != nil {
				r.TokenWrites++
				if *ev.presented != cur.token {
					r.violate(vStaleToken, "job %d: %s by %q carrying lease token %d accepted while the row held lease %d (a stale write under an older lease)",
						id, ev.op, ev.app, *ev.presented, cur.token)
				}
			}
			if ev.op == "update" && str(ev.newState) == "running" {
				if ev.newToken == nil || *ev.newToken != cur.token || str(ev.newBy) != cur.holder {
					r.violate(vLeaseChangedHands, "job %d: lease changed hands without a release (token %d -> %v, holder %q -> %q)",
						id, cur.token, ev.newToken, cur.holder, str(ev.newBy))
				}
				if ev.newExpires != nil && ev.oldExpires != nil && !ev.newExpires.Equal(*ev.oldExpires) {
					if !c.owns(ev.app, cur.holder) {
						r.violate(vStaleHeartbeat, "job %d: heartbeat by %q accepted for a lease held by %q", id, ev.app, cur.holder)
					}
					if ev.newExpires.After(cur.maxExpires) {
						cur.maxExpires = *ev.newExpires
					}
				}
				continue
			}
			// The lease ends: completion, retry, snooze, release or dead
			// letter by the holder, or the reaper.
			cur.ended = true
			endRunning(ev.at)
			if ev.reaper {
				r.Reaped++
				cur.reaped = true
				if ev.oldExpires == nil || !ev.oldExpires.Before(ev.txNow) {
					r.violate(vReapedValidLease, "job %d: the reaper took lease %d at %s, valid until %s", id, cur.token, ts(ev.txNow), tsp(ev.oldExpires))
				}
				cur.end = cur.maxExpires
			} else if o.supersede && ev.op == "delete" && ev.presented == nil && !c.owns(ev.app, cur.holder) {
				// A supersede: the producer moved the running row to
				// jobs_dead; the lease ends here, the holder's late writes
				// find no row.
				r.Superseded++
				superseded = true
				cur.end = ev.at
				lastDelete = nil
				continue
			} else {
				if !c.owns(ev.app, cur.holder) {
					r.violate(vStaleWrite, "job %d: %s by %q accepted for a lease held by %q (stale holder not fenced)", id, ev.op, ev.app, cur.holder)
				}
				cur.byHolder = true
				cur.handedBack = ev.op == "update" && str(ev.newState) == "ready"
				cur.end = ev.at
			}
			if ev.op == "delete" {
				lastDelete = cur
			}
		case ev.op == "delete":
			// A ready job deleted: only Cancel does that (to jobs_dead).
			lastDelete = nil
		}
	}
	if liveKey != "" {
		c.live[liveKey] = append(c.live[liveKey], interval{id, liveFrom, far})
	}
	endRunning(far)
	if !c.committed[id] {
		return spans
	}
	if dead > 1 {
		r.violate(vDeadTwice, "job %d is in jobs_dead %d times", id, dead)
	}
	if superseded && done > 0 {
		r.violate(vSupersededDone, "job %d completed after a supersede ended its lease", id)
	}
	if done > 1 {
		r.violate(vArchivedTwice, "job %d archived %d times", id, done)
	}
	switch {
	case dead > 0 && done > 0:
		r.violate(vCompletedAndDead, "job %d both completed and dead-lettered", id)
	case dead > 0:
		r.Dead++
	case o.archive && done > 0:
		r.Completed++
	case c.left[id]:
		// Reported as left behind.
	case o.archive:
		r.violate(vLost, "job %d lost: neither archived in jobs_done nor in jobs_dead", id)
	case lastDelete != nil && lastDelete.byHolder:
		r.Completed++
	default:
		r.violate(vLost, "job %d lost: not completed by a lease holder and not in jobs_dead", id)
	}
	if dead == 0 && lastDelete != nil {
		// Completed: the run of the completing lease must have succeeded.
		if !c.okRuns[[2]int64{id, lastDelete.token}] {
			r.violate(vCompletedNoOKRun, "job %d completed under lease %d without a successful run of that lease", id, lastDelete.token)
		}
	}
	return spans
}

// checkStoredPayload: a row version of a job the test enqueued sealed held
// an envelope and no plaintext marker.
func (c *checker) checkStoredPayload(id int64, ev auditEvent) {
	p, ok := c.o.payloads[id]
	if !ok || ev.sealed == nil || ev.marker == nil {
		return // not a job of enqueueTo's, or not a row version written (a delete)
	}
	if *ev.sealed {
		c.r.SealedWrites++
	}
	if *ev.marker {
		c.r.PlainWrites++
	}
	if p.sealed && (!*ev.sealed || *ev.marker) {
		c.r.violate(vPlainAtRest, "job %d: a row version (%s on %s by %q) was stored unsealed (envelope %v, plaintext marker in the row %v)",
			id, ev.op, ev.tbl, ev.app, *ev.sealed, *ev.marker)
	}
}

// checkRunPayloads: every run of a job the test enqueued got the payload
// enqueued (as JSON: the database may reorder an object's members). The
// message never shows a payload, only its size.
func checkRunPayloads(r *report, id int64, rs []runRow, payloads map[int64]enqueuedPayload) {
	p, ok := payloads[id]
	if !ok {
		return
	}
	var want any
	if err := json.Unmarshal(p.json, &want); err != nil {
		r.violate(vPayloadMismatch, "job %d: the payload enqueued does not decode: %v", id, err)
		return
	}
	for _, run := range rs {
		r.PayloadRuns++
		var got any
		if run.payload == nil || json.Unmarshal(run.payload, &got) != nil || !reflect.DeepEqual(got, want) {
			r.violate(vPayloadMismatch, "job %d: run %d got a payload of %d bytes that is not the one enqueued (%d bytes, sealed %v)",
				id, run.id, len(run.payload), len(p.json), p.sealed)
		}
	}
}

// checkExclusive reports, per key, two jobs whose intervals overlap.
func checkExclusive(r *report, kind, what string, byKey map[string][]interval) {
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ivs := byKey[k]
		sort.Slice(ivs, func(i, j int) bool { return ivs[i].from.Before(ivs[j].from) })
		for i := 1; i < len(ivs); i++ {
			for j := 0; j < i; j++ {
				a, b := ivs[j], ivs[i]
				if a.job != b.job && b.from.Before(a.to) {
					r.violate(kind, "%s %q: jobs %d (%s–%s) and %d (%s–%s) at once",
						what, strings.ReplaceAll(k, "\x00", "/"), a.job, ts(a.from), ts(a.to), b.job, ts(b.from), ts(b.to))
				}
			}
		}
	}
}

// checkRunOverlap: two executions of one job under different leases must
// not overlap while the earlier one was still entitled to run. An
// execution is entitled to run until it ends, but never past its lease's
// validity when the reaper took that lease (a stale holder the fence cuts
// off; its writes are checked above) or when its end was never recorded.
// So a holder that gives its lease up (a retry, a hand-back) while its
// execution goes on, and a new claim's execution starts meanwhile, is
// reported: two executions at once with no expired lease to excuse it.
// The one holder that gives its lease up by design before its handler
// returns is a signal wait (outcome "wait"): WaitSignal returns the job to
// ready in its own transaction, and the handler returns at once; only the
// harness's record of the run's end (endRun, a statement of its own) comes
// after, and a network fault can hold that record back by seconds while
// the signalled job runs elsewhere. Such a run ends with its lease.
func checkRunOverlap(r *report, id int64, rs []runRow, spans map[int64]*leaseSpan) {
	type iv struct {
		from, to time.Time
		token    int64
		run      int64
	}
	var ivs []iv
	for _, run := range rs {
		l := spans[run.token]
		if l == nil {
			continue
		}
		from := run.start
		if from.Before(l.claimAt) {
			r.violate(vRunBeforeClaim, "job %d: run %d started at %s, before its claim at %s", id, run.id, ts(from), ts(l.claimAt))
		}
		to := far
		if run.end != nil {
			to = *run.end
		}
		parkedByWait := run.outcome != nil && *run.outcome == "wait"
		if l.ended && (l.reaped || run.end == nil || parkedByWait) && l.end.Before(to) {
			to = l.end
		}
		if to.After(from) {
			ivs = append(ivs, iv{from, to, run.token, run.id})
		}
	}
	sort.Slice(ivs, func(i, j int) bool { return ivs[i].from.Before(ivs[j].from) })
	for i := 1; i < len(ivs); i++ {
		for j := 0; j < i; j++ {
			a, b := ivs[j], ivs[i]
			if a.token != b.token && b.from.Before(a.to) {
				r.violate(vRunOverlap, "job %d: runs %d and %d overlap under two leases (%s–%s and %s–%s)",
					id, a.run, b.run, ts(a.from), ts(a.to), ts(b.from), ts(b.to))
			}
		}
	}
}

func loadAudit(t *testing.T, ctx context.Context, e *env) []auditEvent {
	t.Helper()
	rows, err := e.pool.Query(ctx, `SELECT tbl, op, job_id, old_state, new_state, old_token, new_token,
		old_locked_by, new_locked_by, old_expires, new_expires, old_run_at, attempts, max_attempts,
		reason, queue, unique_key, entity, presented_token, sealed, marker, app, reaper, tx_now, at
		FROM public.audit ORDER BY job_id, at, seq`)
	require.NoError(t, err)
	defer rows.Close()
	var out []auditEvent
	for rows.Next() {
		var ev auditEvent
		require.NoError(t, rows.Scan(&ev.tbl, &ev.op, &ev.job, &ev.oldState, &ev.newState, &ev.oldToken, &ev.newToken,
			&ev.oldBy, &ev.newBy, &ev.oldExpires, &ev.newExpires, &ev.oldRunAt, &ev.attempts, &ev.maxAttempts,
			&ev.reason, &ev.queue, &ev.uniqueKey, &ev.entity, &ev.presented, &ev.sealed, &ev.marker, &ev.app, &ev.reaper, &ev.txNow, &ev.at))
		out = append(out, ev)
	}
	require.NoError(t, rows.Err())
	return out
}

// loadEnds reads how the database records each finished job's end: its
// rows in jobs_done (completed, with the result) and jobs_dead (dead, with
// the reason and last error).
func loadEnds(t *testing.T, ctx context.Context, e *env) map[int64][]jobEnd {
	t.Helper()
	rows, err := e.pool.Query(ctx, `SELECT id, 'completed', coalesce(result::text, ''), '', '' FROM skiplock.jobs_done
		UNION ALL SELECT id, 'dead', '', coalesce(reason, ''), coalesce(last_error, '') FROM skiplock.jobs_dead`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[int64][]jobEnd{}
	for rows.Next() {
		var end jobEnd
		require.NoError(t, rows.Scan(&end.id, &end.state, &end.result, &end.reason, &end.err))
		out[end.id] = append(out[end.id], end)
	}
	require.NoError(t, rows.Err())
	return out
}

func loadRuns(t *testing.T, ctx context.Context, e *env) []runRow {
	t.Helper()
	rows, err := e.pool.Query(ctx, `SELECT id, job_id, lease_token, attempt, worker, started_at, finished_at, outcome, payload::text
		FROM public.runs ORDER BY job_id, started_at`)
	require.NoError(t, err)
	defer rows.Close()
	var out []runRow
	for rows.Next() {
		var run runRow
		var payload *string
		require.NoError(t, rows.Scan(&run.id, &run.job, &run.token, &run.attempt, &run.worker, &run.start, &run.end, &run.outcome, &payload))
		if payload != nil {
			run.payload = []byte(*payload)
		}
		out = append(out, run)
	}
	require.NoError(t, rows.Err())
	return out
}

func str(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

func deref64(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

func ts(t time.Time) string { return t.Format("15:04:05.000000") }

func tsp(t *time.Time) string {
	if t == nil {
		return "NULL"
	}
	return ts(*t)
}
