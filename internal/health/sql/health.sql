-- Queries over the health pack of migration 002 (views and functions in the
-- schema). Each statement is named ("-- name: x") and rendered per schema.

-- name: reader_settings
-- First in every health read's pipeline (one implicit transaction; collect,
-- scanOne): no JIT. While a long transaction pins the vacuum horizon the
-- jobs table's statistics count millions of dead versions, and the
-- estimates of these readers pass jit_above_cost: each read would compile
-- itself for a fraction of a second of a core (the aging pass did, 0.2–0.9
-- s, ten minutes into a pin), at every dashboard refresh and metrics
-- scrape. set_config(..., true): as the data layer's claim_settings.
SELECT set_config('jit', 'off', true);

-- name: queue_stats
SELECT s.queue, s.ready, s.scheduled, s.running, s.dead, s.oldest_ready_age_seconds, s.paused
FROM {{schema}}.queue_stats AS s
ORDER BY s.queue;

-- name: queue_seen
-- Whether anything ever named the queue: a ready or scheduled job (an index
-- probe on the claim index), a dead letter, a pause flag, a schedule, or a
-- live worker's queue list. No branch scans the hot table.
--   $1 queue
SELECT EXISTS (SELECT 1 FROM {{schema}}.jobs WHERE queue = $1 AND state = 'ready')
    OR EXISTS (SELECT 1 FROM {{schema}}.jobs_dead WHERE queue = $1)
    OR EXISTS (SELECT 1 FROM {{schema}}.queues WHERE name = $1)
    OR EXISTS (SELECT 1 FROM {{schema}}.schedules WHERE queue = $1)
    OR EXISTS (SELECT 1 FROM {{schema}}.workers WHERE stopped_at IS NULL AND $1 = ANY (queues));

-- name: vacuum_state
-- The hot table's vacuum state and the oldest transaction holding back the
-- xmin horizon (sessions and prepared transactions; slots carry no age).
SELECT v.n_live_tup, v.n_dead_tup, v.dead_ratio, v.last_autovacuum, v.last_vacuum,
       v.autovacuum_count, v.vacuum_count, v.autovacuum_threshold, v.n_tup_upd, v.n_tup_hot_upd,
       coalesce(v.reloptions, '{}'::text[]), v.heap_bytes,
       x.xact_age_seconds, x.pid, x.application_name
FROM {{schema}}.vacuum_state AS v
LEFT JOIN LATERAL (
    SELECT h.xact_age_seconds, h.pid, h.application_name
    FROM {{schema}}.xmin_holders AS h
    WHERE h.xact_age_seconds IS NOT NULL
    ORDER BY h.xact_age_seconds DESC
    LIMIT 1
) AS x ON true;

-- name: xmin_holders
--   $1 limit
SELECT h.holder, h.pid, coalesce(h.usename, ''), coalesce(h.application_name, ''),
       coalesce(h.backend_type, ''), coalesce(h.state, ''), h.backend_xmin::text,
       h.xmin_age_xids, h.xact_start, h.xact_age_seconds
FROM {{schema}}.xmin_holders AS h
LIMIT $1;

-- name: long_runners
--   $1 limit
SELECT r.id, r.queue, r.kind, r.attempt, r.max_attempts, r.locked_by, r.attempted_at,
       r.runtime_seconds, r.lease_expires_at, r.lease_expired
FROM {{schema}}.long_runners AS r
LIMIT $1;

-- name: wait_p99
SELECT w.queue, w.sampled, w.wait_p50_seconds, w.wait_p99_seconds
FROM {{schema}}.wait_p99 AS w
ORDER BY w.queue;

-- name: dead_letter_groups
-- Groups by kind and error signature, biggest first; the sample is the
-- newest dead letter of the group (its id and the first line of its error,
-- bounded), found by index probe.
--   $1 kind (NULL: every kind)  $2 limit
SELECT g.kind, g.error_signature, g.n, g.first_at, g.last_at,
       coalesce(s.sample_error, ''), coalesce(s.id, 0)
FROM (
    SELECT d.kind, d.error_signature, count(*) AS n, min(d.dead_at) AS first_at, max(d.dead_at) AS last_at
    FROM {{schema}}.jobs_dead AS d
    WHERE ($1::text IS NULL OR d.kind = $1::text)
    GROUP BY d.kind, d.error_signature
) AS g
LEFT JOIN LATERAL (
    SELECT d.id, left(split_part(coalesce(d.last_error, ''), E'\n', 1), 300) AS sample_error
    FROM {{schema}}.jobs_dead AS d
    WHERE d.kind = g.kind AND d.error_signature = g.error_signature
    ORDER BY d.dead_at DESC
    LIMIT 1
) AS s ON true
ORDER BY g.n DESC, g.kind, g.error_signature
LIMIT $2;

