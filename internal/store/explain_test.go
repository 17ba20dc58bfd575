package store_test

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/store"
)

// The claim and `job explain` must agree: for each reason a job can be held
// by, a job held by it alone is left by the claim and named by explain; once
// the reason is removed, explain reports nothing holding it with no job
// ahead, and the claim takes it. A change to the claim's predicate that
// explain does not follow fails here (or in
// TestExplainUsesTheClaimFragments, for the shared text).
func TestExplainAgreesWithTheClaim(t *testing.T) {
	t.Parallel()
	plain := store.ClaimRequest{Queues: []string{"q"}, Batch: 10, WorkerID: "claimer", Lease: time.Minute}
	limited := store.ClaimRequest{Strategy: store.ClaimLimited, Queues: []string{"q"}, Batch: 10, WorkerID: "claimer",
		Lease: time.Minute, Limits: []string{"lq"}}
	running := `INSERT INTO skiplock.jobs (queue, kind, entity, state, locked_by, lease_token, lease_expires_at)
		VALUES ('q', 'other', $1, 'running', 'w', nextval('skiplock.lease_tokens'), now() + interval '1 minute') RETURNING id`
	cases := []struct {
		name   string
		entity string
		hold   string // SQL holding the job $1 (and returning a holder's id, if any)
		claim  store.ClaimRequest
		// what the unhold needs the claimer to be (its kinds) if not claim
		release  string
		after    store.ClaimRequest
		reason   string
		heldByID bool
		// also: the reasons that come with it (a durable step's wait is a
		// run time in the future too)
		also []string
	}{
		{name: "run time in the future", hold: `UPDATE skiplock.jobs SET run_at = now() + interval '1 hour' WHERE id = $1`,
			claim: plain, release: `UPDATE skiplock.jobs SET run_at = now() - interval '1 second' WHERE id = $1`, reason: "scheduled"},
		{name: "signal wait", hold: `WITH s AS (INSERT INTO skiplock.job_steps (job_id, name, output)
				VALUES ($1, 'wait:approved', jsonb_build_object('wake_at', now() + interval '1 hour')))
			UPDATE skiplock.jobs SET run_at = now() + interval '1 hour' WHERE id = $1`,
			claim: plain, release: `UPDATE skiplock.jobs SET run_at = now() WHERE id = $1`, reason: "signal_wait", also: []string{"scheduled"}},
		{name: "durable sleep", hold: `WITH s AS (INSERT INTO skiplock.job_steps (job_id, name, output)
				VALUES ($1, 'sleep:nap', jsonb_build_object('wake_at', now() + interval '1 hour')))
			UPDATE skiplock.jobs SET run_at = now() + interval '1 hour' WHERE id = $1`,
			claim: plain, release: `UPDATE skiplock.jobs SET run_at = now() WHERE id = $1`, reason: "sleep", also: []string{"scheduled"}},
		{name: "paused queue", hold: `INSERT INTO skiplock.queues (name, paused) SELECT queue, true FROM skiplock.jobs WHERE id = $1`,
			claim: plain, release: `UPDATE skiplock.queues SET paused = false WHERE $1::bigint > 0`, reason: "queue_paused"},
		{name: "entity held", entity: "order-7", hold: strings.Replace(running, "$1", "'order-7'", 1) + ` -- $1`,
			claim: plain, release: `DELETE FROM skiplock.jobs WHERE state = 'running' AND $1::bigint > 0`, reason: "entity_busy", heldByID: true},
		{name: "concurrency limit", hold: `WITH l AS (INSERT INTO skiplock.limits (name, queue, concurrency) VALUES ('lq', 'q', 1))
			` + strings.Replace(strings.Replace(running, "'other'", "'k'", 1), "$1", "NULL", 1) + ` -- $1`,
			claim: limited, release: `DELETE FROM skiplock.jobs WHERE state = 'running' AND $1::bigint > 0`, after: limited,
			reason: "concurrency_limit", heldByID: true},
		{name: "rate limit", hold: `WITH l AS (INSERT INTO skiplock.limits (name, queue, rate, per) VALUES ('lq', 'q', 1, '1 hour'))
			INSERT INTO skiplock.limit_starts (name, key, at) SELECT 'lq', '', now() WHERE $1::bigint > 0`,
			claim: limited, release: `DELETE FROM skiplock.limit_starts WHERE $1::bigint > 0`, after: limited, reason: "rate_limit"},
		{name: "kind no live worker handles", hold: `UPDATE skiplock.workers SET handles = '[{"queues": ["q"], "kinds": ["other"]}]' WHERE $1::bigint > 0`,
			claim:   store.ClaimRequest{Queues: []string{"q"}, Kinds: []string{"other"}, Batch: 10, WorkerID: "claimer", Lease: time.Minute},
			release: `UPDATE skiplock.workers SET handles = '[{"queues": ["q"], "kinds": ["other", "k"]}]' WHERE $1::bigint > 0`,
			after:   store.ClaimRequest{Queues: []string{"q"}, Kinds: []string{"other", "k"}, Batch: 10, WorkerID: "claimer", Lease: time.Minute},
			reason:  "unhandled_kind"},
		{name: "no live worker for the queue", hold: `UPDATE skiplock.workers SET heartbeat_at = now() - interval '1 hour' WHERE $1::bigint > 0`,
			claim:   store.ClaimRequest{Queues: []string{"elsewhere"}, Batch: 10, WorkerID: "claimer", Lease: time.Minute},
			release: `UPDATE skiplock.workers SET heartbeat_at = now() WHERE $1::bigint > 0`, reason: "no_worker"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t)
			ctx := context.Background()
			st := store.New("skiplock")
			// A live worker that claims every kind of q: no reason but the case's.
			seed(t, db, `INSERT INTO skiplock.workers (id, hostname, pid, queues, handles)
				VALUES ('w', 'h', 1, '{q}', '[{"queues": ["q"], "kinds": null}]')`)
			var id int64
			require.NoError(t, db.Pool.QueryRow(ctx, `INSERT INTO skiplock.jobs (queue, kind, entity, run_at)
				VALUES ('q', 'k', NULLIF($1, ''), now() - interval '1 second') RETURNING id`, c.entity).Scan(&id))
			var holder int64
			if c.heldByID {
				require.NoError(t, db.Pool.QueryRow(ctx, c.hold).Scan(&holder))
			} else {
				seed(t, db, c.hold, id)
			}

			res, err := st.Claim(ctx, db.Pool, c.claim)
			require.NoError(t, err)
			require.Empty(t, res.Jobs, "the claim took a job held by %s", c.reason)
			rows, err := st.JobExplain(ctx, db.Pool, id, time.Minute)
			require.NoError(t, err)
			var held []store.ExplainRow
			var others []string
			for _, r := range holds(rows) {
				if r.What == c.reason {
					held = append(held, r)
				} else {
					others = append(others, r.What)
				}
			}
			require.Len(t, held, 1, "named once: %+v", rows)
			require.Equal(t, c.also, others, "no other reason")
			if c.heldByID {
				require.Equal(t, []int64{holder}, held[0].Holders)
			}
			if c.reason == "rate_limit" {
				require.NotNil(t, held[0].At, "a rate limit's next free slot")
				require.WithinDuration(t, time.Now().Add(time.Hour), *held[0].At, time.Minute)
			}

			seed(t, db, c.release, id)
			rows, err = st.JobExplain(ctx, db.Pool, id, time.Minute)
			require.NoError(t, err)
			require.Empty(t, holds(rows), "released: %+v", rows)
			pos := position(t, rows)
			require.EqualValues(t, 0, *pos.N, "no job ahead: the next claim takes it")
			after := c.after
			if after.Queues == nil {
				after = plain
			}
			res, err = st.Claim(ctx, db.Pool, after)
			require.NoError(t, err)
			require.Len(t, res.Jobs, 1)
			require.Equal(t, id, res.Jobs[0].ID)
			rows, err = st.JobExplain(ctx, db.Pool, id, time.Minute)
			require.NoError(t, err)
			require.Empty(t, rows, "a running job has nothing to explain")
		})
	}
}

