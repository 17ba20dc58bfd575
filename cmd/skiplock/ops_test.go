package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/health"
)

const opsSecret = "pii-secret-value"

func opsExec(t *testing.T, db *dbtest.DB, sql string, args ...any) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), sql, args...)
	require.NoError(t, err)
}

func opsCount(t *testing.T, db *dbtest.DB, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.Pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// opsReady inserts n ready jobs whose run_at is offset from now.
func opsReady(t *testing.T, db *dbtest.DB, queue string, n int, offset time.Duration) {
	t.Helper()
	opsExec(t, db, `INSERT INTO skiplock.jobs (queue, kind, run_at, payload)
		SELECT $1, 'k', now() + $2::bigint * interval '1 microsecond', jsonb_build_object('secret', $3::text)
		FROM generate_series(1, $4)`, queue, offset.Microseconds(), opsSecret, n)
}

// opsRunning inserts n running jobs with a live lease.
func opsRunning(t *testing.T, db *dbtest.DB, queue string, n int) {
	t.Helper()
	opsExec(t, db, `INSERT INTO skiplock.jobs
		(queue, kind, state, attempts, locked_by, lease_token, lease_expires_at, attempted_at, payload)
		SELECT $1, 'k', 'running', 1, 'host:1:abcd', g, now() + interval '1 minute', now() - interval '10 seconds',
		       jsonb_build_object('secret', $2::text)
		FROM generate_series(1, $3) AS g`, queue, opsSecret, n)
}

// opsDead inserts n dead letters of kind dead deadAgo ago and returns their ids.
func opsDead(t *testing.T, db *dbtest.DB, queue, kind string, n int, deadAgo time.Duration, errf func(i int) string) []int64 {
	t.Helper()
	var ids []int64
	for i := 0; i < n; i++ {
		var id int64
		require.NoError(t, db.Pool.QueryRow(context.Background(), `INSERT INTO skiplock.jobs_dead
			(id, priority, attempts, max_attempts, run_at, created_at, dead_at, queue, kind, reason, last_error, payload)
			VALUES ((SELECT coalesce(max(id), 5000000) + 1 FROM skiplock.jobs_dead), 0, 3, 3, now() - interval '3 days',
			        now() - interval '3 days', now() - $1::bigint * interval '1 microsecond', $2, $3, 'error', $4,
			        jsonb_build_object('secret', $5::text))
			RETURNING id`, deadAgo.Microseconds(), queue, kind, errf(i), opsSecret).Scan(&id))
		ids = append(ids, id)
	}
	return ids
}

func decodeJSON(t *testing.T, out string, v any) {
	t.Helper()
	require.NoError(t, json.Unmarshal([]byte(out), v), out)
}

func TestStatsCLI(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	code, out, stderr := runCLI(t, "stats", "--database-url", db.URL, "--json")
	require.Equal(t, 0, code, stderr)
	require.JSONEq(t, `{"queues":[],"unhandled_kinds":[],"limits":[]}`, out, "an empty installation prints empty lists, not null")

	opsReady(t, db, "mail", 3, -90*time.Second)
	opsReady(t, db, "mail", 2, time.Hour)
	opsRunning(t, db, "mail", 4)
	opsReady(t, db, "reports", 1, -time.Second)
	opsDead(t, db, "reports", "build", 2, time.Minute, func(int) string { return "boom" })

	code, out, stderr = runCLI(t, "stats", "--database-url", db.URL, "--json")
	require.Equal(t, 0, code, stderr)
	require.NotContains(t, out, opsSecret)
	var raw map[string][]map[string]any
	decodeJSON(t, out, &raw)
	require.Len(t, raw["queues"], 2)
	for _, k := range []string{"queue", "ready", "scheduled", "running", "dead", "oldest_ready_age_seconds"} {
		require.Contains(t, raw["queues"][0], k, "PRODUCT §2 field")
	}
	var got statsOut
	decodeJSON(t, out, &got)
	mail, reports := got.Queues[0], got.Queues[1]
	require.Equal(t, "mail", mail.Queue)
	require.Equal(t, [4]int64{3, 2, 4, 0}, [4]int64{mail.Ready, mail.Scheduled, mail.Running, mail.Dead})
	require.InDelta(t, 90, mail.OldestReadyAgeSeconds, 10)
	require.Equal(t, "reports", reports.Queue)
	require.Equal(t, [4]int64{1, 0, 0, 2}, [4]int64{reports.Ready, reports.Scheduled, reports.Running, reports.Dead})
	// No worker is live, so no due kind is handled: stats names them.
	require.Equal(t, []health.UnhandledKind{{Queue: "mail", Kind: "k", Ready: 3}, {Queue: "reports", Kind: "k", Ready: 1}},
		zeroAges(got.UnhandledKinds))

	code, out, stderr = runCLI(t, "stats", "--database-url", db.URL)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, `warning: no live worker handles kind "k" in queue mail: 3 job(s) ready`)
	require.Contains(t, out, "QUEUE")
	require.Contains(t, out, "mail")
	require.Contains(t, out, "1m3") // 90s of lag, printed for people

	code, _, stderr = runCLI(t, "stats", "--database-url", db.URL, "--nope")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--nope")
	code, _, stderr = runCLI(t, "stats", "--database-url", db.URL, "extra")
	require.Equal(t, 2, code, stderr)
}