-- name: dead_letter_size
SELECT t.total, t.last_24h, t.prev_24h FROM {{schema}}.dead_letter_delta AS t;

-- name: dead_letter_daily
--   $1 days
SELECT d.day::timestamp, d.kind, d.count
FROM {{schema}}.dead_letter_daily AS d
WHERE d.day > (now() AT TIME ZONE 'UTC')::date - $1::int
ORDER BY d.day, d.kind;

-- name: workers
SELECT w.id, w.hostname, w.pid, w.queues, w.concurrency, w.running,
       w.claimed_total, w.completed_total, w.failed_total, w.claim_p99_ms,
       w.started_at, w.heartbeat_at, w.stopped_at,
       (w.stopped_at IS NULL AND w.heartbeat_at > now() - $1::bigint * interval '1 microsecond') AS live
FROM {{schema}}.workers AS w
ORDER BY live DESC, w.heartbeat_at DESC, w.id
LIMIT 1000;

-- name: worker_totals
-- Worker processes by state and their counters summed over every row (a
-- stopped process keeps its final counts, so the sums never go down while
-- rows are kept).
--   $1 live window (microseconds)
SELECT count(*) FILTER (WHERE w.stopped_at IS NULL AND w.heartbeat_at > now() - $1::bigint * interval '1 microsecond'),
       count(*) FILTER (WHERE w.stopped_at IS NULL AND w.heartbeat_at <= now() - $1::bigint * interval '1 microsecond'),
       count(*) FILTER (WHERE w.stopped_at IS NOT NULL),
       coalesce(sum(w.claimed_total), 0)::bigint,
       coalesce(sum(w.completed_total), 0)::bigint,
       coalesce(sum(w.failed_total), 0)::bigint
FROM {{schema}}.workers AS w;

-- name: done_partitions
SELECT c.relname::text, pg_get_expr(c.relpartbound, c.oid)
FROM pg_inherits AS i
JOIN pg_class AS c ON c.oid = i.inhrelid
WHERE i.inhparent = to_regclass({{schema_lit}} || '.jobs_done')
ORDER BY c.relname;

-- name: doctor_settings
-- The hot table's storage options and the server settings autovacuum needs.
-- The options are jobs_keyed's (migration 016): the partition vacuum keeps;
-- the ring's generations are emptied by TRUNCATE.
SELECT coalesce(c.reloptions, '{}'::text[]),
       current_setting('autovacuum'), current_setting('track_counts')
FROM pg_class AS c
WHERE c.oid = to_regclass({{schema_lit}} || '.jobs_keyed');

-- name: doctor_ready_index
-- The claim path's partial index: present, valid, with its definition.
SELECT i.indisvalid, i.indisready, pg_get_indexdef(i.indexrelid), coalesce(pg_get_expr(i.indpred, i.indrelid), '')
FROM pg_index AS i
WHERE i.indexrelid = to_regclass({{schema_lit}} || '.jobs_ready');

-- name: doctor_jobs_pages
-- The hot table's heap size in pages: below a few pages a sequential scan is
-- the planner's honest choice for a fenced write, above it only the primary
-- key is. Summed over the partitions (migration 016): the parent has no heap.
SELECT (coalesce(sum(pg_relation_size(i.inhrelid)), 0) / current_setting('block_size')::bigint)::bigint
FROM pg_inherits AS i
WHERE i.inhparent = to_regclass({{schema_lit}} || '.jobs');

-- name: doctor_notify
SELECT pg_notification_queue_usage();

-- name: doctor_stuck
-- Running jobs whose lease expired longer ago than $1: nobody is reaping.
--   $1 threshold (microseconds)
SELECT count(*) FILTER (WHERE j.lease_expires_at < now() - $1::bigint * interval '1 microsecond'),
       count(*) FILTER (WHERE j.lease_expires_at < now()),
       coalesce(extract(epoch FROM now() - min(j.lease_expires_at)), 0)::float8
FROM {{schema}}.jobs AS j
WHERE j.state = 'running' AND j.lease_expires_at < now();

-- name: doctor_live_workers
--   $1 live window (microseconds)
SELECT count(*)
FROM {{schema}}.workers AS w
WHERE w.stopped_at IS NULL AND w.heartbeat_at > now() - $1::bigint * interval '1 microsecond';

