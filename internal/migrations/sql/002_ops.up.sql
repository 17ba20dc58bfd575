-- skiplock operations pack: the health views and functions behind `skiplock
-- stats`, `doctor`, `top`, `dlq`, the Prometheus collector and the retention
-- services. Every object is usable from psql, e.g.
--   SELECT * FROM skiplock.queue_stats;
--   SELECT * FROM skiplock.vacuum_state;
--   SELECT skiplock.drop_done_partitions(interval '7 days');
-- Nothing here reads jobs_done, and everything that reads jobs goes through
-- its partial indexes, so the views stay cheap however long the history is.

-- Error signatures -----------------------------------------------------------

-- Normalises an error message for grouping: the first line only, with quoted
-- strings, UUIDs, hex ids and numbers replaced by placeholders, whitespace
-- collapsed and at most 200 characters. Idempotent: the signature of a
-- signature is itself, so a signature copied from `skiplock dlq list` can be
-- passed back as a filter.
CREATE FUNCTION {{schema}}.error_signature(err text)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT left(btrim(
        regexp_replace(
        regexp_replace(
        regexp_replace(
        regexp_replace(
        regexp_replace(
            split_part(coalesce(err, ''), E'\n', 1),
            '"[^"]*"|''[^'']*''|`[^`]*`', '<str>', 'g'),
            '[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}', '<uuid>', 'g'),
            '\m(0[xX][0-9a-fA-F]+|(?=[0-9]*[a-fA-F])(?=[a-fA-F]*[0-9])[0-9a-fA-F]{6,})\M', '<hex>', 'g'),
            '[0-9]+(\.[0-9]+)?', '<n>', 'g'),
            '\s+', ' ', 'g')), 200)
$$;
COMMENT ON FUNCTION {{schema}}.error_signature(text) IS
    'skiplock: normalises an error for grouping (first line; quoted strings, UUIDs, hex ids and numbers become <str>, <uuid>, <hex>, <n>; at most 200 characters). Idempotent.';

-- Dead letters are grouped and replayed by signature: store it once, at
-- insert, instead of running the regular expressions on every triage query.
ALTER TABLE {{schema}}.jobs_dead
    ADD COLUMN error_signature text NOT NULL
    GENERATED ALWAYS AS ({{schema}}.error_signature(last_error)) STORED;
COMMENT ON COLUMN {{schema}}.jobs_dead.error_signature IS
    'skiplock: error_signature(last_error), maintained by PostgreSQL (generated column).';

-- Triage: group by kind and signature, newest sample per group by index probe.
CREATE INDEX jobs_dead_signature ON {{schema}}.jobs_dead (kind, error_signature, dead_at);
-- queue_stats counts dead letters per queue with an index-only skip scan.
CREATE INDEX jobs_dead_queue ON {{schema}}.jobs_dead (queue);

-- Backlog ----------------------------------------------------------------------

-- Per queue: ready (run_at <= now), scheduled (run_at > now), running, dead,
-- the age of the oldest ready job (queue lag) and whether it is paused.
-- One pass over each source, each through an index: ready rows through the
-- partial ready index, running rows through the partial running index, dead
-- letters through the narrow jobs_dead (queue) index (index-only once
-- autovacuum has set the visibility map). jobs_done is never read, and
-- sequential scans are switched off for this function: under vacuum debt the
-- hot table's heap is mostly dead tuples, and a dashboard refreshing every
-- few seconds must not read all of it. The cost follows the backlog and the
-- dead-letter count, never the history or the bloat.
CREATE FUNCTION {{schema}}.queue_stats_rows()
RETURNS TABLE (queue text, ready bigint, scheduled bigint, running bigint, dead bigint,
               oldest_ready_age_seconds float8, paused boolean)
