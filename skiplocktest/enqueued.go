package skiplocktest

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/store"
)

// Match describes the job a test expects. Empty fields match anything.
type Match struct {
	// Kind is the job's kind.
	Kind string
	// Queue is the job's queue.
	Queue string
	// Args must be contained in the job's payload, with PostgreSQL's jsonb
	// containment (@>): every field given must be present with the same
	// value, and the payload may have more. Pass a map (or a struct with
	// omitempty tags) to check some fields only, or the struct the code under
	// test enqueues to check all of them. It must marshal to a JSON object;
	// json.RawMessage and []byte are taken as JSON text.
	Args any
	// Priority, when not nil, is the job's priority.
	Priority *int
	// Tenant, Entity and UniqueKey are the job's keys.
	Tenant, Entity, UniqueKey string
	// Scheduled, when not nil, says whether the job runs in the future
	// (true) or is due now (false), by the database clock.
	Scheduled *bool
}

// EnqueuedJob is a job found in flight (ready or running).
type EnqueuedJob struct {
	ID       int64
	Queue    string
	Kind     string
	State    string // "ready" or "running"
	Priority int
	// Attempt is the number of the job's latest attempt, as Job.Attempt
	// and JobRecord.Attempt count it: 0 before its first run.
	Attempt     int
	MaxAttempts int
	RunAt       time.Time
	Scheduled   bool // RunAt is in the future, by the database clock
	Tenant      string
	Entity      string
	UniqueKey   string
	Payload     json.RawMessage
}

// DecodeArgs decodes the job's payload into v.
func (j *EnqueuedJob) DecodeArgs(v any) error { return json.Unmarshal(j.Payload, v) }

// RequireEnqueued fails the test unless a job matching m is in flight in c's
// schema (committed, read through c's pool), and returns the first such job
// in enqueue order. The failure message lists the jobs of the same kind and
// what differs in each.
func RequireEnqueued(tb testing.TB, c *skiplock.Client, m Match) *EnqueuedJob {
	tb.Helper()
	return requireEnqueued(tb, c, c.Pool(), m)
}

// RequireEnqueuedTx is RequireEnqueued inside tx (a pgx transaction, or a *sql.Tx
// wrapped with skiplock.SQLTx), so it sees jobs enqueued in tx that are
// not committed yet.
func RequireEnqueuedTx(tb testing.TB, c *skiplock.Client, tx skiplock.Tx, m Match) *EnqueuedJob {
	tb.Helper()
	return requireEnqueued(tb, c, tx, m)
}

// RequireNotEnqueued fails the test if a job matching m is in flight in c's
// schema, listing the matching jobs.
func RequireNotEnqueued(tb testing.TB, c *skiplock.Client, m Match) {
	tb.Helper()
	requireNotEnqueued(tb, c, c.Pool(), m)
}

// RequireNotEnqueuedTx is RequireNotEnqueued inside tx (a pgx transaction, or a
// *sql.Tx wrapped with skiplock.SQLTx).
func RequireNotEnqueuedTx(tb testing.TB, c *skiplock.Client, tx skiplock.Tx, m Match) {
	tb.Helper()
	requireNotEnqueued(tb, c, tx, m)
}

// RequireEnqueuedMany fails the test unless the in-flight jobs of the kinds
// named in ms are exactly ms, one job per Match, in enqueue order (job id),
// and returns them. Jobs of other kinds are ignored; every Match must name a
// Kind.
func RequireEnqueuedMany(tb testing.TB, c *skiplock.Client, ms ...Match) []*EnqueuedJob {
	tb.Helper()
	if len(ms) == 0 {
		tb.Fatalf("skiplocktest: RequireEnqueuedMany: no Match given")
		return nil
	}
	kinds := map[string]bool{}
	for i, m := range ms {
		if m.Kind == "" {
			tb.Fatalf("skiplocktest: RequireEnqueuedMany: ms[%d] has no Kind", i)
			return nil
		}
		kinds[m.Kind] = true
	}
	var jobs []*EnqueuedJob
	for _, k := range sortedKeys(kinds) {
		js, err := query(tb.Context(), c, c.Pool(), Match{Kind: k}, nil)
		if err != nil {
			tb.Fatalf("skiplocktest: RequireEnqueuedMany: %v", err)
			return nil
		}
		for _, j := range js {
			jobs = append(jobs, j.job)
		}
	}
	sortJobs(jobs)
	var problems []string
	for i := range max(len(ms), len(jobs)) {
		switch {
		case i >= len(jobs):
			problems = append(problems, fmt.Sprintf("  [%d] want %s: missing", i, describe(ms[i])))
		case i >= len(ms):
			problems = append(problems, fmt.Sprintf("  [%d] unexpected %s", i, jobLine(jobs[i])))
		default:
			got, err := query(tb.Context(), c, c.Pool(), Match{Kind: jobs[i].Kind}, &ms[i])
			if err != nil {
				tb.Fatalf("skiplocktest: RequireEnqueuedMany: %v", err)
				return nil
			}
			for _, g := range got {
				if g.job.ID == jobs[i].ID {
					if diff := g.mismatch(ms[i]); len(diff) > 0 {
						problems = append(problems, fmt.Sprintf("  [%d] want %s, got %s: %s", i, describe(ms[i]), jobLine(jobs[i]), strings.Join(diff, "; ")))
					}
				}
			}
		}
	}
	if len(problems) > 0 {
		tb.Fatalf("skiplocktest: the enqueued jobs of kinds %s are not the expected %d (in enqueue order):\n%s",
			strings.Join(sortedKeys(kinds), ", "), len(ms), strings.Join(problems, "\n"))
		return nil
	}
	return jobs
}