// Explain counts the jobs ahead of a ready job in claim order, in its queue
// and within its tenant, and the tenants that share the queue.
func TestExplainPosition(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	st := store.New("skiplock")
	seed(t, db, `INSERT INTO skiplock.jobs (queue, kind, tenant, priority, run_at)
		SELECT 'q', 'k', 't' || (g % 3), 0, now() - interval '1 hour' + g * interval '1 second' FROM generate_series(1, 9) AS g`)
	seed(t, db, `INSERT INTO skiplock.tenant_weights (queue, tenant, weight) VALUES ('q', 't1', 5)`)
	var id int64
	require.NoError(t, db.Pool.QueryRow(ctx, `INSERT INTO skiplock.jobs (queue, kind, tenant, run_at)
		VALUES ('q', 'k', 't1', now() - interval '1 minute') RETURNING id`).Scan(&id))
	// Behind, and not counted: a later job, a scheduled one, another queue.
	seed(t, db, `INSERT INTO skiplock.jobs (queue, kind, tenant, run_at) VALUES ('q', 'k', 't1', now()),
		('q', 'k', 't1', now() + interval '1 hour'), ('r', 'k', 't1', now() - interval '1 day')`)
	rows, err := st.JobExplain(ctx, db.Pool, id, time.Minute)
	require.NoError(t, err)
	pos := position(t, rows)
	require.EqualValues(t, 9, *pos.N)
	require.EqualValues(t, 5, *pos.Cap, "the tenant's weight")
	require.Equal(t, []int64{3, 3, 0}, pos.Holders, "3 of its tenant ahead, 3 tenants in the queue, no cap")
	require.Equal(t, "no_worker", holds(rows)[0].What)

	// Live pools of the queue with tenant caps: the smallest is reported.
	seed(t, db, `INSERT INTO skiplock.workers (id, hostname, pid, queues, handles) VALUES
		('w1', 'h', 1, '{q}', '[{"queues": ["q"], "kinds": null, "tenant_cap": 5}]'),
		('w2', 'h', 2, '{q}', '[{"queues": ["q"], "kinds": null, "tenant_cap": 2}, {"queues": ["r"], "kinds": null, "tenant_cap": 1}]')`)
	rows, err = st.JobExplain(ctx, db.Pool, id, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []int64{3, 3, 2}, position(t, rows).Holders)
	require.Empty(t, holds(rows))
}

