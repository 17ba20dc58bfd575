package worker

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/store"
)

// claimTest seeds n ready jobs and claims them for a Runner whose completer
// the test drives by hand; logs go to the returned buffer as JSON.
func claimTest(t *testing.T, n int) (*Runner, []*Job, *bytes.Buffer, *dbtest.DB) {
	t.Helper()
	db := dbtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `INSERT INTO skiplock.jobs (queue, kind, payload, run_at, max_attempts)
		SELECT 'q', 'k', jsonb_build_object('secret', 'PII-' || g), now() - interval '1 second', 3
		FROM generate_series(1, $1::int) AS g`, n)
	require.NoError(t, err)
	logs := &bytes.Buffer{}
	cfg := Config{Pool: db.Pool, Store: store.New("skiplock"), WorkerID: "w-test", Lease: time.Minute,
		Logger: slog.New(slog.NewJSONHandler(logs, nil))}
	res, err := cfg.Store.Claim(ctx, db.Pool, store.ClaimRequest{Queues: []string{"q"}, Batch: n, WorkerID: cfg.WorkerID, Lease: cfg.Lease})
	require.NoError(t, err)
	require.Len(t, res.Jobs, n)
	r := New(cfg)
	r.bgCtx = context.Background()
	return r, r.track(res.Jobs), logs, db
}

// The database refusing one job's outcome for its data (here error text
// that is not valid UTF-8, written past Decide's sanitizer, and a reason the
// dead-letter table's constraint refuses) costs exactly that job its text:
// every other outcome of the batch is written, the refused failures are
// written again with a safe text on their normal retry or dead-letter path,
// an outcome refused even then is left to the reaper, and each refusal is
// logged with the job and the SQLSTATE, never the payload. It returns at
// once: no retrying forever.
func TestFlushIsolatesRefusedOutcomes(t *testing.T) {
	t.Parallel()
	r, jobs, logs, db := claimTest(t, 6)
	ctx := context.Background()
	batch := []result{
		{job: jobs[0], out: Outcome{Kind: Complete}},
		{job: jobs[1], out: Outcome{Kind: Retry, Reason: "error", Error: "crash\x00dump"}},
		{job: jobs[2], out: Outcome{Kind: DeadLetter, Reason: "error", Error: "bad \xff\xfe bytes"}},
		{job: jobs[3], out: Outcome{Kind: Retry, Reason: "error", Error: "fine"}},
		{job: jobs[4], out: Outcome{Kind: DeadLetter, Reason: "no-such-reason", Error: "x"}},
		{job: jobs[5], out: Outcome{Kind: Complete}},
	}
	r.completer.flush(batch)

	type row struct {
		State, Error string
		Attempts     int
	}
	state := func(id int64) row {
		var rw row
		err := db.Pool.QueryRow(ctx, `SELECT state::text, coalesce(last_error, ''), attempts FROM skiplock.jobs WHERE id = $1
			UNION ALL SELECT 'dead:' || reason, coalesce(last_error, ''), attempts FROM skiplock.jobs_dead WHERE id = $1`, id).
			Scan(&rw.State, &rw.Error, &rw.Attempts)
		if err != nil {
			return row{State: "gone"}
		}
		return rw
	}
	require.Equal(t, row{State: "gone"}, state(jobs[0].ID))
	require.Equal(t, row{State: "gone"}, state(jobs[5].ID))
	require.Equal(t, row{"ready", "fine", 1}, state(jobs[3].ID))
	safe := func(code string) string {
		return "skiplock: the database refused this job's error text (SQLSTATE " + code + "); it was not stored"
	}
	require.Equal(t, row{"ready", safe("22021"), 1}, state(jobs[1].ID))
	require.Equal(t, row{"dead:error", safe("22021"), 1}, state(jobs[2].ID))
	// Refused whatever its text: nothing written; its lease expires and the
	// reaper returns it.
	require.Equal(t, row{"running", "", 1}, state(jobs[4].ID))

	st := r.Stats()
	require.Equal(t, int64(2), st.Completed)
	require.Equal(t, int64(3), st.Failed)
	require.Equal(t, int64(1), st.DeadLettered)
	require.Equal(t, 0, st.Running, "every job of the batch is untracked")

	out := logs.String()
	require.NotContains(t, out, "PII-")
	lines := map[string][]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		for _, msg := range []string{"writing it with a safe error text", "nothing written, the reaper returns the job"} {
			if strings.Contains(l, msg) {
				lines[msg] = append(lines[msg], l)
			}
		}
	}
	require.Len(t, lines["writing it with a safe error text"], 3, out)
	require.Len(t, lines["nothing written, the reaper returns the job"], 1, out)
	require.Contains(t, lines["nothing written, the reaper returns the job"][0], `"sqlstate":"23514"`)
	require.Contains(t, lines["nothing written, the reaper returns the job"][0], `"kind":"k"`)
	require.NotContains(t, out, "writing job outcomes failed; retrying", "a refusal is not retried")
	// The dead letter logs at error level with its reason and text; the
	// retries log their text.
	require.Contains(t, out, `"level":"ERROR","msg":"skiplock: job moved to the dead-letter table"`)
	require.Contains(t, out, `"error":"fine"`)
}