func zeroAges(us []health.UnhandledKind) []health.UnhandledKind {
	for i := range us {
		us[i].OldestReadyAgeSeconds = 0
	}
	return us
}

func doctorJSON(t *testing.T, db *dbtest.DB) (int, doctorOut, map[string]health.Check) {
	t.Helper()
	code, out, stderr := runCLI(t, "doctor", "--database-url", db.URL, "--json")
	require.Contains(t, []int{0, 3}, code, stderr)
	var d doctorOut
	decodeJSON(t, out, &d)
	by := map[string]health.Check{}
	for _, c := range d.Checks {
		by[c.Name] = c
	}
	require.Equal(t, d.OK, code == 0, "exit 3 exactly when a check fails")
	require.Equal(t, !d.OK, len(d.Failed) > 0)
	if code == 3 {
		require.Contains(t, stderr, "check(s) failed")
	}
	return code, d, by
}

// serverWideFailures are the doctor's failures that the test server makes
// true of every database on it, read from the server rather than assumed:
// table_settings when it runs with autovacuum = off (PostgreSQL as some
// images leave it), and xmin_horizon when a session of another database
// (another test) holds the horizon back. A test that expects a healthy
// database to pass must allow these and nothing else.
func serverWideFailures(t *testing.T, db *dbtest.DB, checks []health.Check) []string {
	t.Helper()
	var autovacuum, trackCounts string
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		"SELECT current_setting('autovacuum'), current_setting('track_counts')").Scan(&autovacuum, &trackCounts))
	var out []string
	for _, c := range checks {
		switch {
		case c.Name == "table_settings" && (autovacuum == "off" || trackCounts == "off"):
			require.Equal(t, health.StatusFail, c.Status, "the doctor must report the server's autovacuum = off: %s", c.Figure)
			out = append(out, c.Name)
		case c.Name == "xmin_horizon" && c.Status == health.StatusFail && c.Pin != nil && c.Pin.Holder != nil && c.Pin.Holder.OtherDatabase:
			out = append(out, c.Name)
		}
	}
	return out
}

