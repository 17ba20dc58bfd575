-- Job inspection for the dashboard: search and detail. Nothing here selects
-- a payload except job_payload, which runs only when an authorised user
-- reveals one (metadata is not a payload: it is shown, except on a read-only
-- dashboard). Finished jobs (the jobs_done history) are searched over the
-- last 24 hours only: jobs_done is partitioned by completion time and its
-- only index is a BRIN on id (migration 005), so a search in id order would
-- read the whole history. lookup.sql holds the Client's JobGet/JobList.

-- name: search_jobs
-- Keyset-paginated search, newest id first. Every filter is optional (NULL).
--   $1 id  $2 queue  $3 kind  $4 state (ready, scheduled, running, dead, done;
--   NULL: every state but done)  $5 tenant  $6 ids below this one  $7 limit
SELECT r.id, r.state, r.queue, r.kind, r.priority, r.attempts, r.max_attempts, r.run_at, r.created_at,
       r.tenant, r.locked_by, r.error
FROM (
    (SELECT j.id,
            CASE WHEN j.state = 'ready' AND j.run_at > now() THEN 'scheduled' ELSE j.state END AS state,
            j.queue, j.kind, j.priority, j.attempts, j.max_attempts, j.run_at, j.created_at, j.tenant, j.locked_by,
            left(split_part(coalesce(j.last_error, ''), E'\n', 1), 200) AS error
     FROM {{schema}}.jobs AS j
     WHERE ($4::text IS NULL OR $4::text IN ('ready', 'scheduled', 'running'))
       AND ($1::bigint IS NULL OR j.id = $1::bigint)
       AND ($2::text IS NULL OR j.queue = $2::text)
       AND ($3::text IS NULL OR j.kind = $3::text)
       AND ($5::text IS NULL OR j.tenant = $5::text)
       AND ($6::bigint IS NULL OR j.id < $6::bigint)
       AND ($4::text IS NULL
            OR ($4::text = 'running' AND j.state = 'running')
            OR ($4::text = 'ready' AND j.state = 'ready' AND j.run_at <= now())
            OR ($4::text = 'scheduled' AND j.state = 'ready' AND j.run_at > now()))
     ORDER BY j.id DESC
     LIMIT $7)
    UNION ALL
    (SELECT d.id, 'dead', d.queue, d.kind, d.priority, d.attempts, d.max_attempts, d.run_at, d.created_at,
            d.tenant, d.locked_by, left(split_part(coalesce(d.last_error, ''), E'\n', 1), 200)
     FROM {{schema}}.jobs_dead AS d
     WHERE ($4::text IS NULL OR $4::text = 'dead')
       AND ($1::bigint IS NULL OR d.id = $1::bigint)
       AND ($2::text IS NULL OR d.queue = $2::text)
       AND ($3::text IS NULL OR d.kind = $3::text)
       AND ($5::text IS NULL OR d.tenant = $5::text)
       AND ($6::bigint IS NULL OR d.id < $6::bigint)
     ORDER BY d.id DESC
     LIMIT $7)
    UNION ALL
    (SELECT f.id, 'done', f.queue, f.kind, f.priority, f.attempts, NULL::integer, f.run_at, f.created_at,
            f.tenant, f.locked_by, ''
     FROM {{schema}}.jobs_done AS f
     WHERE $4::text = 'done'
       AND f.finished_at > now() - interval '24 hours'
       AND ($1::bigint IS NULL OR f.id = $1::bigint)
       AND ($2::text IS NULL OR f.queue = $2::text)
       AND ($3::text IS NULL OR f.kind = $3::text)
       AND ($5::text IS NULL OR f.tenant = $5::text)
       AND ($6::bigint IS NULL OR f.id < $6::bigint)
     ORDER BY f.id DESC
     LIMIT $7)
) AS r
ORDER BY r.id DESC
LIMIT $7;

-- name: job_detail
-- One job wherever it is: in flight, dead, or finished in the last 24 hours.
-- The first branch that finds it ends the scan.
--   $1 id
(SELECT j.id, CASE WHEN j.state = 'ready' AND j.run_at > now() THEN 'scheduled' ELSE j.state END,
        j.queue, j.kind, j.priority, j.attempts, j.max_attempts, j.run_at, j.created_at, j.attempted_at,
        j.lease_expires_at, j.locked_by, j.unique_key, j.tenant, j.entity, j.last_error, j.cancel_requested,
        NULL::timestamptz, NULL::text, NULL::timestamptz, jsonb_pretty(j.metadata)
 FROM {{schema}}.jobs AS j WHERE j.id = $1)
UNION ALL
(SELECT d.id, 'dead', d.queue, d.kind, d.priority, d.attempts, d.max_attempts, d.run_at, d.created_at, NULL,
        NULL, d.locked_by, d.unique_key, d.tenant, d.entity, d.last_error, false,
        d.dead_at, d.reason, NULL, jsonb_pretty(d.metadata)
 FROM {{schema}}.jobs_dead AS d WHERE d.id = $1)
UNION ALL
(SELECT f.id, 'done', f.queue, f.kind, f.priority, f.attempts, NULL, f.run_at, f.created_at, f.attempted_at,
        NULL, f.locked_by, NULL, f.tenant, f.entity, NULL, false,
        NULL, NULL, f.finished_at, jsonb_pretty(f.metadata)
 FROM {{schema}}.jobs_done AS f WHERE f.id = $1 AND f.finished_at > now() - interval '24 hours')
LIMIT 1;

-- name: job_payload
-- The payload of one job, for an explicit reveal only.
--   $1 id
(SELECT j.payload FROM {{schema}}.jobs AS j WHERE j.id = $1)
UNION ALL
(SELECT d.payload FROM {{schema}}.jobs_dead AS d WHERE d.id = $1)
UNION ALL
(SELECT f.payload FROM {{schema}}.jobs_done AS f WHERE f.id = $1 AND f.finished_at > now() - interval '24 hours')
LIMIT 1;

-- name: enqueued_jobs
-- skiplocktest's view of in-flight jobs (RequireEnqueued and friends), in id
-- order, bounded. It selects the payload: it runs only in users' tests.
--   $1 kind ('' for any)  $2 queue ('' for any)  $3 a JSON object the
--   payload should contain (NULL: not asked; the last column is then false)
SELECT id, queue, kind, state, priority, attempts, max_attempts, run_at, run_at > now(),
       tenant, entity, unique_key, payload::text, COALESCE(payload @> $3::jsonb, false)
FROM {{schema}}.jobs
WHERE ($1 = '' OR kind = $1) AND ($2 = '' OR queue = $2)
ORDER BY id
LIMIT 1000;