// writeIsolating stops at the first error that is not a refusal (the
// completer's write retries those itself; RunOne reports them), and splits
// only on refusals.
func TestWriteIsolatingPassesOtherErrors(t *testing.T) {
	jobs := []*Job{{ClaimedRow: store.ClaimedRow{ID: 1}}, {ClaimedRow: store.ClaimedRow{ID: 2}}, {ClaimedRow: store.ClaimedRow{ID: 3}}}
	batch := []result{{job: jobs[0]}, {job: jobs[1]}, {job: jobs[2]}}
	lost := errors.New("connection reset")
	calls := 0
	_, _, err := writeIsolating(batch, func([]result) (map[int64]bool, error) { calls++; return nil, lost }, nil)
	require.ErrorIs(t, err, lost)
	require.Equal(t, 1, calls)

	// Job 2 is refused alone; the first write of its halves that holds
	// only good jobs succeeds.
	var sizes []int
	held, unwritten, err := writeIsolating(batch, func(b []result) (map[int64]bool, error) {
		sizes = append(sizes, len(b))
		h := map[int64]bool{}
		for _, r := range b {
			if r.job.ID == 2 {
				return nil, &pgconn.PgError{Code: "23514"}
			}
			h[r.job.ID] = true
		}
		return h, nil
	}, nil)
	require.NoError(t, err)
	require.Equal(t, map[int64]bool{1: true, 3: true}, held)
	require.Equal(t, []int64{2}, unwritten)
	require.Equal(t, []int{3, 1, 2, 1, 1}, sizes)
}

// A retry written by the completer makes the job claimable at once, so it
// can be claimed again (by this process) before the completer untracks the
// attempt it wrote. Untracking that attempt must leave the new claim
// tracked; dropping it silently made the new attempt's executor skip the
// job, which then stayed running until its lease expired.
func TestUntrackKeepsANewerClaim(t *testing.T) {
	r := New(Config{})
	first := r.track([]Job{{ClaimedRow: store.ClaimedRow{ID: 7, LeaseToken: 1}}})[0]
	again := r.track([]Job{{ClaimedRow: store.ClaimedRow{ID: 7, LeaseToken: 2}}})[0]
	r.untrack([]*Job{first})
	require.Equal(t, 1, r.Stats().Running)
	r.mu.Lock()
	require.Same(t, again, r.jobs[7].job)
	r.mu.Unlock()
	r.untrack([]*Job{again})
	require.Equal(t, 0, r.Stats().Running)
}

// A batch that holds two outcomes of one job (the first attempt's write
// was held up past its lease, the reaper handed the job back, and this
// process claimed and ran it again) writes only the newest attempt's: the
// older one is settled as a lost lease, not as the newer one's result, and
// its token never reaches the fenced statement. Whichever order they came.
// An older attempt flushed alone, the newer one still running, is written
// as any other (the fault suite's seeded bug relies on it reaching the
// statement) and the fence refuses it.
func TestFlushSettlesASupersededAttemptAsLeaseLost(t *testing.T) {
	t.Parallel()
	for _, tc := range []string{"old first", "old last", "old alone"} {
		r, jobs, logs, db := claimTest(t, 1)
		ctx := context.Background()
		old := jobs[0]
		// The lease expires; the reaper hands the job back; claimed again.
		_, err := db.Pool.Exec(ctx, `UPDATE skiplock.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, old.ID)
		require.NoError(t, err)
		back, _, err := r.cfg.Store.Reap(ctx, db.Pool, 10)
		require.NoError(t, err)
		require.Equal(t, 1, back)
		again, err := r.cfg.Store.Claim(ctx, db.Pool, store.ClaimRequest{Queues: []string{"q"}, Batch: 1,
			WorkerID: r.cfg.WorkerID, Lease: time.Minute})
		require.NoError(t, err)
		require.Len(t, again.Jobs, 1)
		newer := r.track(again.Jobs)[0]
		require.Equal(t, old.ID, newer.ID)
		require.Greater(t, newer.LeaseToken, old.LeaseToken)

		batch := map[string][]result{
			"old first": {{job: old, out: Outcome{Kind: Complete}}, {job: newer, out: Outcome{Kind: Complete}}},
			"old last":  {{job: newer, out: Outcome{Kind: Complete}}, {job: old, out: Outcome{Kind: Complete}}},
			"old alone": {{job: old, out: Outcome{Kind: Complete}}},
		}[tc]
		r.completer.flush(batch)
		var left int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM skiplock.jobs WHERE id = $1 AND lease_token = $2`,
			old.ID, newer.LeaseToken).Scan(&left))
		st := r.Stats()
		require.Equal(t, int64(1), st.LeaseLost, "%s: the older attempt lost its lease", tc)
		require.Contains(t, logs.String(), "lease lost before the outcome was written", tc)
		if tc == "old alone" {
			require.Equal(t, 1, left, "the newer attempt still runs")
			require.Zero(t, st.Completed)
			require.Equal(t, 1, st.Running, "the newer attempt stays tracked")
			continue
		}
		require.Zero(t, left, "%s: the newer attempt's completion was written", tc)
		require.Equal(t, int64(1), st.Completed, "%s: one attempt completed, not two", tc)
		require.Equal(t, 0, st.Running)
	}
}
