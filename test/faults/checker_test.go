package faults

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The checker reads two histories the library cannot tamper with: the
// audit trail (triggers on skiplock's tables, in DB time) and the runs
// table (one row per execution, written by the handler itself before and
// after its work). From them it checks, after the queue drained:
//
//   - nothing lost: every committed job is completed (deleted by its lease
//     holder after a successful run, or archived in jobs_done exactly once)
//     or in jobs_dead exactly once, never both; nothing is left in jobs;
//   - nothing unexpected: no run of a job that was never committed;
//   - attempts: no claim beyond max_attempts, at most max_attempts runs per
//     job, one run per claim, and no claim before the job's run_at;
//   - fencing: every heartbeat and every completion, retry, release or
//     dead-lettering of a running job was written by the process holding
//     its lease (its connection's application_name), never by a stale one;
//   - the reaper only took leases that had expired (by the database clock);
//   - valid leases of a job never overlap, and neither do executions of a
//     job under two different leases while both leases were valid.
//
// A lease is valid from its claim until its holder gives it up (completes,
// retries, releases, dead-letters) or, otherwise, until its last expiry
// (as extended by heartbeats).

type auditEvent struct {
	tbl, op                string
	job                    int64
	oldState, newState     *string
	oldToken, newToken     *int64
	oldBy, newBy           *string
	oldExpires, newExpires *time.Time
	oldRunAt               *time.Time
	attempts, maxAttempts  *int
	reason                 *string
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
	attempt     int
	maxAttempts int
}

type runRow struct {
	id, job, token int64
	attempt        int
	worker         string
	start          time.Time
	end            *time.Time
	outcome        *string
}

// report is the checker's summary, for logs and for the tests' own
// assertions on what the faults did.
type report struct {
	Jobs, Completed, Dead, Claims, Runs, Reaped, Reruns int
	DeadReasons                                         map[string]int
	Attempts                                            map[int64]int // final attempt count per job (claims)
	RunsPerJob                                          map[int64]int
	violations                                          []string
}

func (r *report) String() string {
	return fmt.Sprintf("jobs %d: completed %d, dead %d %v; claims %d, runs %d (jobs run more than once: %d), reaped leases %d; violations %d",
		r.Jobs, r.Completed, r.Dead, r.DeadReasons, r.Claims, r.Runs, r.Reruns, r.Reaped, len(r.violations))
}

func (r *report) violate(format string, args ...any) {
	r.violations = append(r.violations, fmt.Sprintf(format, args...))
}

// checkOpts says what the test committed (and rolled back).
type checkOpts struct {
	committed  []int64
	rolledBack []int64
	archive    bool // completed jobs must be in jobs_done
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

func analyze(t *testing.T, e *env, o checkOpts) *report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := &report{DeadReasons: map[string]int{}, Attempts: map[int64]int{}, RunsPerJob: map[int64]int{}}

	// Nothing left in the hot table: drained, nothing running.
	var left []string
	rows, err := e.pool.Query(ctx, "SELECT id, state, attempts FROM skiplock.jobs ORDER BY id")
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		var state string
		var attempts int
		require.NoError(t, rows.Scan(&id, &state, &attempts))
		left = append(left, fmt.Sprintf("%d(%s, attempt %d)", id, state, attempts))
	}
	require.NoError(t, rows.Err())
	if len(left) > 0 {
		r.violate("jobs left in the hot table after the drain: %s", strings.Join(left, ", "))
	}

	events := loadAudit(t, ctx, e)
	runs := loadRuns(t, ctx, e)

	committed := map[int64]bool{}
	for _, id := range o.committed {
		committed[id] = true
	}
	rolledBack := map[int64]bool{}
	for _, id := range o.rolledBack {
		rolledBack[id] = true
	}
	r.Jobs = len(committed)

	byJob := map[int64][]auditEvent{}
	var jobIDs []int64
	for _, ev := range events {
		if _, ok := byJob[ev.job]; !ok {
			jobIDs = append(jobIDs, ev.job)
		}
		byJob[ev.job] = append(byJob[ev.job], ev)
	}
	okRuns := map[[2]int64]bool{}
	for _, run := range runs {
		if run.outcome != nil && *run.outcome == "ok" {
			okRuns[[2]int64{run.job, run.token}] = true
		}
	}
	leases := map[int64][]*leaseSpan{}
	for _, id := range jobIDs {
		leases[id] = checkJobHistory(e, r, id, byJob[id], committed, rolledBack, okRuns, o)
	}
	for id := range committed {
		if _, ok := byJob[id]; !ok {
			r.violate("job %d was committed but never inserted (audit has no trace)", id)
		}
	}

	// Runs: only of committed jobs, one per claim, within max_attempts, and
	// a completed job's final claim ran to success.
	runsByJob := map[int64][]runRow{}
	for _, run := range runs {
		runsByJob[run.job] = append(runsByJob[run.job], run)
	}
	r.Runs = len(runs)
	for id, rs := range runsByJob {
		r.RunsPerJob[id] = len(rs)
		if len(rs) > 1 {
			r.Reruns++
		}
		if rolledBack[id] {
			r.violate("job %d from a rolled-back transaction ran %d times", id, len(rs))
			continue
		}
		if !committed[id] {
			r.violate("job %d ran but the test never committed it", id)
			continue
		}
		spans := map[int64]*leaseSpan{}
		maxAttempts := 0
		for _, l := range leases[id] {
			spans[l.token] = l
			maxAttempts = max(maxAttempts, l.maxAttempts)
		}
		if len(rs) > maxAttempts {
			r.violate("job %d ran %d times, max_attempts is %d", id, len(rs), maxAttempts)
		}
		perToken := map[int64]int{}
		for _, run := range rs {
			perToken[run.token]++
			if spans[run.token] == nil {
				r.violate("job %d: run %d carries lease token %d, which no claim granted", id, run.id, run.token)
			}
		}
		for tok, n := range perToken {
			if n > 1 {
				r.violate("job %d: lease token %d ran %d times (one claim, several executions)", id, tok, n)
			}
		}
		checkRunOverlap(r, id, rs, spans)
	}
	return r
}

