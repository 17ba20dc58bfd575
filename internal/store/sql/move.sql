-- Moving a tenant's jobs between databases (skiplock.MoveTenant, migration
-- 011, docs/scaling.md §4). Every batch: lock the tenant's ready rows in the
-- source (move_lock_batch), insert them held in the target with a moved_in
-- row each (move_insert) and commit there, delete them in the source with a
-- moved_out row each (move_delete) and commit there, release them in the
-- target (move_release). A re-run first settles what an interrupted one
-- left held (move_held, move_lock_ids, move_moved_out, move_release,
-- move_discard).

-- name: move_identity
-- Names this database for moved_in.source and moved_out.target: the
-- cluster's system identifier (a promoted standby keeps it), the database
-- and the schema. pg_control_system() is executable by PUBLIC.
--   $1 schema
SELECT (SELECT system_identifier FROM pg_control_system())::text || '/' || current_database() || '/' || $1::text;

-- name: move_lock_batch
-- The tenant's next ready (due or scheduled) jobs, locked: claims skip
-- locked rows, so no worker takes them while the batch moves. FOR UPDATE
-- without SKIP LOCKED waits for a claim in progress and then re-checks
-- state, so a job claimed meanwhile is left out. Workflow tasks stay: their
-- workflow lives here. In jobs_ready_tenant's order (queue, then claim
-- order), so the scan stops at the batch's end with no sort: ordered by id
-- it read and sorted all the tenant's rows for every batch (73 ms a batch
-- at 20,000 jobs, 2 ms this way). The most urgent jobs move first.
--   $1 tenant, $2 batch size
SELECT id, priority, attempts, max_attempts, run_at, created_at, queue, kind, unique_key, tenant, entity,
       last_error, payload, sealed, metadata, limit_weight
FROM {{schema}}.jobs
WHERE tenant = $1 AND state = 'ready' AND task_id IS NULL
ORDER BY queue, priority DESC, run_at, id
LIMIT $2
FOR UPDATE;

-- name: move_lock_ids
-- Of these jobs, the ones still ready here, locked (see move_lock_batch).
--   $1 ids
SELECT id FROM {{schema}}.jobs WHERE id = ANY($1::bigint[]) AND state = 'ready' ORDER BY id FOR UPDATE;

-- name: move_guard
-- What the target already holds of these source jobs (absent: not moved).
--   $1 source, $2 source ids
SELECT source_id, state FROM {{schema}}.moved_in WHERE source = $1 AND source_id = ANY($2::bigint[]);

