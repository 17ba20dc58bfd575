-- Write-side dead-letter operations (store.Store's CountDead, ReplayDead,
-- PurgeDead and the retention service's PurgeDeadBatch): the dry run's
-- count, a replay's batch and a purge's batch. All three select dead letters
-- by the same optional filters (kind, error signature, ids, age); NULL means
-- "any". The read-side figures (groups, size, daily counts) stay in
-- internal/health/sql/health.sql.

-- name: count_dead
--   $1 kind  $2 signature  $3 ids  $4 older than (microseconds)
SELECT count(*)
FROM {{schema}}.jobs_dead AS d
WHERE ($1::text IS NULL OR d.kind = $1::text)
  AND ($2::text IS NULL OR d.error_signature = {{schema}}.error_signature($2::text))
  AND ($3::bigint[] IS NULL OR d.id = ANY ($3::bigint[]))
  AND ($4::bigint IS NULL OR d.dead_at < now() - $4::bigint * interval '1 microsecond');

-- name: replay_dead
-- One batch of a replay, in one statement: the dead rows are deleted and
-- their jobs inserted together, so a dead job becomes exactly one new job
-- however many replays race (a row another replay holds is skipped; one it
-- deleted is gone). A dead job whose unique key is in flight again stays
-- dead; of two dead jobs sharing a key in one batch only the newest goes.
-- The replayed jobs start afresh (attempt 0, run_at now) and their queues
-- are woken on commit.
--   $1 kind  $2 signature  $3 ids  $4 batch size
WITH cand AS (
    SELECT d.id, d.queue, d.unique_key, d.dead_at
    FROM {{schema}}.jobs_dead AS d
    WHERE ($1::text IS NULL OR d.kind = $1::text)
      AND ($2::text IS NULL OR d.error_signature = {{schema}}.error_signature($2::text))
      AND ($3::bigint[] IS NULL OR d.id = ANY ($3::bigint[]))
      AND (d.unique_key IS NULL OR NOT EXISTS (
            SELECT 1 FROM {{schema}}.jobs AS j
            WHERE j.queue = d.queue AND j.unique_key = d.unique_key))
    ORDER BY d.dead_at, d.id
    LIMIT $4
    FOR UPDATE SKIP LOCKED
),
batch AS (
    SELECT c.id
    FROM (
        SELECT c.id, c.unique_key,
               row_number() OVER (PARTITION BY c.queue, c.unique_key ORDER BY c.dead_at DESC, c.id DESC) AS rn
        FROM cand AS c
    ) AS c
    WHERE c.unique_key IS NULL OR c.rn = 1
),
d AS (
    DELETE FROM {{schema}}.jobs_dead AS d
    WHERE d.id IN (SELECT b.id FROM batch AS b)
    RETURNING d.*
),
ins AS (
    INSERT INTO {{schema}}.jobs (queue, kind, payload, priority, run_at, max_attempts, unique_key, tenant, entity, metadata,
                                 limit_weight, sealed)
    SELECT d.queue, d.kind, d.payload, d.priority, now(), d.max_attempts, d.unique_key, d.tenant, d.entity, d.metadata,
           d.limit_weight, d.sealed
    FROM d
    ORDER BY d.dead_at, d.id
    RETURNING id, queue
),
woken AS (
    SELECT pg_notify({{schema_lit}} || '.jobs', q.queue)
    FROM (SELECT DISTINCT i.queue FROM ins AS i) AS q
)
SELECT (SELECT count(*) FROM ins)::int, (SELECT count(*) FROM cand)::int, (SELECT count(*) FROM woken)::int;

-- name: purge_dead
-- One bounded batch of a purge, oldest first.
--   $1 kind  $2 signature  $3 ids  $4 older than (microseconds)  $5 batch size
WITH victims AS (
    SELECT d.id
    FROM {{schema}}.jobs_dead AS d
    WHERE ($1::text IS NULL OR d.kind = $1::text)
      AND ($2::text IS NULL OR d.error_signature = {{schema}}.error_signature($2::text))
      AND ($3::bigint[] IS NULL OR d.id = ANY ($3::bigint[]))
      AND ($4::bigint IS NULL OR d.dead_at < now() - $4::bigint * interval '1 microsecond')
    ORDER BY d.dead_at, d.id
    LIMIT $5
    FOR UPDATE SKIP LOCKED
)
DELETE FROM {{schema}}.jobs_dead AS d
USING victims AS v
WHERE d.id = v.id;