// checkJobHistory replays one job's audit events and returns its leases.
func checkJobHistory(e *env, r *report, id int64, evs []auditEvent, committed, rolledBack map[int64]bool,
	okRuns map[[2]int64]bool, o checkOpts) []*leaseSpan {
	var spans []*leaseSpan
	var cur *leaseSpan
	dead, done := 0, 0
	var lastDelete *leaseSpan
	if !committed[id] {
		r.violate("job %d exists in the audit trail but the test did not commit it (rolled back: %v)", id, rolledBack[id])
	}
	for _, ev := range evs {
		switch {
		case ev.tbl == "jobs_dead":
			dead++
			if ev.reason != nil {
				r.DeadReasons[*ev.reason]++
			}
			if ev.attempts != nil && ev.maxAttempts != nil && *ev.attempts > *ev.maxAttempts {
				r.violate("job %d dead-lettered with attempts %d > max_attempts %d", id, *ev.attempts, *ev.maxAttempts)
			}
		case strings.HasPrefix(ev.tbl, "jobs_done"): // a partition
			done++
		case ev.op == "insert":
		case ev.op == "update" && str(ev.oldState) == "ready" && str(ev.newState) == "running":
			r.Claims++
			if cur != nil && !cur.ended {
				r.violate("job %d claimed while lease %d was still held", id, cur.token)
			}
			if len(spans) > 0 {
				prev := spans[len(spans)-1]
				if ev.at.Before(prev.end) {
					r.violate("job %d: claim at %s overlaps the previous lease (valid until %s)", id, ts(ev.at), ts(prev.end))
				}
			}
			if ev.newToken == nil || ev.newExpires == nil || ev.newBy == nil {
				r.violate("job %d claimed without a full lease", id)
				continue
			}
			a, m := deref(ev.attempts), deref(ev.maxAttempts)
			if a > m {
				r.violate("job %d claimed for attempt %d > max_attempts %d", id, a, m)
			}
			if ev.oldRunAt != nil && ev.txNow.Before(*ev.oldRunAt) {
				r.violate("job %d claimed at %s before its run_at %s", id, ts(ev.txNow), ts(*ev.oldRunAt))
			}
			r.Attempts[id] = a
			cur = &leaseSpan{token: *ev.newToken, holder: *ev.newBy, claimAt: ev.at, maxExpires: *ev.newExpires,
				attempt: a, maxAttempts: m}
			spans = append(spans, cur)
		case str(ev.oldState) == "running":
			if cur == nil || ev.oldToken == nil || *ev.oldToken != cur.token {
				r.violate("job %d: write to a running row whose lease the checker never saw claimed", id)
				continue
			}
			if ev.op == "update" && str(ev.newState) == "running" {
				if ev.newToken == nil || *ev.newToken != cur.token || str(ev.newBy) != cur.holder {
					r.violate("job %d: lease changed hands without a release (token %d -> %v)", id, cur.token, ev.newToken)
				}
				if ev.newExpires != nil && ev.oldExpires != nil && !ev.newExpires.Equal(*ev.oldExpires) {
					if !e.owns(ev.app, cur.holder) {
						r.violate("job %d: heartbeat by %q accepted for a lease held by %q", id, ev.app, cur.holder)
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
			if ev.reaper {
				r.Reaped++
				if ev.oldExpires == nil || !ev.oldExpires.Before(ev.txNow) {
					r.violate("job %d: the reaper took lease %d at %s, valid until %s", id, cur.token, ts(ev.txNow), tsp(ev.oldExpires))
				}
				cur.end = cur.maxExpires
			} else {
				if !e.owns(ev.app, cur.holder) {
					r.violate("job %d: %s by %q accepted for a lease held by %q (stale holder not fenced)", id, ev.op, ev.app, cur.holder)
				}
				cur.byHolder = true
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
	if !committed[id] {
		return spans
	}
	if dead > 1 {
		r.violate("job %d is in jobs_dead %d times", id, dead)
	}
	if done > 1 {
		r.violate("job %d archived %d times", id, done)
	}
	switch {
	case dead > 0 && done > 0:
		r.violate("job %d both completed and dead-lettered", id)
	case dead == 1:
		r.Dead++
	case o.archive && done == 1:
		r.Completed++
	case o.archive:
		r.violate("job %d lost: neither archived in jobs_done nor in jobs_dead", id)
	case lastDelete != nil && lastDelete.byHolder:
		r.Completed++
	default:
		r.violate("job %d lost: not completed by a lease holder and not in jobs_dead", id)
	}
	if dead == 0 && lastDelete != nil {
		// Completed: the run of the completing lease must have succeeded.
		if !okRuns[[2]int64{id, lastDelete.token}] {
			r.violate("job %d completed under lease %d without a successful run of that lease", id, lastDelete.token)
		}
	}
	return spans
}

// checkRunOverlap: two executions of one job under different leases must
// not overlap while both leases were valid.
func checkRunOverlap(r *report, id int64, rs []runRow, spans map[int64]*leaseSpan) {
	type iv struct {
		from, to time.Time
		token    int64
		run      int64
	}
	far := time.Unix(math.MaxInt32, 0)
	var ivs []iv
	for _, run := range rs {
		l := spans[run.token]
		if l == nil {
			continue
		}
		from := run.start
		if from.Before(l.claimAt) {
			r.violate("job %d: run %d started at %s, before its claim at %s", id, run.id, ts(from), ts(l.claimAt))
		}
		to := far
		if run.end != nil {
			to = *run.end
		}
		validTo := far
		if l.ended {
			validTo = l.end
		}
		if validTo.Before(to) {
			to = validTo
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
				r.violate("job %d: runs %d and %d overlap under two valid leases (%s–%s and %s–%s)",
					id, a.run, b.run, ts(a.from), ts(a.to), ts(b.from), ts(b.to))
			}
		}
	}
}

func loadAudit(t *testing.T, ctx context.Context, e *env) []auditEvent {
	t.Helper()
	rows, err := e.pool.Query(ctx, `SELECT tbl, op, job_id, old_state, new_state, old_token, new_token,
		old_locked_by, new_locked_by, old_expires, new_expires, old_run_at, attempts, max_attempts,
		reason, app, reaper, tx_now, at FROM public.audit ORDER BY job_id, at, seq`)
	require.NoError(t, err)
	defer rows.Close()
	var out []auditEvent
	for rows.Next() {
		var ev auditEvent
		require.NoError(t, rows.Scan(&ev.tbl, &ev.op, &ev.job, &ev.oldState, &ev.newState, &ev.oldToken, &ev.newToken,
			&ev.oldBy, &ev.newBy, &ev.oldExpires, &ev.newExpires, &ev.oldRunAt, &ev.attempts, &ev.maxAttempts,
			&ev.reason, &ev.app, &ev.reaper, &ev.txNow, &ev.at))
		out = append(out, ev)
	}
	require.NoError(t, rows.Err())
	return out
}

func loadRuns(t *testing.T, ctx context.Context, e *env) []runRow {
	t.Helper()
	rows, err := e.pool.Query(ctx, `SELECT id, job_id, lease_token, attempt, worker, started_at, finished_at, outcome
		FROM public.runs ORDER BY job_id, started_at`)
	require.NoError(t, err)
	defer rows.Close()
	var out []runRow
	for rows.Next() {
		var run runRow
		require.NoError(t, rows.Scan(&run.id, &run.job, &run.token, &run.attempt, &run.worker, &run.start, &run.end, &run.outcome))
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

func ts(t time.Time) string { return t.Format("15:04:05.000000") }

func tsp(t *time.Time) string {
	if t == nil {
		return "NULL"
	}
	return ts(*t)
}