-- name: move_insert
-- One source job into the target, held (run_at in the year 9999, never due)
-- with its attempts, budget, creation time, metadata and weight; its moved_in row
-- in the same statement. A live job here with the same queue and unique
-- key is the job already (merged: nothing inserted, the existing id
-- recorded). A discarded moved_in row (the job ran in the source after an
-- interrupted move, then came back to ready) is taken over; any other
-- moved_in row for the job means it is here already: nothing is inserted
-- and no row returned.
--   $1 source, $2 source id, $3 priority, $4 attempts, $5 max_attempts,
--   $6 run_at, $7 created_at, $8 queue, $9 kind, $10 unique_key, $11 tenant,
--   $12 entity, $13 last_error, $14 payload, $15 metadata, $16 limit_weight (NULL: 1),
--   $17 sealed (NULL: the payload is whole)
WITH here AS (
    SELECT 1 FROM {{schema}}.moved_in WHERE source = $1 AND source_id = $2 AND state <> 'discarded'
), ins AS (
    -- Into jobs_keyed, whose unique index is the ON CONFLICT arbiter (a
    -- partitioned table's cannot be; migration 016).
    INSERT INTO {{schema}}.jobs_keyed AS j (priority, attempts, max_attempts, run_at, created_at, queue, kind, unique_key,
                                      tenant, entity, last_error, payload, sealed, metadata, limit_weight)
    SELECT $3, $4, $5, '9999-01-01 00:00:00+00', $7, $8, $9, $10, $11, $12, $13, $14, $17::bytea, $15, $16::integer
    WHERE NOT EXISTS (SELECT 1 FROM here)
    ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
    RETURNING j.id
)
INSERT INTO {{schema}}.moved_in AS m (source, source_id, id, run_at, state)
SELECT $1, $2,
       coalesce((SELECT id FROM ins),
                (SELECT j.id FROM {{schema}}.jobs AS j WHERE j.queue = $8 AND j.unique_key = $10)),
       $6, CASE WHEN EXISTS (SELECT 1 FROM ins) THEN 'held' ELSE 'merged' END
WHERE NOT EXISTS (SELECT 1 FROM here)
ON CONFLICT (source, source_id) DO UPDATE
    SET id = excluded.id, run_at = excluded.run_at, state = excluded.state, moved_at = now()
    WHERE m.state = 'discarded'
RETURNING m.state;

-- name: move_delete
-- Deletes the moved jobs here and records each in moved_out, in one
-- statement (and the caller's transaction, which holds their locks).
--   $1 ids, $2 target
WITH d AS (
    DELETE FROM {{schema}}.jobs WHERE id = ANY($1::bigint[]) AND state = 'ready' RETURNING id
)
INSERT INTO {{schema}}.moved_out (id, target) SELECT id, $2 FROM d
ON CONFLICT (id) DO NOTHING;

-- name: move_release
-- Releases held jobs: their own run_at back, a wake-up per queue (delivered
-- on commit). Returns how many were released.
--   $1 source, $2 source ids
WITH r AS (
    UPDATE {{schema}}.moved_in SET state = 'released'
    WHERE source = $1 AND source_id = ANY($2::bigint[]) AND state = 'held'
    RETURNING id, run_at
), j AS (
    UPDATE {{schema}}.jobs AS j SET run_at = r.run_at FROM r WHERE j.id = r.id AND j.state = 'ready'
    RETURNING j.queue
), n AS (
    SELECT pg_notify({{schema_lit}} || '.jobs', q.queue) FROM (SELECT DISTINCT queue FROM j) AS q
)
SELECT (SELECT count(*) FROM r), (SELECT count(*) FROM n);

-- name: move_discard
-- Discards held copies whose source job was claimed in the source after an
-- interrupted move (it runs there): the copy is deleted unrun. Returns how
-- many.
--   $1 source, $2 source ids
WITH d AS (
    UPDATE {{schema}}.moved_in SET state = 'discarded'
    WHERE source = $1 AND source_id = ANY($2::bigint[]) AND state = 'held'
    RETURNING id
), j AS (
    DELETE FROM {{schema}}.jobs AS j USING d WHERE j.id = d.id AND j.state = 'ready' RETURNING j.id
)
SELECT count(*) FROM d;

-- name: move_held
-- Source jobs an interrupted move left held here, oldest id first.
--   $1 source, $2 limit
SELECT source_id FROM {{schema}}.moved_in WHERE source = $1 AND state = 'held' ORDER BY source_id LIMIT $2;

-- name: move_moved_out
-- Of these ids, the ones this database recorded as moved out (deleted by a
-- move).
--   $1 ids
SELECT id FROM {{schema}}.moved_out WHERE id = ANY($1::bigint[]);

-- name: move_left
-- What a move leaves of the tenant here: running jobs (they finish here),
-- workflow tasks and dead letters.
--   $1 tenant
SELECT (SELECT count(*) FROM {{schema}}.jobs WHERE tenant = $1 AND state = 'running'),
       (SELECT count(*) FROM {{schema}}.jobs WHERE tenant = $1 AND state = 'ready' AND task_id IS NOT NULL),
       (SELECT count(*) FROM {{schema}}.jobs_dead WHERE tenant = $1);
