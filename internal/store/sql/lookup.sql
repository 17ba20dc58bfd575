-- Looking jobs up by id or filter, wherever they are: in flight (jobs), dead
-- (jobs_dead) or finished (jobs_done, kept for Config.CompletedRetention).
-- Nothing here selects a payload except job_payload_any, which runs only
-- when a caller asks for it explicitly (JobPayload, `skiplock job get
-- --payload`, the dashboard's reveal), and enqueued_jobs, which runs only in
-- users' tests (skiplocktest). The Client, the CLI and the dashboard all
-- read jobs through these statements. jobs_done is found by id through its
-- BRIN index (migration 005); a list of finished jobs reads the last 24
-- hours only, since jobs_done has no index in id order.

-- name: job_get
-- One job. The states: ready (due), scheduled (ready, run_at in the future),
-- running, dead (outcome = its reason) and completed (outcome 'completed').
-- finished_at is the dead_at of a dead job and the finished_at of a
-- completed one. limit_weight is NULL for weight 1 (migration 014). The
-- first branch that finds the id ends the scan.
--   $1 id
(SELECT j.id, CASE WHEN j.state = 'ready' AND j.run_at > now() THEN 'scheduled' ELSE j.state END,
        j.queue, j.kind, j.priority, j.attempts, j.max_attempts, j.run_at, j.created_at, j.attempted_at,
        NULL::timestamptz, NULL::text, j.lease_expires_at, j.locked_by, j.unique_key, j.tenant, j.entity,
        j.last_error, j.cancel_requested, j.metadata, j.limit_weight, j.progress
 FROM {{schema}}.jobs AS j WHERE j.id = $1)
UNION ALL
(SELECT d.id, 'dead', d.queue, d.kind, d.priority, d.attempts, d.max_attempts, d.run_at, d.created_at, NULL,
        d.dead_at, d.reason, NULL, d.locked_by, d.unique_key, d.tenant, d.entity,
        d.last_error, false, d.metadata, d.limit_weight, NULL::jsonb
 FROM {{schema}}.jobs_dead AS d WHERE d.id = $1)
UNION ALL
(SELECT f.id, 'completed', f.queue, f.kind, f.priority, f.attempts, f.max_attempts, f.run_at, f.created_at,
        f.attempted_at, f.finished_at, 'completed', NULL, f.locked_by, NULL, f.tenant, f.entity,
        f.last_error, false, f.metadata, f.limit_weight, f.progress
 FROM {{schema}}.jobs_done AS f WHERE f.id = $1
 ORDER BY f.finished_at DESC LIMIT 1)
LIMIT 1;

-- name: summarize_done
-- jobs_done's BRIN index summarized over the whole ranges filled since it
-- last was (summarize_done; how many it summarized), when the role may run
-- it. First in jobs_finished's pipeline, so the look-up reads the pages of
-- the ranges that hold its ids and the range being filled, not every page
-- written since the ranges were last summarized (TestWaitForTenThousandJobs:
-- 4-10 ms look-ups of a few hundred ids, growing with the drain, each
-- reading all of it); and every 10 s on its own in every client that keeps
-- the history (maintenance.Retention), since the index leaves its ranges
-- to it (migration 025).
SELECT {{schema}}.summarize_done();

-- name: jobs_finished_settings
-- Next in jobs_finished's pipeline (one implicit transaction), given how
-- many ids ($1) the look-up asks about. A few (a Wait for one job, a
-- result's look-up): the generic plan, made once per connection and
-- reused; planning each of them cost 0.9-1.0 ms for a look-up that ran in
-- 0.07 (pg_stat_statements, `skiplock bench --latency`: 2,027 plans in
-- 2,027 calls). Many: a plan made for this array's size, never a generic
-- one. The waiters run jobs_finished many times on one connection, and
-- once pgx's cached statement switched to a generic plan (after five runs)
-- a look-up of 1,000 finished jobs took 0.7-1 s instead of ~30 ms. No
-- sequential scan: the generic plan may be made while jobs_done is empty
-- (a fresh database, a new day's partition) and is kept while it fills
-- (TestJobsFinishedPlanOnce). No JIT: the estimate for the spans' scans of
-- jobs_done passes jit_above_cost, and compiling took 38 ms of a look-up
-- that runs in 1.
--   $1 the number of ids
SELECT set_config('plan_cache_mode', CASE WHEN $1::int <= 16 THEN 'force_generic_plan' ELSE 'force_custom_plan' END, true),
       set_config('enable_seqscan', 'off', true), set_config('jit', 'off', true);

-- name: jobs_finished
-- Which of the jobs $1 have finished, and how (Client.Wait, JobResult): a
-- job still in jobs has not (a retried one is back there); else its latest
-- row in jobs_done ('completed', with its result) or in jobs_dead ('dead',
-- with its reason and last error: a failed job's result), whichever is
-- later; else 'gone' (deleted on completion with Config.DeleteCompleted,
-- or its history dropped). One snapshot, so a job moving between tables is
-- seen in exactly one. Set-based: jobs_done is read through its BRIN index
-- once per span of the ids (ids less than 4,096 apart share a span: the
-- jobs a waiter hears of finished together), the ids then matched by a
-- hashed `= ANY` filter (OFFSET 0 keeps it out of the index condition, where
-- it would scan the index once per id, every range of it each time). The
-- rest by primary key. w is read once (spans and done read $1 themselves):
-- a CTE read more than once is materialized, and the planner joins it to
-- the jobs still open with a default estimate instead of the array's size.
--   $1 ids
WITH w AS (SELECT DISTINCT u.id FROM unnest($1::bigint[]) AS u(id)),
spans AS (
    SELECT min(s.id) AS lo, max(s.id) AS hi
    FROM (SELECT g.id, count(*) FILTER (WHERE g.gap) OVER (ORDER BY g.id) AS span
          FROM (SELECT u.id, u.id - lag(u.id) OVER (ORDER BY u.id) > 4096 AS gap
                FROM unnest($1::bigint[]) AS u(id)) AS g) AS s
    GROUP BY s.span
),
open AS (SELECT j.id FROM {{schema}}.jobs AS j WHERE j.id = ANY ($1::bigint[])),
done AS (
    SELECT DISTINCT ON (f.id) f.id, f.result, f.finished_at
    FROM spans
    CROSS JOIN LATERAL (SELECT f.id, f.result, f.finished_at FROM {{schema}}.jobs_done AS f
                        WHERE f.id BETWEEN spans.lo AND spans.hi OFFSET 0) AS f
    WHERE f.id = ANY ($1::bigint[])
    ORDER BY f.id, f.finished_at DESC
),
dead AS (SELECT d.id, d.reason, d.last_error, d.dead_at FROM {{schema}}.jobs_dead AS d WHERE d.id = ANY ($1::bigint[]))
SELECT w.id,
       CASE WHEN done.id IS NOT NULL AND (dead.id IS NULL OR done.finished_at >= dead.dead_at) THEN 'completed'
            WHEN dead.id IS NOT NULL THEN 'dead'
            ELSE 'gone' END,
       CASE WHEN dead.id IS NULL OR done.finished_at >= dead.dead_at THEN done.result END,
       dead.reason, dead.last_error, coalesce(done.finished_at, dead.dead_at)
FROM w
LEFT JOIN done ON done.id = w.id
LEFT JOIN dead ON dead.id = w.id
WHERE NOT EXISTS (SELECT 1 FROM open WHERE open.id = w.id);

-- name: job_list
-- Keyset-paginated list, newest id first; every filter is optional (NULL).
-- Without a state every job in flight and every dead letter is listed;
-- completed jobs only when asked for (state 'completed'), over the last 24
-- hours. The error is the first line of last_error, at most 200 characters.
-- The Client's JobList, `skiplock job list` and the dashboard's search.
--   $1 queue  $2 kind  $3 state (ready, scheduled, running, dead, completed)
--   $4 ids below this one  $5 limit  $6 tenant
SELECT r.id, r.state, r.queue, r.kind, r.priority, r.attempts, r.max_attempts, r.run_at, r.created_at,
       r.attempted_at, r.finished_at, r.outcome, r.tenant, r.locked_by, r.error
FROM (
    (SELECT j.id,
            CASE WHEN j.state = 'ready' AND j.run_at > now() THEN 'scheduled' ELSE j.state END AS state,
            j.queue, j.kind, j.priority, j.attempts, j.max_attempts, j.run_at, j.created_at, j.attempted_at,
            NULL::timestamptz AS finished_at, NULL::text AS outcome, j.tenant, j.locked_by,
            left(split_part(coalesce(j.last_error, ''), E'\n', 1), 200) AS error
     FROM {{schema}}.jobs AS j
     WHERE ($3::text IS NULL OR $3::text IN ('ready', 'scheduled', 'running'))
       AND ($1::text IS NULL OR j.queue = $1::text)
       AND ($2::text IS NULL OR j.kind = $2::text)
       AND ($6::text IS NULL OR j.tenant = $6::text)
       AND ($4::bigint IS NULL OR j.id < $4::bigint)
       AND ($3::text IS NULL
            OR ($3::text = 'running' AND j.state = 'running')
            OR ($3::text = 'ready' AND j.state = 'ready' AND j.run_at <= now())
            OR ($3::text = 'scheduled' AND j.state = 'ready' AND j.run_at > now()))
     ORDER BY j.id DESC
     LIMIT $5)
    UNION ALL
    (SELECT d.id, 'dead', d.queue, d.kind, d.priority, d.attempts, d.max_attempts, d.run_at, d.created_at,
            NULL, d.dead_at, d.reason, d.tenant, d.locked_by,
            left(split_part(coalesce(d.last_error, ''), E'\n', 1), 200)
     FROM {{schema}}.jobs_dead AS d
     WHERE ($3::text IS NULL OR $3::text = 'dead')
       AND ($1::text IS NULL OR d.queue = $1::text)
       AND ($2::text IS NULL OR d.kind = $2::text)
       AND ($6::text IS NULL OR d.tenant = $6::text)
       AND ($4::bigint IS NULL OR d.id < $4::bigint)
     ORDER BY d.id DESC
     LIMIT $5)
    UNION ALL
    (SELECT f.id, 'completed', f.queue, f.kind, f.priority, f.attempts, f.max_attempts, f.run_at, f.created_at,
            f.attempted_at, f.finished_at, 'completed', f.tenant, f.locked_by,
            left(split_part(coalesce(f.last_error, ''), E'\n', 1), 200)
     FROM {{schema}}.jobs_done AS f
     WHERE $3::text = 'completed'
       AND f.finished_at > now() - interval '24 hours'
       AND ($1::text IS NULL OR f.queue = $1::text)
       AND ($2::text IS NULL OR f.kind = $2::text)
       AND ($6::text IS NULL OR f.tenant = $6::text)
       AND ($4::bigint IS NULL OR f.id < $4::bigint)
     ORDER BY f.id DESC
     LIMIT $5)
) AS r
ORDER BY r.id DESC
LIMIT $5;

-- name: job_payload_any
-- The payload of one job wherever it is, for an explicit request only: a
-- sealed one as its envelope (envelope()).
--   $1 id
(SELECT {{schema}}.envelope(j.payload, j.sealed) FROM {{schema}}.jobs AS j WHERE j.id = $1)
UNION ALL
(SELECT {{schema}}.envelope(d.payload, d.sealed) FROM {{schema}}.jobs_dead AS d WHERE d.id = $1)
UNION ALL
(SELECT {{schema}}.envelope(f.payload, f.sealed) FROM {{schema}}.jobs_done AS f WHERE f.id = $1
 ORDER BY f.finished_at DESC LIMIT 1)
LIMIT 1;

-- name: job_retry
-- See retry_job (migration 005): a new id, and the state the job was in.
--   $1 id
SELECT r.new_id, r.state FROM {{schema}}.retry_job($1) AS r;

-- name: job_delete
-- Deletes a ready (or scheduled) job or a dead letter. Running jobs are
-- cancelled, not deleted; finished jobs leave only when their partition is
-- dropped. Returns the state the job was in ('' when neither table had it
-- in a deletable state) and records it in job_actions (migration 018),
-- where a repeated delete finds it (job_action).
--   $1 id
WITH r AS (
    DELETE FROM {{schema}}.jobs AS j WHERE j.id = $1 AND j.state = 'ready'
    RETURNING CASE WHEN j.run_at > now() THEN 'scheduled' ELSE 'ready' END AS state
),
d AS (
    DELETE FROM {{schema}}.jobs_dead AS d WHERE d.id = $1
    RETURNING 'dead'::text AS state
),
was AS (
    SELECT coalesce((SELECT r.state FROM r), (SELECT d.state FROM d), '') AS state
),
recorded AS (
    INSERT INTO {{schema}}.job_actions (id, action, was)
    SELECT $1, 'delete', was.state FROM was WHERE was.state <> ''
    ON CONFLICT (id, action) DO NOTHING
)
SELECT was.state FROM was;

-- name: job_action
-- What an earlier retry, cancel or delete of the job did (job_actions,
-- migration 018): the state the job was in, and a retry's copy. No row
-- when it was never done. Read in a statement of its own, after the
-- action found nothing, so that it sees a concurrent call that committed
-- while this one waited for the job's row.
--   $1 id  $2 action
SELECT a.was, a.new_id FROM {{schema}}.job_actions AS a WHERE a.id = $1 AND a.action = $2;

-- name: prune_job_actions
-- The retention pass's bound on job_actions: records older than a week,
-- oldest first, a batch at a time.
--   $1 batch
DELETE FROM {{schema}}.job_actions AS a
WHERE (a.id, a.action) IN (SELECT x.id, x.action FROM {{schema}}.job_actions AS x
                           WHERE x.acted_at < now() - interval '7 days' ORDER BY x.acted_at LIMIT $1);

-- name: enqueued_jobs
-- skiplocktest's view of in-flight jobs (RequireEnqueued and friends), in id
-- order, bounded. It selects the payload: it runs only in users' tests.
--   $1 kind ('' for any)  $2 queue ('' for any)  $3 a JSON object the
--   payload should contain (NULL: not asked; the last column is then false)
SELECT id, queue, kind, state, priority, attempts, max_attempts, run_at, run_at > now(),
       tenant, entity, unique_key, {{schema}}.envelope(payload, sealed)::text, COALESCE(payload @> $3::jsonb, false)
FROM {{schema}}.jobs
WHERE ($1 = '' OR kind = $1) AND ($2 = '' OR queue = $2)
ORDER BY id
LIMIT 1000;
