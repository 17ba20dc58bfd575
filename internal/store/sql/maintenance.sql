-- Statements of the maintenance passes that are not read-side figures: the
-- vacuum guard's state, lock and VACUUM, the retention passes' transaction
-- settings and lock, and the jobs_done partition DDL (partitions.go). The
-- dead-letter purge is in deadletter.sql; the partitions' listing, a
-- read-side figure, in internal/health/sql/health.sql.

-- name: vacuum_try_lock
-- The vacuum guard's session advisory lock, taken only on a direct session
-- (the backend serving the statement is the connection's own): through a
-- transaction-mode pooler the unlock could run on another server session.
-- NULL: not a direct session (no lock taken); false: another process has it.
--   $1 lock key text (maintenance.vacuumLockKey)  $2 the connection's backend PID
SELECT CASE WHEN pg_backend_pid() = $2::bigint THEN pg_try_advisory_lock(hashtextextended($1, 0)) END;

-- name: vacuum_unlock
--   $1 lock key text, as vacuum_try_lock
SELECT pg_advisory_unlock(hashtextextended($1, 0));

-- name: vacuum_guard_state
-- What the vacuum guard decides on: the hot table's dead tuples and the
-- seconds since its last (auto)vacuum, over its partitions (migration 016),
-- whether this role may vacuum it, and whether a vacuum of any partition is
-- running. NULL seconds: never vacuumed. Catalog and statistics only (not
-- the vacuum_state view): a role the guard runs as needs no privilege on
-- the schema's views to find out it may not vacuum.
SELECT coalesce(sum(s.n_dead_tup), 0)::bigint,
       extract(epoch FROM now() - max(greatest(s.last_vacuum, s.last_autovacuum)))::float8,
       pg_has_role(c.relowner, 'USAGE'),
       EXISTS (SELECT FROM pg_stat_progress_vacuum AS p
               JOIN pg_inherits AS pi ON pi.inhrelid = p.relid
               WHERE pi.inhparent = c.oid)
FROM pg_class AS c
JOIN pg_inherits AS i ON i.inhparent = c.oid
JOIN pg_stat_user_tables AS s ON s.relid = i.inhrelid
WHERE c.oid = to_regclass({{schema_lit}} || '.jobs')
GROUP BY c.oid, c.relowner;

-- name: vacuum_jobs
-- SKIP_LOCKED: a second vacuum of the table skips it instead of waiting for
-- the first. ANALYZE too: where autovacuum does not vacuum, it does not
-- analyze either, and the claim plan needs current statistics. Cannot run
-- inside a transaction.
VACUUM (SKIP_LOCKED, ANALYZE) {{schema}}.jobs;

-- name: retention_begin
-- First statement of a retention pass's transaction: SET LOCAL of the
-- statement timeout and the idle-in-transaction timeout (set_config with
-- is_local = true), then the pass's transaction advisory lock.
--   $1 statement_timeout in ms (text)  $2 idle_in_transaction_session_timeout
--   in ms (text)  $3 lock key text (maintenance.RetentionLockKey)
-- The last column says whether the lock was taken.
SELECT set_config('statement_timeout', $1, true),
       set_config('idle_in_transaction_session_timeout', $2, true),
       pg_try_advisory_xact_lock(hashtextextended($3, 0));

-- name: drop_schema
-- Drops the installation and everything in it (skiplocktest.NewSchema's
-- cleanup of a test's own schema).
DROP SCHEMA IF EXISTS {{schema}} CASCADE;

-- name: ensure_done_partitions
-- Creates the daily partitions from today through $1 days ahead (migration
-- 002/005's function, which also drains the default partition).
--   $1 days ahead
SELECT {{schema}}.ensure_done_partitions($1::int);

-- name: drop_done_partitions
-- Drops the daily partitions whose day ended more than $1 ago.
--   $1 keep (microseconds)
SELECT {{schema}}.drop_done_partitions($1::bigint * interval '1 microsecond');

-- name: maintain_partitions
-- One whole partition pass in one statement, so in one implicit transaction
-- that never waits on the client: a process paused mid-pass (GC, SIGSTOP,
-- a stalled VM) cannot sit idle in transaction holding the new partitions'
-- locks while every archive completion queues behind them. The subquery
-- (OFFSET 0 keeps it unflattened) sets lock_timeout for the DDL and takes
-- the pass's advisory lock once; the rest runs only if it was free.
--   $1 lock key  $2 archive  $3 days ahead  $4 keep (µs, <= 0 keeps all)  $5 lock_timeout (ms)
SELECT l.got,
       CASE WHEN l.got AND $2::boolean THEN {{schema}}.ensure_done_partitions($3::int) ELSE 0 END,
       CASE WHEN l.got AND $4::bigint > 0
            THEN {{schema}}.drop_done_partitions($4::bigint * interval '1 microsecond') ELSE 0 END
FROM (SELECT set_config('lock_timeout', $5::bigint::text, true) AS lt,
             pg_try_advisory_xact_lock(hashtextextended($1::text, 0)) AS got
      OFFSET 0) AS l;

-- name: purge_unique_keys
-- One bounded batch of the held-keys pass: rows of unique_keys whose hold
-- ended (a unique period's bucket, a throttle's window; migration 019),
-- oldest first, through unique_keys_held_until. A row being taken again by
-- an enqueue is locked by it and skipped.
--   $1 batch size
DELETE FROM {{schema}}.unique_keys AS u
WHERE (u.queue, u.unique_key) IN (
    SELECT k.queue, k.unique_key FROM {{schema}}.unique_keys AS k
    WHERE k.held_until <= now()
    ORDER BY k.held_until
    LIMIT $1
    FOR UPDATE SKIP LOCKED);

-- History export (history.go) -------------------------------------------------

-- name: history_days
-- The UTC days of the jobs_done partitions (jobs_done_YYYYMMDD) whose day
-- has ended, oldest first, with whether the day ended more than $1 ago
-- (retention: due for the drop; $1 <= 0: none is). Catalog reads only.
--   $1 keep (microseconds)
SELECT to_date(substr(c.relname, 11), 'YYYYMMDD') AS day,
       $1::bigint > 0 AND (to_date(substr(c.relname, 11), 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC'
           <= now() - $1::bigint * interval '1 microsecond' AS expired
FROM pg_inherits AS i
JOIN pg_class AS c ON c.oid = i.inhrelid
WHERE i.inhparent = to_regclass({{schema_lit}} || '.jobs_done')
  AND c.relname ~ '^jobs_done_[0-9]{8}$'
  AND (to_date(substr(c.relname, 11), 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC' <= now()
ORDER BY 1;

-- name: history_rows
-- Every finished job of one UTC day ($1, $2: its bounds), as one JSON
-- object per row with every column of jobs_done (a column added later is
-- carried), in id order; a sealed payload as its envelope, in payload
-- (envelope(): sealed is not a column of the export). Partition pruning
-- reads the day's partition only.
--   $1 day start  $2 day end
SELECT ((to_jsonb(d) - 'sealed') || jsonb_build_object('payload', {{schema}}.envelope(d.payload, d.sealed)))::text, d.id
FROM {{schema}}.jobs_done AS d
WHERE d.finished_at >= $1 AND d.finished_at < $2
ORDER BY d.id;

-- name: history_drop_day
-- Drops one exported day's partition if it holds exactly the rows its
-- export wrote (drop_done_partition). lock_timeout bounds the wait for the
-- partition's lock, as in maintain_partitions.
--   $1 day  $2 rows exported  $3 lock_timeout (ms)
SELECT {{schema}}.drop_done_partition($1::date, $2::bigint)
FROM (SELECT set_config('lock_timeout', $3::bigint::text, true) OFFSET 0) AS l;

-- name: history_import
-- Brings exported rows back into jobs_done (for investigation: `job get`
-- finds them until retention drops their day again): $1 is a JSON array of
-- exported objects; a row already there (same id and finished_at) is not
-- inserted twice. A day without a partition lands in jobs_done_default.
-- Returns how many rows it inserted.
--   $1 rows jsonb (array)
WITH r AS (
    SELECT * FROM jsonb_populate_recordset(NULL::{{schema}}.jobs_done, $1::jsonb)
),
ins AS (
    INSERT INTO {{schema}}.jobs_done
    SELECT r.* FROM r
    WHERE NOT EXISTS (SELECT 1 FROM {{schema}}.jobs_done AS d WHERE d.id = r.id AND d.finished_at = r.finished_at)
    RETURNING 1
)
SELECT count(*) FROM ins;

-- name: history_dead_days
-- The UTC days of dead_at that jobs_dead holds rows of and that have ended,
-- oldest first, with whether the day ended more than $1 ago (retention: due
-- for the purge; $1 <= 0: none is). A skip scan of jobs_dead_dead_at: one
-- index probe a day, whatever the number of dead letters.
--   $1 keep (microseconds)
WITH RECURSIVE day AS (
    (SELECT (d.dead_at AT TIME ZONE 'UTC')::date AS day
     FROM {{schema}}.jobs_dead AS d
     ORDER BY d.dead_at
     LIMIT 1)
    UNION ALL
    SELECT (SELECT (d.dead_at AT TIME ZONE 'UTC')::date
            FROM {{schema}}.jobs_dead AS d
            WHERE d.dead_at >= (day.day + 1)::timestamp AT TIME ZONE 'UTC'
            ORDER BY d.dead_at
            LIMIT 1)
    FROM day
    WHERE day.day IS NOT NULL
)
SELECT day.day,
       $1::bigint > 0 AND (day.day + 1)::timestamp AT TIME ZONE 'UTC'
           <= now() - $1::bigint * interval '1 microsecond' AS expired
FROM day
WHERE day.day IS NOT NULL
  AND (day.day + 1)::timestamp AT TIME ZONE 'UTC' <= now()
ORDER BY 1;

-- name: history_dead_rows
-- Every dead letter of one UTC day of dead_at ($1, $2: its bounds), as one
-- JSON object per row with every column of jobs_dead (a column added later
-- is carried), in id order; a sealed payload as in history_rows.
--   $1 day start  $2 day end
SELECT ((to_jsonb(d) - 'sealed') || jsonb_build_object('payload', {{schema}}.envelope(d.payload, d.sealed)))::text, d.id
FROM {{schema}}.jobs_dead AS d
WHERE d.dead_at >= $1 AND d.dead_at < $2
ORDER BY d.id;

-- name: history_dead_lock_day
-- Locks one day's dead letters for its export and purge, in the
-- transaction that does both: no replay or purge removes one of them
-- between the export and the purge (they wait for the transaction). Returns
-- how many it locked.
--   $1 day start  $2 day end
SELECT count(*)
FROM (SELECT 1
      FROM {{schema}}.jobs_dead AS d
      WHERE d.dead_at >= $1 AND d.dead_at < $2
      FOR UPDATE) AS l;

-- name: history_dead_purge_day
-- Deletes one exported day of dead letters if the day still holds exactly
-- the rows its export wrote (their count and id range; the rows were locked
-- by history_dead_lock_day before the export read them), else nothing.
-- Returns whether they matched and how many rows it deleted.
--   $1 day start  $2 day end  $3 rows exported  $4 min id  $5 max id
WITH day AS (
    SELECT d.id
    FROM {{schema}}.jobs_dead AS d
    WHERE d.dead_at >= $1 AND d.dead_at < $2
    FOR UPDATE
),
fits AS (
    SELECT count(*) = $3::bigint AND coalesce(min(day.id), 0) = $4::bigint
           AND coalesce(max(day.id), 0) = $5::bigint AS ok
    FROM day
),
gone AS (
    DELETE FROM {{schema}}.jobs_dead AS d
    USING day, fits
    WHERE d.id = day.id AND fits.ok
    RETURNING 1
)
SELECT (SELECT ok FROM fits), (SELECT count(*) FROM gone);

-- name: history_import_dead
-- Brings exported dead letters back into jobs_dead (for investigation:
-- `job get`, `dead list` and a replay find them until retention purges
-- their day again): $1 is a JSON array of exported objects; a dead letter
-- already there (same id) is not inserted twice. error_signature is
-- generated from last_error, not read. Returns how many rows it inserted.
--   $1 rows jsonb (array)
WITH r AS (
    SELECT * FROM jsonb_populate_recordset(NULL::{{schema}}.jobs_dead, $1::jsonb)
),
ins AS (
    INSERT INTO {{schema}}.jobs_dead (id, priority, attempts, max_attempts, run_at, created_at, dead_at, queue, kind, reason, locked_by, unique_key, tenant, entity, last_error, payload, sealed, metadata, limit_weight)
    SELECT r.id, r.priority, r.attempts, r.max_attempts, r.run_at, r.created_at, r.dead_at, r.queue, r.kind, r.reason,
           r.locked_by, r.unique_key, r.tenant, r.entity, r.last_error, r.payload, r.sealed, r.metadata, r.limit_weight
    FROM r
    ON CONFLICT (id) DO NOTHING
    RETURNING 1
)
SELECT count(*) FROM ins;