LANGUAGE sql STABLE
SET enable_seqscan = off
AS $$
WITH ready AS (
    SELECT j.queue,
           count(*) FILTER (WHERE j.run_at <= now()) AS ready,
           count(*) FILTER (WHERE j.run_at > now())  AS scheduled,
           min(j.run_at) FILTER (WHERE j.run_at <= now()) AS oldest
    FROM {{schema}}.jobs AS j
    WHERE j.state = 'ready'
    GROUP BY j.queue
),
running AS (
    SELECT j.queue, count(*) AS running
    FROM {{schema}}.jobs AS j
    WHERE j.state = 'running'
    GROUP BY j.queue
),
dead AS (
    SELECT d.queue, count(*) AS dead
    FROM {{schema}}.jobs_dead AS d
    GROUP BY d.queue
),
all_queues AS (
    SELECT r.queue FROM ready AS r
    UNION SELECT n.queue FROM running AS n
    UNION SELECT d.queue FROM dead AS d
    UNION SELECT q.name FROM {{schema}}.queues AS q
)
SELECT a.queue,
       coalesce(r.ready, 0)::bigint,
       coalesce(r.scheduled, 0)::bigint,
       coalesce(n.running, 0)::bigint,
       coalesce(d.dead, 0)::bigint,
       coalesce(extract(epoch FROM now() - r.oldest), 0)::float8,
       coalesce(p.paused, false)
FROM all_queues AS a
LEFT JOIN ready AS r ON r.queue = a.queue
LEFT JOIN running AS n ON n.queue = a.queue
LEFT JOIN dead AS d ON d.queue = a.queue
LEFT JOIN {{schema}}.queues AS p ON p.name = a.queue
ORDER BY a.queue
$$;
COMMENT ON FUNCTION {{schema}}.queue_stats_rows() IS
    'skiplock: the rows of the queue_stats view (a function so that it can plan with enable_seqscan = off).';

CREATE VIEW {{schema}}.queue_stats AS
SELECT s.queue, s.ready, s.scheduled, s.running, s.dead, s.oldest_ready_age_seconds, s.paused
FROM {{schema}}.queue_stats_rows() AS s;
COMMENT ON VIEW {{schema}}.queue_stats IS
    'skiplock: per queue ready (run_at <= now), scheduled (run_at > now), running and dead jobs, oldest_ready_age_seconds (queue lag; SLO < 120) and paused. Read through the partial indexes; never reads jobs_done.';

-- Running jobs, longest first, with their owner and lease. No payload.
CREATE VIEW {{schema}}.long_runners AS
SELECT j.id, j.queue, j.kind, j.attempts AS attempt, j.max_attempts, j.locked_by,
       j.attempted_at,
       extract(epoch FROM now() - j.attempted_at)::float8 AS runtime_seconds,
       j.lease_expires_at,
       j.lease_expires_at < now() AS lease_expired,
       j.cancel_requested, j.tenant, j.entity
FROM {{schema}}.jobs AS j
WHERE j.state = 'running'
ORDER BY j.attempted_at, j.id;
COMMENT ON VIEW {{schema}}.long_runners IS
    'skiplock: running jobs by runtime (longest first) with locked_by and lease_expires_at; lease_expired rows are waiting for the reaper. Never shows payloads.';