// explain.sql tests each reason with the fragments the claim is made of:
// the claimable fragment is built from claim_due and entity_running, every
// claim checks a pause with queue_paused, and explain uses each of them (and
// the limits' fragments). Writing the condition out in a claim instead
// fails here.
func TestExplainUsesTheClaimFragments(t *testing.T) {
	t.Parallel()
	read := func(name string) string {
		b, err := os.ReadFile("sql/" + name)
		require.NoError(t, err)
		return string(b)
	}
	claim := read("claim.sql")
	claimable := regexp.MustCompile(`(?s)-- fragment: claimable\n(.*?)\n-- fragment:`).FindStringSubmatch(claim)
	require.NotNil(t, claimable)
	for _, f := range []string{"{{claim_due}}", "{{entity_running}}"} {
		require.Contains(t, claimable[1], f)
	}
	require.NotContains(t, claimable[1], "run_at <=", "the due test is claim_due")
	for _, file := range []string{"claim.sql", "claim_limited.sql", "claim_capped.sql", "claim_capped_after.sql"} {
		body := read(file)
		require.Equal(t, 1, strings.Count(claim, "p.paused"), "queue_paused is the one pause test")
		if file != "claim.sql" {
			require.NotContains(t, body, "p.paused", "%s: a pause test beside queue_paused", file)
		}
	}
	explain := read("explain.sql")
	for _, f := range []string{"{{claim_due}}", "{{entity_running}}", "{{queue_paused}}", "{{limit_use}}", "{{limit_covers}}", "{{limit_key}}"} {
		require.Contains(t, explain, f)
	}
}

func holds(rows []store.ExplainRow) []store.ExplainRow {
	var out []store.ExplainRow
	for _, r := range rows {
		if r.What != "position" {
			out = append(out, r)
		}
	}
	return out
}

func position(t *testing.T, rows []store.ExplainRow) store.ExplainRow {
	t.Helper()
	for _, r := range rows {
		if r.What == "position" {
			require.NotNil(t, r.N)
			return r
		}
	}
	t.Fatalf("no position row: %+v", rows)
	return store.ExplainRow{}
}