-- name: unhandled_kinds
-- Due ready jobs per queue and kind that no live worker serves (migration
-- 005's unhandled_kinds function), most first.
--   $1 live window (microseconds)
SELECT u.queue, u.kind, u.ready, u.oldest_ready_age_seconds
FROM {{schema}}.unhandled_kinds($1::bigint * interval '1 microsecond') AS u;

-- name: orphan_schedules
-- Schedules whose queue and kind no live worker serves (the predicate of
-- the unhandled_kinds function): each fire waits forever, typically
-- because the code that declared the schedule was removed. With the fires
-- waiting (ready jobs of its queue whose unique key is the schedule's,
-- schedule:<name>:<fire time>; counted for the orphans only) and the oldest
-- one's fire time. Empty while no worker is live at all (the workers check
-- says so).
--   $1 live window (microseconds)
WITH live AS MATERIALIZED (
    SELECT w.handles, w.queues
    FROM {{schema}}.workers AS w
    WHERE w.stopped_at IS NULL AND w.heartbeat_at > now() - $1::bigint * interval '1 microsecond'
),
orphans AS MATERIALIZED (
    SELECT s.name, s.queue, s.kind, s.owner
    FROM {{schema}}.schedules AS s
    WHERE EXISTS (SELECT 1 FROM live)
      AND NOT EXISTS (
        SELECT 1
        FROM live AS l
        LEFT JOIN LATERAL jsonb_array_elements(l.handles) AS p(pool) ON true
        WHERE (l.handles IS NULL AND s.queue = ANY (l.queues))
           OR ((p.pool -> 'queues') ? s.queue
               AND (jsonb_typeof(p.pool -> 'kinds') IS DISTINCT FROM 'array' OR (p.pool -> 'kinds') ? s.kind)))
)
SELECT o.name, o.queue, o.kind, coalesce(o.owner, ''), f.waiting, f.oldest
FROM orphans AS o
CROSS JOIN LATERAL (
    SELECT count(*) AS waiting, min(j.run_at) AS oldest
    FROM {{schema}}.jobs AS j
    WHERE j.queue = o.queue AND j.state = 'ready' AND j.kind = o.kind
      AND starts_with(j.unique_key, 'schedule:' || o.name || ':')
) AS f
ORDER BY o.name;

-- The pressure suite (bench/pressure.go) -------------------------------------

-- name: jobs_table_sample
-- The hot table's dead tuples, heap size, size with indexes and TOAST, and
-- autovacuum count, sampled once a second by the pressure suite, and the age
-- of the oldest transaction holding an xid anywhere on the server other than
-- the suite's own stressors (an xid in any database is in every snapshot, so
-- it holds this table's horizon too). Catalog and statistics reads only: it
-- never scans the table. Summed over its partitions (migration 016).
SELECT coalesce(sum(s.n_dead_tup), 0)::bigint, coalesce(sum(pg_relation_size(i.inhrelid)), 0)::bigint,
       coalesce(sum(pg_total_relation_size(i.inhrelid)), 0)::bigint, coalesce(sum(s.autovacuum_count), 0)::bigint,
       coalesce((SELECT max(extract(epoch FROM now() - a.xact_start))
                 FROM pg_stat_activity AS a
                 WHERE a.backend_xid IS NOT NULL AND a.pid <> pg_backend_pid()
                   AND a.application_name NOT LIKE 'skiplock-pressure-%'), 0)::float8
FROM pg_inherits AS i
LEFT JOIN pg_stat_user_tables AS s ON s.relid = i.inhrelid
WHERE i.inhparent = to_regclass({{schema_lit}} || '.jobs');

-- name: pressure_pin_horizon
-- The idle-in-transaction stressor: run inside a transaction the caller
-- leaves open, it takes a transaction id, which holds the xmin horizon of
-- every table in the database until the transaction ends.
SELECT txid_current();

-- name: pressure_scan_jobs
-- The REPEATABLE READ reader stressor: a full scan of the hot table, run
-- again and again inside one long REPEATABLE READ transaction (whose
-- snapshot pins the horizon) as a report or an analytics query would.
SELECT count(*), coalesce(sum(octet_length(j.kind)), 0)::bigint
FROM {{schema}}.jobs AS j;

-- The pin: who holds the horizon and what it costs ---------------------------