-- Wait percentiles per queue over ready jobs that are due. The sample is
-- bounded: at most the first 10,000 due jobs of each queue in claim order
-- (the oldest, for jobs of equal priority), so beyond that backlog the
-- figure is an upper bound of the true percentile.
CREATE VIEW {{schema}}.wait_p99 AS
WITH RECURSIVE ready_queues (queue) AS (
    (SELECT j.queue FROM {{schema}}.jobs AS j WHERE j.state = 'ready' ORDER BY j.queue LIMIT 1)
  UNION ALL
    SELECT (SELECT j.queue FROM {{schema}}.jobs AS j
            WHERE j.state = 'ready' AND j.queue > r.queue ORDER BY j.queue LIMIT 1)
    FROM ready_queues AS r
    WHERE r.queue IS NOT NULL
)
SELECT r.queue, s.sampled, s.wait_p50_seconds, s.wait_p99_seconds
FROM ready_queues AS r
CROSS JOIN LATERAL (
    SELECT count(*) AS sampled,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY x.wait)::float8  AS wait_p50_seconds,
           percentile_cont(0.99) WITHIN GROUP (ORDER BY x.wait)::float8 AS wait_p99_seconds
    FROM (
        SELECT extract(epoch FROM now() - j.run_at)::float8 AS wait
        FROM {{schema}}.jobs AS j
        WHERE j.state = 'ready' AND j.queue = r.queue AND j.run_at <= now()
        ORDER BY j.priority DESC, j.run_at, j.id
        LIMIT 10000
    ) AS x
) AS s
WHERE r.queue IS NOT NULL AND s.sampled > 0;
COMMENT ON VIEW {{schema}}.wait_p99 IS
    'skiplock: p50/p99 of now() - run_at over due ready jobs per queue, sampled from at most 10,000 jobs per queue in claim order (an upper bound beyond that).';

-- Dead letters -----------------------------------------------------------------

CREATE VIEW {{schema}}.dead_letter_daily AS
SELECT (d.dead_at AT TIME ZONE 'UTC')::date AS day, d.kind, count(*) AS count
FROM {{schema}}.jobs_dead AS d
GROUP BY 1, 2
ORDER BY 1 DESC, 2;
COMMENT ON VIEW {{schema}}.dead_letter_daily IS
    'skiplock: dead letters per UTC day and kind. Flat is healthy; a climbing kind is a broken handler.';

CREATE VIEW {{schema}}.dead_letter_delta AS
WITH t AS MATERIALIZED (
    SELECT (SELECT count(*) FROM {{schema}}.jobs_dead) AS total,
           (SELECT count(*) FROM {{schema}}.jobs_dead AS d
            WHERE d.dead_at > now() - interval '24 hours') AS last_24h,
           (SELECT count(*) FROM {{schema}}.jobs_dead AS d
            WHERE d.dead_at > now() - interval '48 hours'
              AND d.dead_at <= now() - interval '24 hours') AS prev_24h
)
SELECT t.total, t.last_24h, t.prev_24h, t.last_24h - t.prev_24h AS delta
FROM t;
COMMENT ON VIEW {{schema}}.dead_letter_delta IS
    'skiplock: dead-letter size (total), new dead letters in the last 24 hours and in the 24 hours before, and their difference (delta > 0: growing).';

-- Vacuum -----------------------------------------------------------------------