func requireEnqueued(tb testing.TB, c *skiplock.Client, db skiplock.Tx, m Match) *EnqueuedJob {
	tb.Helper()
	candidates, err := query(tb.Context(), c, db, Match{Kind: m.Kind}, &m)
	if err != nil {
		tb.Fatalf("skiplocktest: RequireEnqueued: %v", err)
		return nil
	}
	var diffs []string
	for _, cand := range candidates {
		diff := cand.mismatch(m)
		if len(diff) == 0 {
			return cand.job
		}
		diffs = append(diffs, fmt.Sprintf("  %s: %s", jobLine(cand.job), strings.Join(diff, "; ")))
	}
	msg := fmt.Sprintf("skiplocktest: no job enqueued matching %s", describe(m))
	switch {
	case len(candidates) == 0 && m.Kind != "":
		msg += fmt.Sprintf("\n  no job of kind %q is enqueued%s", m.Kind, otherKinds(tb, c, db))
	case len(candidates) == 0:
		msg += "\n  no job is enqueued"
	default:
		what := "enqueued jobs"
		if m.Kind != "" {
			what += fmt.Sprintf(" of kind %q", m.Kind)
		}
		msg += fmt.Sprintf("\n  %d %s, none matching:\n%s", len(candidates), what, strings.Join(limit(diffs, 10), "\n"))
	}
	tb.Fatalf("%s", msg)
	return nil
}

func requireNotEnqueued(tb testing.TB, c *skiplock.Client, db skiplock.Tx, m Match) {
	tb.Helper()
	candidates, err := query(tb.Context(), c, db, Match{Kind: m.Kind}, &m)
	if err != nil {
		tb.Fatalf("skiplocktest: RequireNotEnqueued: %v", err)
		return
	}
	var found []string
	for _, cand := range candidates {
		if len(cand.mismatch(m)) == 0 {
			found = append(found, "  "+jobLine(cand.job))
		}
	}
	if len(found) > 0 {
		tb.Fatalf("skiplocktest: expected no job matching %s, found %d:\n%s", describe(m), len(found), strings.Join(limit(found, 10), "\n"))
	}
}

func limit(lines []string, n int) []string {
	if len(lines) <= n {
		return lines
	}
	return append(lines[:n:n], fmt.Sprintf("  … and %d more", len(lines)-n))
}

// candidate is one in-flight job with whether its payload contains the
// Match's Args (computed by PostgreSQL, so containment means exactly @>).
type candidate struct {
	job           *EnqueuedJob
	argsContained bool
}

func (c candidate) mismatch(m Match) []string {
	j := c.job
	var d []string
	if m.Kind != "" && j.Kind != m.Kind {
		d = append(d, fmt.Sprintf("kind is %q, want %q", j.Kind, m.Kind))
	}
	if m.Queue != "" && j.Queue != m.Queue {
		d = append(d, fmt.Sprintf("queue is %q, want %q", j.Queue, m.Queue))
	}
	if m.Args != nil && !c.argsContained {
		d = append(d, fmt.Sprintf("args do not contain %s", mustArgs(m.Args)))
	}
	if m.Priority != nil && j.Priority != *m.Priority {
		d = append(d, fmt.Sprintf("priority is %d, want %d", j.Priority, *m.Priority))
	}
	for _, f := range []struct{ name, got, want string }{
		{"tenant", j.Tenant, m.Tenant}, {"entity", j.Entity, m.Entity}, {"unique key", j.UniqueKey, m.UniqueKey},
	} {
		if f.want != "" && f.got != f.want {
			d = append(d, fmt.Sprintf("%s is %q, want %q", f.name, f.got, f.want))
		}
	}
	if m.Scheduled != nil && j.Scheduled != *m.Scheduled {
		if j.Scheduled {
			d = append(d, fmt.Sprintf("scheduled for %s, want due now", j.RunAt.UTC().Format(time.RFC3339)))
		} else {
			d = append(d, "due now, want scheduled in the future")
		}
	}
	return d
}

