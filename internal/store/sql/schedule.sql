-- Schedules (migration 002): stored by Client.AddSchedule and
-- DeclareSchedules, fired by the scheduler (internal/maintenance).

-- name: copy_clock
-- EnqueueMany's COPY: the database clock (delays resolve against it) and
-- the ring generation a plain job goes to now (migration 016).
SELECT now(), {{schema}}.ring_gen();

-- name: now
-- The database clock (the transaction's start time), read where the next
-- fire time is computed in Go. Store.Now. (EnqueueMany's COPY reads it with
-- the ring's generation: copy_clock.)
SELECT now();

-- name: schedule_upsert
-- Stores one schedule. An unchanged definition writes nothing; a changed
-- cron, interval or time zone takes the next fire time computed from now
-- ($10); a change to the job alone keeps the stored one. updated_at moves
-- with every change, which makes a scheduler holding the old definition lose
-- its compare-and-set.
--   $1 name  $2 cron  $3 every (seconds)  $4 timezone  $5 queue  $6 kind
--   $7 payload  $8 priority  $9 max_attempts  $10 next fire time
INSERT INTO {{schema}}.schedules AS s
    (name, cron, every, timezone, queue, kind, payload, priority, max_attempts, next_fire_at)
VALUES ($1, $2, $3::bigint * interval '1 second', $4, $5, $6, $7::jsonb, $8, $9, $10)
ON CONFLICT (name) DO UPDATE SET
    cron = EXCLUDED.cron, every = EXCLUDED.every, timezone = EXCLUDED.timezone,
    queue = EXCLUDED.queue, kind = EXCLUDED.kind, payload = EXCLUDED.payload,
    priority = EXCLUDED.priority, max_attempts = EXCLUDED.max_attempts,
    next_fire_at = CASE
        WHEN s.next_fire_at IS NOT NULL
             AND s.cron IS NOT DISTINCT FROM EXCLUDED.cron
             AND s.every IS NOT DISTINCT FROM EXCLUDED.every
             AND s.timezone = EXCLUDED.timezone
        THEN s.next_fire_at ELSE EXCLUDED.next_fire_at END,
    updated_at = now()
WHERE (s.cron, s.every, s.timezone, s.queue, s.kind, s.payload, s.priority, s.max_attempts)
      IS DISTINCT FROM
      (EXCLUDED.cron, EXCLUDED.every, EXCLUDED.timezone, EXCLUDED.queue, EXCLUDED.kind,
       EXCLUDED.payload, EXCLUDED.priority, EXCLUDED.max_attempts);

-- name: schedule_remove
-- Deletes a schedule by name; fires already enqueued stay.
DELETE FROM {{schema}}.schedules WHERE name = $1;

-- name: schedule_list
-- Every stored schedule, by name.
SELECT name, cron, extract(epoch FROM every)::bigint, timezone, queue, kind, payload, priority,
       max_attempts, next_fire_at, last_fire_at, created_at, updated_at, owner
FROM {{schema}}.schedules ORDER BY name;

-- name: schedule_sync_lock
-- First in ScheduleSync's transaction: one sync per owner at a time, so two
-- processes declaring the same set do not interleave their prunes and
-- upserts.
--   $1 owner
SELECT pg_advisory_xact_lock(hashtextextended({{schema_lit}} || '.schedule_owner.' || $1, 0));

-- name: schedule_owned_elsewhere
-- The schedules among $1 that another owner holds ($2 is the caller): a
-- sync refuses to take them over.
--   $1 names text[]   $2 owner
SELECT s.name, s.owner FROM {{schema}}.schedules AS s
WHERE s.name = ANY ($1::text[]) AND s.owner IS NOT NULL AND s.owner <> $2
ORDER BY s.name;

-- name: schedule_own
-- Marks the schedules $1 (just upserted) as the owner's: a schedule that
-- had none (added one by one) is adopted.
--   $1 names text[]   $2 owner
UPDATE {{schema}}.schedules AS s SET owner = $2, updated_at = now()
WHERE s.name = ANY ($1::text[]) AND s.owner IS DISTINCT FROM $2;

-- name: schedule_prune
-- Deletes the owner's schedules it no longer declares ($2: those it does);
-- fires already enqueued stay. Returns their names.
--   $1 owner   $2 names text[]
DELETE FROM {{schema}}.schedules AS s
WHERE s.owner = $1 AND s.name <> ALL ($2::text[])
RETURNING s.name;

-- name: scheduler_due
-- The schedules due at $1 (NULL: the database's now()), oldest first, at
-- most $2. The table is small (one row per schedule); rows without a next
-- fire time were inserted by plain SQL and get one computed.
SELECT s.name, s.cron, extract(epoch FROM s.every)::bigint, s.timezone, s.next_fire_at, s.updated_at, n.now
FROM (SELECT COALESCE($1::timestamptz, now()) AS now) AS n
JOIN {{schema}}.schedules AS s ON s.next_fire_at IS NULL OR s.next_fire_at <= n.now
ORDER BY s.next_fire_at NULLS FIRST, s.name
LIMIT $2;

-- name: scheduler_fire
-- Advances one schedule by compare-and-set and enqueues its fires in the
-- same statement (so the same transaction): when another process advanced
-- the schedule first, or someone redefined it (updated_at), the UPDATE
-- matches nothing and nothing is enqueued. Each fire carries the unique key
-- schedule:<name>:<fire time>, a second guard against enqueueing a fire
-- twice. Returns one row per fire (id, inserted), one row of NULLs when the
-- schedule advanced without a fire, and no row when it lost the race.
--   $1 name  $2 expected next_fire_at  $3 new next_fire_at  $4 last fire
--   $5 expected updated_at  $6 fire times  $7 unique keys
WITH advanced AS (
    UPDATE {{schema}}.schedules AS s
    SET next_fire_at = $3, last_fire_at = COALESCE($4, s.last_fire_at)
    WHERE s.name = $1 AND s.next_fire_at IS NOT DISTINCT FROM $2 AND s.updated_at = $5
    RETURNING s.queue, s.kind, s.payload, s.priority, s.max_attempts
)
SELECT e.id, e.inserted
FROM advanced AS a
LEFT JOIN LATERAL (
    SELECT q.id, q.inserted
    FROM unnest($6::timestamptz[], $7::text[]) AS f(fire_at, unique_key)
    CROSS JOIN LATERAL {{schema}}.enqueue_job(a.queue, a.kind, a.payload, a.priority, f.fire_at,
                                               a.max_attempts, f.unique_key, NULL, NULL, false) AS q
) AS e ON true;