-- The hot table's vacuum state: the leading indicator of vacuum debt.
-- autovacuum_threshold is the dead-tuple count at which autovacuum should
-- start on it (per-table settings, else the server's).
CREATE VIEW {{schema}}.vacuum_state AS
SELECT c.relname::text AS table_name,
       s.n_live_tup, s.n_dead_tup,
       CASE WHEN s.n_live_tup + s.n_dead_tup > 0
            THEN s.n_dead_tup::float8 / (s.n_live_tup + s.n_dead_tup) ELSE 0 END AS dead_ratio,
       s.last_autovacuum, s.last_vacuum, s.autovacuum_count, s.vacuum_count,
       s.last_autoanalyze, s.n_tup_upd, s.n_tup_hot_upd,
       c.reloptions,
       (coalesce((SELECT o.option_value FROM pg_options_to_table(c.reloptions) AS o
                  WHERE o.option_name = 'autovacuum_vacuum_threshold'),
                 current_setting('autovacuum_vacuum_threshold'))::float8
        + coalesce((SELECT o.option_value FROM pg_options_to_table(c.reloptions) AS o
                    WHERE o.option_name = 'autovacuum_vacuum_scale_factor'),
                   current_setting('autovacuum_vacuum_scale_factor'))::float8
          * greatest(c.reltuples, 0))::float8 AS autovacuum_threshold,
       pg_relation_size(c.oid) AS heap_bytes
FROM pg_class AS c
JOIN pg_stat_user_tables AS s ON s.relid = c.oid
WHERE c.oid = '{{schema}}.jobs'::regclass;
COMMENT ON VIEW {{schema}}.vacuum_state IS
    'skiplock: the hot jobs table''s live and dead tuples, dead ratio, last (auto)vacuum, per-table settings and the dead-tuple count at which autovacuum starts. Dead tuples climbing while last_autovacuum ages = vacuum debt.';

-- Who holds back the xmin horizon (dead tuples newer than it cannot be
-- removed by any vacuum): transactions of this database, oldest first,
-- prepared transactions and replication slots. Autovacuum workers and the
-- session reading the view are left out. Query texts are not shown (they
-- may carry payloads); look a pid up in pg_stat_activity under access
-- control.
CREATE VIEW {{schema}}.xmin_holders AS
SELECT h.*
FROM (
    SELECT 'backend'::text AS holder, a.pid, a.usename::text AS usename,
           a.application_name, a.client_addr::text AS client_addr, a.backend_type, a.state,
           coalesce(a.backend_xmin, a.backend_xid) AS backend_xmin,
           greatest(age(a.backend_xmin), age(a.backend_xid)) AS xmin_age_xids,
           a.xact_start,
           extract(epoch FROM now() - a.xact_start)::float8 AS xact_age_seconds,
           a.state_change, a.wait_event_type, a.wait_event
    FROM pg_stat_activity AS a
    WHERE (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL)
      AND a.pid <> pg_backend_pid()
      AND a.backend_type <> 'autovacuum worker'
      AND (a.datname = current_database() OR a.datid IS NULL)
  UNION ALL
    SELECT 'prepared_xact', NULL, p.owner::text, p.gid, NULL, NULL, 'prepared',
           p.transaction, age(p.transaction),
           p.prepared, extract(epoch FROM now() - p.prepared)::float8,
           NULL, NULL, NULL
    FROM pg_prepared_xacts AS p
    WHERE p.database = current_database()
  UNION ALL
    SELECT 'replication_slot', s.active_pid, NULL, s.slot_name::text, NULL, s.slot_type,
           CASE WHEN s.active THEN 'active' ELSE 'inactive' END,
           s.xmin, age(s.xmin), NULL, NULL, NULL, NULL, NULL
    FROM pg_replication_slots AS s
    WHERE s.xmin IS NOT NULL AND (s.database IS NULL OR s.database = current_database())
) AS h
ORDER BY h.xmin_age_xids DESC NULLS LAST, h.xact_age_seconds DESC NULLS LAST;
COMMENT ON VIEW {{schema}}.xmin_holders IS
    'skiplock: oldest holders of the xmin horizon (sessions of this database, prepared transactions, replication slots). A long one pins every dead tuple newer than it: vacuum runs but cannot clean.';

-- Finished-job partitions ------------------------------------------------------

-- Safety net for archive mode: a completion whose day has no partition yet
-- lands here instead of failing. ensure_done_partitions moves such rows into
-- their day's partition, so in normal operation this stays empty.
CREATE TABLE {{schema}}.jobs_done_default PARTITION OF {{schema}}.jobs_done DEFAULT;
COMMENT ON TABLE {{schema}}.jobs_done_default IS
    'skiplock: catches archived jobs whose day has no partition yet; ensure_done_partitions() drains it.';

-- Creates the daily partitions jobs_done_YYYYMMDD (UTC days) from today
-- through days_ahead days ahead, plus one for every day that has rows
-- waiting in jobs_done_default (which it moves there). Each partition is
-- created as a table and then attached, which takes a weaker lock on
-- jobs_done than CREATE TABLE ... PARTITION OF. Returns how many it created.
-- Concurrent callers serialize on an advisory lock.
CREATE FUNCTION {{schema}}.ensure_done_partitions(days_ahead integer DEFAULT 7)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    today   date := (now() AT TIME ZONE 'UTC')::date;
    d       date;
    part    text;
    lo      timestamptz;
    hi      timestamptz;
    created integer := 0;
BEGIN
    IF days_ahead IS NULL OR days_ahead < 0 OR days_ahead > 366 THEN
        RAISE EXCEPTION 'skiplock: days_ahead: must be between 0 and 366, got %', days_ahead
            USING ERRCODE = '22023';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended({{schema_lit}} || '.partitions', 0));
    FOR d IN
        SELECT g::date FROM generate_series(today, today + days_ahead, interval '1 day') AS g
        UNION
        SELECT DISTINCT (x.finished_at AT TIME ZONE 'UTC')::date FROM {{schema}}.jobs_done_default AS x
        ORDER BY 1
    LOOP
        part := 'jobs_done_' || to_char(d, 'YYYYMMDD');
        CONTINUE WHEN to_regclass(format('{{schema}}.%I', part)) IS NOT NULL;
        lo := d::timestamp AT TIME ZONE 'UTC';
        hi := (d + 1)::timestamp AT TIME ZONE 'UTC';
        EXECUTE format('CREATE TABLE {{schema}}.%I (LIKE {{schema}}.jobs_done INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', part);
        EXECUTE format('WITH m AS (DELETE FROM {{schema}}.jobs_done_default WHERE finished_at >= %L AND finished_at < %L RETURNING *) '
                       'INSERT INTO {{schema}}.%I SELECT * FROM m', lo, hi, part);
        EXECUTE format('ALTER TABLE {{schema}}.jobs_done ATTACH PARTITION {{schema}}.%I FOR VALUES FROM (%L) TO (%L)',
                       part, lo, hi);
        EXECUTE format('COMMENT ON TABLE {{schema}}.%I IS %L', part,
                       'skiplock: jobs finished on ' || d || ' (UTC); dropped whole by drop_done_partitions()');
        created := created + 1;
    END LOOP;
    RETURN created;