func describe(m Match) string {
	var parts []string
	add := func(k, v string) {
		if v != "" {
			parts = append(parts, fmt.Sprintf("%s=%q", k, v))
		}
	}
	add("kind", m.Kind)
	add("queue", m.Queue)
	if m.Args != nil {
		parts = append(parts, "args⊇"+string(mustArgs(m.Args)))
	}
	if m.Priority != nil {
		parts = append(parts, fmt.Sprintf("priority=%d", *m.Priority))
	}
	add("tenant", m.Tenant)
	add("entity", m.Entity)
	add("unique_key", m.UniqueKey)
	if m.Scheduled != nil {
		parts = append(parts, fmt.Sprintf("scheduled=%t", *m.Scheduled))
	}
	if len(parts) == 0 {
		return "{any job}"
	}
	return "{" + strings.Join(parts, " ") + "}"
}

func jobLine(j *EnqueuedJob) string {
	s := fmt.Sprintf("job %d kind=%q queue=%q state=%s priority=%d", j.ID, j.Kind, j.Queue, j.State, j.Priority)
	if j.Scheduled {
		s += " run_at=" + j.RunAt.UTC().Format(time.RFC3339)
	}
	for _, f := range []struct{ k, v string }{{"tenant", j.Tenant}, {"entity", j.Entity}, {"unique_key", j.UniqueKey}} {
		if f.v != "" {
			s += fmt.Sprintf(" %s=%q", f.k, f.v)
		}
	}
	return s + " args=" + string(j.Payload)
}

// otherKinds summarises what is enqueued instead, for a missing kind.
func otherKinds(tb testing.TB, c *skiplock.Client, db skiplock.Tx) string {
	all, err := query(tb.Context(), c, db, Match{}, nil)
	if err != nil || len(all) == 0 {
		return " (nothing is enqueued)"
	}
	n := map[string]int{}
	for _, a := range all {
		n[a.job.Kind]++
	}
	var parts []string
	for _, k := range sortedKeys(n) {
		parts = append(parts, fmt.Sprintf("%s×%d", k, n[k]))
	}
	return " (enqueued: " + strings.Join(parts, ", ") + ")"
}

// mustArgs renders Match.Args as JSON text; a value that is not a JSON
// object renders as its error, which never matches.
func mustArgs(v any) json.RawMessage {
	b, err := argsJSON(v)
	if err != nil {
		return json.RawMessage(fmt.Sprintf("%q", err.Error()))
	}
	return b
}

func argsJSON(v any) (json.RawMessage, error) {
	var b []byte
	switch a := v.(type) {
	case json.RawMessage:
		b = a
	case []byte:
		b = a
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			return nil, fmt.Errorf("Match.Args: %v", err)
		}
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil || obj == nil {
		return nil, fmt.Errorf("Match.Args must be a JSON object, got %s", b)
	}
	return b, nil
}

// query reads in-flight jobs of m.Kind and m.Queue through db (a pgx or
// database/sql handle); with args it also asks PostgreSQL whether each
// payload contains args.Args.
func query(ctx context.Context, c *skiplock.Client, db skiplock.Tx, m Match, args *Match) ([]candidate, error) {
	var contains *string // NULL: no Args to check
	if args != nil && args.Args != nil {
		b, err := argsJSON(args.Args)
		if err != nil {
			return nil, err
		}
		s := string(b)
		contains = &s
	}
	rows, err := store.New(c.Config().Schema).EnqueuedJobs(ctx, db, m.Kind, m.Queue, contains)
	if err != nil {
		return nil, fmt.Errorf("query jobs: %w", err)
	}
	out := make([]candidate, len(rows))
	for i, r := range rows {
		out[i] = candidate{argsContained: r.Contains, job: &EnqueuedJob{
			ID: r.ID, Queue: r.Queue, Kind: r.Kind, State: r.State, Priority: r.Priority, Attempt: r.Attempts,
			MaxAttempts: r.MaxAttempts, RunAt: r.RunAt, Scheduled: r.Scheduled, Tenant: deref(r.Tenant),
			Entity: deref(r.Entity), UniqueKey: deref(r.UniqueKey), Payload: json.RawMessage(r.Payload),
		}}
	}
	return out, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func sortJobs(jobs []*EnqueuedJob) {
	slices.SortFunc(jobs, func(a, b *EnqueuedJob) int { return cmp.Compare(a.ID, b.ID) })
}