-- name: horizon_holders
-- Everything holding back this database's xmin horizon, the oldest xmin
-- first: its sessions holding a snapshot or an xid; sessions of any other
-- database holding an xid (an xid is in every snapshot of the server, so the
-- queue's own snapshots, and so vacuum, stop at it); prepared transactions of
-- any database; replication slots with an xmin (hot_standby_feedback, logical
-- slots). The query column is the statement's first words, comments removed
-- and cut before the first quote, dollar sign or digit, so it never carries
-- a literal (no payload, no secret).
--   $1 limit
SELECT h.holder, h.pid, h.database, h.application, h.client_addr, h.state, h.backend_type,
       h.xmin_age_xids, h.xact_age_seconds, h.other_database, h.query
FROM (
    SELECT 'backend'::text AS holder, a.pid, coalesce(a.datname::text, '') AS database,
           coalesce(a.application_name, '') AS application, coalesce(a.client_addr::text, '') AS client_addr,
           coalesce(a.state, '') AS state, coalesce(a.backend_type, '') AS backend_type,
           greatest(age(a.backend_xmin), age(a.backend_xid))::bigint AS xmin_age_xids,
           extract(epoch FROM now() - a.xact_start)::float8 AS xact_age_seconds,
           a.datname IS DISTINCT FROM current_database() AS other_database,
           left(btrim(regexp_replace(
               substring(regexp_replace(regexp_replace(coalesce(a.query, ''), '/\*.*?\*/', ' ', 'g'),
                                        '--[^\n]*', ' ', 'g') FROM '^[^''$0-9]*'),
               '\s+', ' ', 'g')), 60) AS query
    FROM pg_stat_activity AS a
    WHERE a.pid <> pg_backend_pid()
      AND a.backend_type <> 'autovacuum worker'
      AND (a.backend_xid IS NOT NULL OR (a.backend_xmin IS NOT NULL AND a.datname = current_database()))
  UNION ALL
    SELECT 'prepared_xact', NULL, p.database::text, p.gid, '', 'prepared', '',
           age(p.transaction)::bigint, extract(epoch FROM now() - p.prepared)::float8,
           p.database <> current_database(), ''
    FROM pg_prepared_xacts AS p
  UNION ALL
    SELECT 'replication_slot', s.active_pid, coalesce(s.database::text, ''), s.slot_name::text, '',
           CASE WHEN s.active THEN 'active' ELSE 'inactive' END, s.slot_type,
           age(s.xmin)::bigint, NULL, s.database IS NOT NULL AND s.database <> current_database(), ''
    FROM pg_replication_slots AS s
    WHERE s.xmin IS NOT NULL
) AS h
ORDER BY h.xmin_age_xids DESC NULLS LAST, h.xact_age_seconds DESC NULLS LAST
LIMIT $1;

-- name: claim_cost
-- The claim's p99 now and its baseline, from the live workers' beats (the
-- worst live worker of each; the baseline moves only while nothing pins the
-- horizon, see worker_beat), and the hot table's dead tuples.
--   $1 live window (microseconds)
SELECT max(w.claim_p99_ms), max(w.claim_p99_baseline_ms), count(*)::int,
       (SELECT v.n_dead_tup FROM {{schema}}.vacuum_state AS v)
FROM {{schema}}.workers AS w
WHERE w.stopped_at IS NULL AND w.heartbeat_at > now() - $1::bigint * interval '1 microsecond';

-- name: replica_status
-- How stale reads on this server are. On a standby: whether its WAL
-- receiver runs, and the seconds since the last replayed transaction
-- committed on the primary, or 0 when everything received is replayed while
-- streaming (an idle primary sends nothing to replay, so
-- now() - pg_last_xact_replay_timestamp() alone would keep growing while
-- nothing is stale). Not a standby (a promoted one, or a primary given as
-- the replica): in_recovery false, lag 0. Reads no table.
SELECT r.in_recovery,
       r.in_recovery AND EXISTS (SELECT 1 FROM pg_stat_wal_receiver) AS streaming,
       CASE WHEN NOT r.in_recovery THEN 0
            WHEN EXISTS (SELECT 1 FROM pg_stat_wal_receiver)
                 AND pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn() THEN 0
            ELSE coalesce(extract(epoch FROM clock_timestamp() - pg_last_xact_replay_timestamp()), 0)
       END::float8 AS lag_seconds,
       pg_last_xact_replay_timestamp()
FROM (SELECT pg_is_in_recovery() AS in_recovery) AS r;

-- name: error_signature
-- An error text normalised as jobs_dead.error_signature is (numbers, ids,
-- quoted strings and hex replaced), for matching a signature an operator
-- typed against the dead-letter groups.
--   $1 error text
SELECT {{schema}}.error_signature($1);

-- name: job_counts
-- Exact counts of ready and running jobs and of dead letters (skiplock dev's
-- progress line: a small development database, so count(*) is fine).
SELECT (SELECT count(*) FROM {{schema}}.jobs WHERE state = 'ready'),
       (SELECT count(*) FROM {{schema}}.jobs WHERE state = 'running'),
       (SELECT count(*) FROM {{schema}}.jobs_dead);