END
$$;
COMMENT ON FUNCTION {{schema}}.ensure_done_partitions(integer) IS
    'skiplock: creates the daily jobs_done partitions (jobs_done_YYYYMMDD, UTC) from today through days_ahead and drains jobs_done_default; returns how many it created.';

-- Drops every daily partition whose whole day ended more than keep ago:
-- one catalog operation per day, no row-by-row DELETE, no dead tuples.
-- Only partitions named jobs_done_YYYYMMDD are touched. Returns how many it
-- dropped.
CREATE FUNCTION {{schema}}.drop_done_partitions(keep interval DEFAULT interval '7 days')
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    part    text;
    day_end timestamptz;
    dropped integer := 0;
BEGIN
    IF keep IS NULL OR keep < interval '0' THEN
        RAISE EXCEPTION 'skiplock: keep: must be a non-negative interval, got %', keep
            USING ERRCODE = '22023';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended({{schema_lit}} || '.partitions', 0));
    FOR part IN
        SELECT c.relname::text
        FROM pg_inherits AS i
        JOIN pg_class AS c ON c.oid = i.inhrelid
        WHERE i.inhparent = '{{schema}}.jobs_done'::regclass
          AND c.relname ~ '^jobs_done_[0-9]{8}$'
        ORDER BY c.relname
    LOOP
        day_end := (to_date(substr(part, 11), 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC';
        IF day_end <= now() - keep THEN
            EXECUTE format('DROP TABLE {{schema}}.%I', part);
            dropped := dropped + 1;
        END IF;
    END LOOP;
    RETURN dropped;
END
$$;
COMMENT ON FUNCTION {{schema}}.drop_done_partitions(interval) IS
    'skiplock: drops whole jobs_done_YYYYMMDD partitions whose day ended more than keep ago (never DELETE); returns how many it dropped.';