func TestDoctorCLI(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	opsReady(t, db, "default", 5, 0)
	_, d, by := doctorJSON(t, db)
	require.Len(t, d.Checks, 14)
	require.Equal(t, health.StatusOK, by["fenced_writes"].Status, by["fenced_writes"].Figure)
	require.Equal(t, health.StatusOK, by["schema"].Status)
	require.Equal(t, health.StatusWarn, by["unhandled_kinds"].Status)
	require.Contains(t, by["unhandled_kinds"].Figure, `no live worker handles kind "k" in queue default: 5 ready`)
	require.Equal(t, health.StatusOK, by["claim_index"].Status, by["claim_index"].Figure)
	require.NotContains(t, d.Failed, "claim_index")

	// Break the claim path on purpose: the doctor fails with exit 3 and
	// prints the fix.
	opsExec(t, db, `DROP INDEX skiplock.jobs_ready`)
	code, d, by := doctorJSON(t, db)
	require.Equal(t, 3, code)
	require.False(t, d.OK)
	require.Contains(t, d.Failed, "claim_index")
	require.Equal(t, health.StatusFail, by["claim_index"].Status)
	require.Contains(t, by["claim_index"].Fix, "CREATE INDEX jobs_ready ON")

	code, out, stderr := runCLI(t, "doctor", "--database-url", db.URL)
	require.Equal(t, 3, code)
	require.Contains(t, out, "[FAIL] claim_index: ")
	require.Contains(t, out, "fix: recreate it")
	require.Contains(t, out, "check(s):")
	require.Contains(t, stderr, "claim_index")
	require.NotContains(t, out, opsSecret)

	// Reset the per-table autovacuum settings, as a careless migration might.
	opsExec(t, db, `ALTER TABLE skiplock.jobs_keyed RESET (autovacuum_vacuum_scale_factor)`)
	_, _, by = doctorJSON(t, db)
	require.Equal(t, health.StatusFail, by["table_settings"].Status)
	require.Contains(t, by["table_settings"].Figure, "autovacuum_vacuum_scale_factor")
	require.Contains(t, by["table_settings"].Fix, "SET (autovacuum_vacuum_scale_factor = 0.02)")
	require.Contains(t, by["table_settings"].Fix, "find the migration that reset them")

	code, _, stderr = runCLI(t, "doctor", "--database-url", db.URL, "--lag-fail", "-1s")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--lag-fail")
	code, _, stderr = runCLI(t, "doctor", "--database-url", db.URL, "--xact-fail", "soon")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--xact-fail")
}

func TestDLQListCLI(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	syncIDs := opsDead(t, db, "q", "sync", 5, time.Hour, func(i int) string {
		return fmt.Sprintf("carrier %d: timeout after %dms\nstack", 1000+i, 30000+i)
	})
	opsDead(t, db, "q", "mail", 2, time.Hour, func(int) string { return "smtp 550 mailbox full" })

	code, out, stderr := runCLI(t, "dlq", "list", "--database-url", db.URL, "--json")
	require.Equal(t, 0, code, stderr)
	require.NotContains(t, out, opsSecret, "payloads are never printed")
	var got dlqListOut
	decodeJSON(t, out, &got)
	require.Equal(t, int64(7), got.Size.Total)
	require.Equal(t, int64(7), got.Size.Last24h)
	require.Len(t, got.Groups, 2)
	require.Equal(t, "sync", got.Groups[0].Kind)
	require.Equal(t, "carrier <n>: timeout after <n>ms", got.Groups[0].Signature)
	require.Equal(t, int64(5), got.Groups[0].Count)
	require.Equal(t, syncIDs[4], got.Groups[0].SampleID)
	require.False(t, got.Groups[0].First.IsZero())

	code, out, stderr = runCLI(t, "dlq", "list", "--database-url", db.URL, "--kind", "mail")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "7 dead letter(s)")
	require.Contains(t, out, "smtp <n> mailbox full")
	require.NotContains(t, out, "carrier")
	require.NotContains(t, out, opsSecret)

	code, _, stderr = runCLI(t, "dlq", "list", "--database-url", db.URL, "--limit", "0")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--limit")
}

func TestDLQReplayCLI(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	syncIDs := opsDead(t, db, "q", "sync", 5, time.Hour, func(i int) string { return fmt.Sprintf("carrier %d down", i) })
	mailIDs := opsDead(t, db, "q", "mail", 3, time.Hour, func(int) string { return "smtp 550" })
	dead := func() int64 { return opsCount(t, db, `SELECT count(*) FROM skiplock.jobs_dead`) }
	jobs := func() int64 { return opsCount(t, db, `SELECT count(*) FROM skiplock.jobs`) }

	// Without --yes: a dry run prints what it would do, exits 0, changes nothing.
	code, out, stderr := runCLI(t, "dlq", "replay", "--database-url", db.URL, "--kind", "sync")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "would replay 5 dead letter(s)")
	require.Contains(t, out, "carrier <n> down")
	require.Contains(t, stderr, "--yes")
	require.NotContains(t, out+stderr, opsSecret)
	code, out, _ = runCLI(t, "dlq", "replay", "--database-url", db.URL, "--signature", "carrier 77 down", "--json")
	require.Equal(t, 0, code)
	var pv dlqPreviewOut
	decodeJSON(t, out, &pv)
	require.True(t, pv.DryRun)
	require.Equal(t, int64(5), pv.Count)
	require.Len(t, pv.Groups, 1, "a raw error is normalised to its signature")
	require.Equal(t, int64(8), dead())
	require.Equal(t, int64(0), jobs())

	bad := []struct {
		args []string
		flag string
	}{
		{[]string{}, "--kind"},
		{[]string{"--kind", "sync", "--rate", "0", "--yes"}, "--rate"},
		{[]string{"--kind", "sync", "--rate", "fast", "--yes"}, "--rate"},
		{[]string{"--kind", "sync", "--limit", "-1", "--yes"}, "--limit"},
		{[]string{"--id", "abc", "--yes"}, "--id"},
		{[]string{"--id", "-4", "--yes"}, "--id"},
		{[]string{"--kind", "sync", "--older-than", "1h", "--yes"}, "--older-than"}, // purge only
	}
	for _, b := range bad {
		args := append([]string{"dlq", "replay", "--database-url", db.URL}, b.args...)
		code, _, stderr := runCLI(t, args...)
		require.Equal(t, 2, code, "%v: %s", b.args, stderr)
		require.Contains(t, stderr, b.flag, b.args)
	}
	require.Equal(t, int64(8), dead(), "bad flags changed nothing")
	require.Equal(t, int64(0), jobs())

	code, out, stderr = runCLI(t, "dlq", "replay", "--database-url", db.URL, "--kind", "sync", "--rate", "1000", "--yes", "--json")
	require.Equal(t, 0, code, stderr)
	require.JSONEq(t, `{"replayed":5,"matched":5}`, out)
	require.Equal(t, int64(3), dead())
	require.Equal(t, int64(5), opsCount(t, db, `SELECT count(*) FROM skiplock.jobs WHERE kind = 'sync' AND state = 'ready' AND attempts = 0`))
	require.Equal(t, int64(0), opsCount(t, db, `SELECT count(*) FROM skiplock.jobs_dead WHERE id = ANY($1)`, syncIDs))

	code, out, stderr = runCLI(t, "dlq", "replay", "--database-url", db.URL, "--id", fmt.Sprint(mailIDs[0]),
		"--id", fmt.Sprint(mailIDs[1]), "--yes")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "replayed 2 of 2")
	require.Equal(t, int64(1), dead())
	require.Equal(t, int64(7), jobs())
}

func TestDLQPurgeCLI(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	opsDead(t, db, "q", "sync", 3, 40*24*time.Hour, func(int) string { return "old" })
	opsDead(t, db, "q", "sync", 2, time.Hour, func(int) string { return "new" })
	opsDead(t, db, "q", "mail", 1, time.Hour, func(int) string { return "new" })
	dead := func() int64 { return opsCount(t, db, `SELECT count(*) FROM skiplock.jobs_dead`) }

	code, out, stderr := runCLI(t, "dlq", "purge", "--database-url", db.URL, "--older-than", "30d")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "would purge 3 dead letter(s)")
	require.Contains(t, stderr, "--yes")
	require.Equal(t, int64(6), dead())

	for _, b := range []struct {
		args []string
		flag string
	}{
		{[]string{"--yes"}, "--older-than"},
		{[]string{"--older-than", "yesterday", "--yes"}, "--older-than"},
		{[]string{"--older-than", "-5h", "--yes"}, "--older-than"},
		{[]string{"--kind", "sync", "--rate", "5", "--yes"}, "--rate"}, // replay only
	} {
		args := append([]string{"dlq", "purge", "--database-url", db.URL}, b.args...)
		code, _, stderr := runCLI(t, args...)
		require.Equal(t, 2, code, "%v: %s", b.args, stderr)
		require.Contains(t, stderr, b.flag, b.args)
	}
	require.Equal(t, int64(6), dead())

	code, out, stderr = runCLI(t, "dlq", "purge", "--database-url", db.URL, "--older-than", "30d", "--yes", "--json")
	require.Equal(t, 0, code, stderr)
	require.JSONEq(t, `{"purged":3,"matched":3}`, out)
	require.Equal(t, int64(3), dead())

	code, out, stderr = runCLI(t, "dlq", "purge", "--database-url", db.URL, "--kind", "mail", "--yes")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "purged 1 dead letter(s)")
	require.Equal(t, int64(2), dead())
}

func TestTopCLI(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	opsReady(t, db, "mail", 2, -time.Minute)
	opsRunning(t, db, "mail", 1)
	opsDead(t, db, "mail", "send", 1, time.Hour, func(int) string { return "boom" })
	opsExec(t, db, `INSERT INTO skiplock.workers (id, hostname, pid, queues, concurrency, running, claimed_total, completed_total, failed_total, claim_p99_ms)
		VALUES ('w1', 'h', 1, '{mail}', 10, 1, 100, 90, 9, 2.5)`)

	// stdout is not a terminal: one frame, then exit.
	code, out, stderr := runCLI(t, "top", "--database-url", db.URL)
	require.Equal(t, 0, code, stderr)
	for _, s := range []string{"QUEUES", "mail", "WORKERS  1 live", "claim p99 2.50ms", "LONGEST RUNNING", "host:1:abcd",
		"DEAD LETTERS  1 kept", "VACUUM (jobs)"} {
		require.Contains(t, out, s)
	}
	require.NotContains(t, out, opsSecret)
	require.NotContains(t, out, "\x1b[", "no escape codes when stdout is not a terminal")

	code, out, stderr = runCLI(t, "top", "--database-url", db.URL, "--once", "--json")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, 1, strings.Count(out, "\n"), "one frame")
	var f topFrame
	decodeJSON(t, out, &f)
	require.Len(t, f.Queues, 1)
	require.Equal(t, int64(2), f.Queues[0].Ready)
	require.Equal(t, int64(1), f.Workers.Live)
	require.Equal(t, int64(100), f.Workers.Claimed)
	require.Nil(t, f.Workers.ClaimRate, "no rate on the first frame")
	require.Len(t, f.LongRunners, 1)
	require.Equal(t, int64(1), f.DeadLetters.Total)
	require.NotContains(t, out, opsSecret)

	code, _, stderr = runCLI(t, "top", "--database-url", db.URL, "--interval", "1ms")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--interval")
}

// top's claim rate reaches back about rateWindow: with frames every 2 s the
// base stays the frame 30–32 s old, so the rate spans several worker beats.
func TestTopRateWindow(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	var h []topFrame
	for i := 0; i <= 40; i++ {
		h = keepRateWindow(append(h, topFrame{At: t0.Add(time.Duration(2*i) * time.Second)}))
		age := h[len(h)-1].At.Sub(h[0].At)
		if i >= 16 {
			require.GreaterOrEqual(t, age, rateWindow, "frame %d", i)
			require.Less(t, age, rateWindow+2*time.Second, "frame %d", i)
		} else {
			require.Equal(t, t0, h[0].At, "frame %d: the first frame is the base until 30 s passed", i)
		}
	}
}
