-- Generations (issue 15): jobs becomes a table partitioned by LIST (gen), a
-- ring of partitions jobs_g0..jobs_g2 emptied by TRUNCATE (which a pinned
-- horizon does not hold back) and jobs_keyed for everything else; the jobs
-- there are move to jobs_keyed with their ids, leases and tokens. The design,
-- its invariants and its figures: docs/generations.md. Today's bodies of the
-- functions below are in sql/functions/ (this file is history).

CREATE FUNCTION {{schema}}.ring_period() RETURNS integer
LANGUAGE sql IMMUTABLE AS $$ SELECT 5 $$;

-- The ring generation of this instant (the database clock), one of the
-- three partitions jobs_g0..jobs_g2 created below.
CREATE FUNCTION {{schema}}.ring_gen() RETURNS smallint
LANGUAGE sql VOLATILE AS $$
    SELECT (floor(extract(epoch FROM clock_timestamp()) / {{schema}}.ring_period())::bigint % 3)::smallint
$$;

-- The three views that read jobs are recreated on the new table below.
DROP VIEW {{schema}}.long_runners;
DROP VIEW {{schema}}.wait_p99;
DROP VIEW {{schema}}.vacuum_state;
DROP TRIGGER jobs_left ON {{schema}}.jobs;

ALTER TABLE {{schema}}.jobs RENAME TO jobs_unpartitioned;
ALTER TABLE {{schema}}.jobs_unpartitioned RENAME CONSTRAINT jobs_pkey TO jobs_unpartitioned_pkey;
DROP INDEX {{schema}}.jobs_ready, {{schema}}.jobs_ready_tenant, {{schema}}.jobs_ready_no_tenant,
    {{schema}}.jobs_ready_weighted, {{schema}}.jobs_running, {{schema}}.jobs_unique_inflight;

-- The id sequence outlives the old table (workflows draw ids from it by
-- name: jobs_id_seq).
CREATE SEQUENCE {{schema}}.jobs_id_seq_ring AS bigint;
SELECT setval('{{schema}}.jobs_id_seq_ring', s.last_value, s.is_called) FROM {{schema}}.jobs_id_seq AS s;

CREATE TABLE {{schema}}.jobs (
    id               bigint      NOT NULL DEFAULT nextval('{{schema}}.jobs_id_seq_ring'),
    priority         integer     NOT NULL DEFAULT 0,
    attempts         integer     NOT NULL DEFAULT 0,
    max_attempts     integer     NOT NULL DEFAULT 20,
    run_at           timestamptz NOT NULL DEFAULT now(),
    created_at       timestamptz NOT NULL DEFAULT now(),
    lease_token      bigint,
    lease_expires_at timestamptz,
    attempted_at     timestamptz,
    cancel_requested boolean     NOT NULL DEFAULT false,
    state            text        NOT NULL DEFAULT 'ready',
    queue            text        NOT NULL,
    kind             text        NOT NULL,
    locked_by        text,
    unique_key       text,
    tenant           text,
    entity           text,
    last_error       text,
    payload          jsonb       NOT NULL DEFAULT '{}',
    metadata         jsonb,
    task_id          bigint,
    limit_weight     integer,
    gen              smallint    NOT NULL DEFAULT -1,
    CONSTRAINT jobs_state_check CHECK (state IN ('ready', 'running')),
    CONSTRAINT jobs_lease_check CHECK (
        (state = 'ready' AND locked_by IS NULL AND lease_token IS NULL)
        OR (state = 'running' AND locked_by IS NOT NULL AND lease_token IS NOT NULL
            AND lease_expires_at IS NOT NULL)),
    CONSTRAINT jobs_limit_weight_check CHECK (limit_weight >= 1 AND limit_weight <= 1000000)
) PARTITION BY LIST (gen);

CREATE TABLE {{schema}}.jobs_keyed PARTITION OF {{schema}}.jobs FOR VALUES IN (-1)
    WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0);
-- A direct insert into jobs_keyed (the unique-key statements, which need its
-- unique index as their ON CONFLICT arbiter) takes its own gen.
ALTER TABLE {{schema}}.jobs_keyed ALTER COLUMN gen SET DEFAULT -1;

CREATE TABLE {{schema}}.jobs_g0 PARTITION OF {{schema}}.jobs FOR VALUES IN (0)
    WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0);
CREATE TABLE {{schema}}.jobs_g1 PARTITION OF {{schema}}.jobs FOR VALUES IN (1)
    WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0);
CREATE TABLE {{schema}}.jobs_g2 PARTITION OF {{schema}}.jobs FOR VALUES IN (2)
    WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0);
ALTER TABLE {{schema}}.jobs_g0 ADD CONSTRAINT jobs_g0_plain CHECK (entity IS NULL AND unique_key IS NULL AND coalesce(task_id, 0) = 0);
ALTER TABLE {{schema}}.jobs_g1 ADD CONSTRAINT jobs_g1_plain CHECK (entity IS NULL AND unique_key IS NULL AND coalesce(task_id, 0) = 0);
ALTER TABLE {{schema}}.jobs_g2 ADD CONSTRAINT jobs_g2_plain CHECK (entity IS NULL AND unique_key IS NULL AND coalesce(task_id, 0) = 0);

-- The indexes of migrations 001, 003 and 014, on every partition. The
-- parent's names are the old ones (doctor and the fix texts name them).
ALTER TABLE {{schema}}.jobs ADD CONSTRAINT jobs_pkey PRIMARY KEY (id, gen);
CREATE INDEX jobs_ready ON {{schema}}.jobs (queue, priority DESC, run_at, id)
    WHERE state = 'ready';
CREATE INDEX jobs_ready_tenant ON {{schema}}.jobs (queue, tenant, priority DESC, run_at, id)
    WHERE state = 'ready' AND tenant IS NOT NULL;
CREATE INDEX jobs_ready_no_tenant ON {{schema}}.jobs (queue, priority DESC, run_at, id)
    WHERE state = 'ready' AND tenant IS NULL;
CREATE INDEX jobs_ready_weighted ON {{schema}}.jobs (queue, kind)
    WHERE state = 'ready' AND limit_weight IS NOT NULL;

-- Each partition's copy of these is named after it and its partition
-- (jobs_ready_g0, jobs_pkey_keyed, ...), so a plan names what it reads.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT ci.relname AS child, pi.relname AS parent, substr(pc.relname, 6) AS part
        FROM pg_inherits AS h
        JOIN pg_class AS ci ON ci.oid = h.inhrelid
        JOIN pg_class AS pi ON pi.oid = h.inhparent
        JOIN pg_index AS x ON x.indexrelid = ci.oid
        JOIN pg_class AS pc ON pc.oid = x.indrelid
        WHERE pi.relnamespace = '{{schema}}'::regnamespace AND pi.relkind = 'I'
          AND pi.relname IN ('jobs_pkey', 'jobs_ready', 'jobs_ready_tenant', 'jobs_ready_no_tenant', 'jobs_ready_weighted')
    LOOP
        EXECUTE format('ALTER INDEX %I.%I RENAME TO %I', {{schema_lit}}, r.child, r.parent || '_' || r.part);
    END LOOP;
END
$$;

-- The two unique indexes the invariants stand on live on jobs_keyed, where
-- every row they cover lives (the ring's CHECK keeps such rows out). The
-- ring's running rows get the same running index, without the uniqueness
-- (their key is their id).
CREATE UNIQUE INDEX jobs_running ON {{schema}}.jobs_keyed ((COALESCE('e:' || entity, id::text)))
    WHERE state = 'running';
CREATE UNIQUE INDEX jobs_unique_inflight ON {{schema}}.jobs_keyed (queue, unique_key)
    WHERE unique_key IS NOT NULL;
CREATE INDEX jobs_running_g0 ON {{schema}}.jobs_g0 ((COALESCE('e:' || entity, id::text))) WHERE state = 'running';
CREATE INDEX jobs_running_g1 ON {{schema}}.jobs_g1 ((COALESCE('e:' || entity, id::text))) WHERE state = 'running';
CREATE INDEX jobs_running_g2 ON {{schema}}.jobs_g2 ((COALESCE('e:' || entity, id::text))) WHERE state = 'running';

-- The rows there were move to jobs_keyed (unique and entity rows must); the
-- ring fills from now on.
INSERT INTO {{schema}}.jobs (id, priority, attempts, max_attempts, run_at, created_at, lease_token, lease_expires_at,
                             attempted_at, cancel_requested, state, queue, kind, locked_by, unique_key, tenant, entity,
                             last_error, payload, metadata, task_id, limit_weight, gen)
SELECT id, priority, attempts, max_attempts, run_at, created_at, lease_token, lease_expires_at,
       attempted_at, cancel_requested, state, queue, kind, locked_by, unique_key, tenant, entity,
       last_error, payload, metadata, task_id, limit_weight, -1
FROM {{schema}}.jobs_unpartitioned;

DROP TABLE {{schema}}.jobs_unpartitioned;
ALTER SEQUENCE {{schema}}.jobs_id_seq_ring RENAME TO jobs_id_seq;
ALTER SEQUENCE {{schema}}.jobs_id_seq OWNED BY {{schema}}.jobs.id;

CREATE TRIGGER jobs_left AFTER DELETE ON {{schema}}.jobs
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.jobs_left();

-- The views of migration 002, unchanged but for vacuum_state, which now sums
-- the partitions (the parent has no statistics of its own).
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

CREATE VIEW {{schema}}.vacuum_state AS
SELECT 'jobs'::text AS table_name,
       sum(s.n_live_tup)::bigint AS n_live_tup,
       sum(s.n_dead_tup)::bigint AS n_dead_tup,
       CASE WHEN sum(s.n_live_tup + s.n_dead_tup) > 0
            THEN sum(s.n_dead_tup)::float8 / sum(s.n_live_tup + s.n_dead_tup)::float8 ELSE 0 END AS dead_ratio,
       max(s.last_autovacuum) AS last_autovacuum, max(s.last_vacuum) AS last_vacuum,
       sum(s.autovacuum_count)::bigint AS autovacuum_count, sum(s.vacuum_count)::bigint AS vacuum_count,
       max(s.last_autoanalyze) AS last_autoanalyze,
       sum(s.n_tup_upd)::bigint AS n_tup_upd, sum(s.n_tup_hot_upd)::bigint AS n_tup_hot_upd,
       (SELECT k.reloptions FROM pg_class AS k WHERE k.oid = '{{schema}}.jobs_keyed'::regclass) AS reloptions,
       sum(coalesce((SELECT o.option_value FROM pg_options_to_table(c.reloptions) AS o
                     WHERE o.option_name = 'autovacuum_vacuum_threshold'),
                    current_setting('autovacuum_vacuum_threshold'))::float8
           + coalesce((SELECT o.option_value FROM pg_options_to_table(c.reloptions) AS o
                       WHERE o.option_name = 'autovacuum_vacuum_scale_factor'),
                      current_setting('autovacuum_vacuum_scale_factor'))::float8
             * greatest(c.reltuples, 0))::float8 AS autovacuum_threshold,
       sum(pg_relation_size(c.oid))::bigint AS heap_bytes
FROM pg_inherits AS i
JOIN pg_class AS c ON c.oid = i.inhrelid
JOIN pg_stat_user_tables AS s ON s.relid = c.oid
WHERE i.inhparent = '{{schema}}.jobs'::regclass;
COMMENT ON VIEW {{schema}}.vacuum_state IS
    'skiplock: the hot jobs table''s live and dead tuples (summed over its partitions), dead ratio, last (auto)vacuum, settings and the dead-tuple count at which autovacuum starts. Dead tuples climbing while last_autovacuum ages = vacuum debt.';

-- One turn of the ring, run about once a second by every worker process
-- (the first to take the advisory lock does the work; the others return at
-- once). The generation that was current two periods ago, and will be
-- current again in the next period, is emptied:
--   1. while the horizon is held back, its ready rows move (DELETE ...
--      RETURNING into an INSERT, one
--      statement: a claim racing the move finds the old version deleted and
--      skips it, in READ COMMITTED as under SKIP LOCKED) to jobs_keyed, not
--      to the current generation: a job moves at most once however long it
--      waits. (Moving a backlog to the current generation rewrote it every
--      turn it waited: a 40,000-job backlog drained at 7,500 jobs/s wrote
--      4,076 bytes of WAL per job instead of 1,902.) A job that waited more
--      than a period is the backlog's, which vacuum keeps as before;
--   2. if nothing is left in it (a running row is a long runner: it keeps its
--      generation until a later turn), it is locked ACCESS EXCLUSIVE within
--      p_lock_timeout_ms and truncated when still empty under that lock. A
--      lock not had in time (a long reader of jobs holds it) is tried again
--      on the next turn.
-- TRUNCATE removes only versions no live transaction can see as live: the
-- lock waits out every transaction that has touched the partition, and the
-- emptiness check reads after it. Returns the rows moved and the generation
-- truncated (NULL: none this turn).
CREATE FUNCTION {{schema}}.rotate_ring(p_lock_timeout_ms integer, OUT moved bigint, OUT truncated smallint)
LANGUAGE plpgsql AS $$
DECLARE
    v_slot bigint := floor(extract(epoch FROM clock_timestamp()) / {{schema}}.ring_period())::bigint;
    v_old smallint := ((v_slot + 1) % 3)::smallint;
    v_part text := format('%I.%I', {{schema_lit}}, 'jobs_g' || v_old);
    v_left boolean;
BEGIN
    moved := 0;
    IF NOT pg_try_advisory_xact_lock(hashtext({{schema_lit}} || '.rotate_ring')) THEN
        RETURN;
    END IF;
    IF pg_relation_size(v_part::regclass) = 0 THEN
        RETURN; -- emptied already this period
    END IF;
    -- Stragglers move only while something holds the horizon back (a
    -- transaction or snapshot older than a period, a prepared transaction,
    -- a replication slot's xmin): otherwise vacuum keeps the generation as it
    -- kept the table, and moving a backlog would only cost (a 100,000-job
    -- bulk load drained in 12 s moved half of it: 1,246-1,338 bytes of WAL
    -- per job against 1,134, and 88-92 % of the ideal rate against 95-96 %).
    -- A role that cannot see other sessions' xmin (pg_read_all_stats) sees
    -- no pin, and the table grows under one as it did before 016.
    IF NOT EXISTS (SELECT 1 FROM pg_stat_activity AS a
                   WHERE a.pid <> pg_backend_pid() AND a.backend_type <> 'autovacuum worker'
                     AND (a.backend_xid IS NOT NULL OR a.backend_xmin IS NOT NULL)
                     AND a.xact_start < clock_timestamp() - {{schema}}.ring_period() * interval '1 second')
       AND NOT EXISTS (SELECT 1 FROM pg_prepared_xacts AS p
                       WHERE p.prepared < clock_timestamp() - {{schema}}.ring_period() * interval '1 second')
       AND NOT EXISTS (SELECT 1 FROM pg_replication_slots AS s WHERE s.xmin IS NOT NULL) THEN
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s)', v_part) INTO v_left;
        IF v_left THEN
            RETURN; -- no pin: vacuum keeps what is left; truncate once it is empty
        END IF;
    END IF;
    EXECUTE format($q$
        WITH m AS (DELETE FROM %s AS j WHERE j.state = 'ready' RETURNING j.*)
        INSERT INTO %I.jobs (id, priority, attempts, max_attempts, run_at, created_at, lease_token, lease_expires_at,
                             attempted_at, cancel_requested, state, queue, kind, locked_by, unique_key, tenant, entity,
                             last_error, payload, metadata, task_id, limit_weight, gen)
        SELECT m.id, m.priority, m.attempts, m.max_attempts, m.run_at, m.created_at, m.lease_token, m.lease_expires_at,
               m.attempted_at, m.cancel_requested, m.state, m.queue, m.kind, m.locked_by, m.unique_key, m.tenant, m.entity,
               m.last_error, m.payload, m.metadata, m.task_id, m.limit_weight,
               -1
        FROM m$q$, v_part, {{schema_lit}});
    GET DIAGNOSTICS moved = ROW_COUNT;
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s)', v_part) INTO v_left;
    IF v_left THEN
        RETURN; -- a running job (or a row being moved by someone else)
    END IF;
    PERFORM set_config('lock_timeout', p_lock_timeout_ms || 'ms', true);
    BEGIN
        EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', v_part);
    EXCEPTION WHEN lock_not_available THEN
        RETURN;
    END;
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s)', v_part) INTO v_left;
    IF NOT v_left THEN
        EXECUTE format('TRUNCATE %s', v_part);
        truncated := v_old;
    END IF;
END
$$;

-- enqueue_job (migration 014) with the ring: a plain job goes to the current
-- generation, a unique one to jobs_keyed directly (its unique index is the
-- ON CONFLICT arbiter, and only a partition carries it), an entity one to
-- jobs_keyed by gen.
CREATE OR REPLACE FUNCTION {{schema}}.enqueue_job(
    p_queue text, p_kind text, p_payload jsonb, p_priority integer,
    p_run_at timestamptz, p_max_attempts integer, p_unique_key text,
    p_tenant text, p_entity text, p_bump boolean, p_metadata jsonb DEFAULT NULL,
    p_limit_weight integer DEFAULT NULL,
    OUT id bigint, OUT inserted boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_run_at timestamptz := coalesce(p_run_at, now());
    v_payload jsonb := coalesce(p_payload, '{}'::jsonb);
    v_priority integer := coalesce(p_priority, 0);
    -- Weight 1 is stored as NULL (the default).
    v_weight integer := nullif(p_limit_weight, 1);
BEGIN
    PERFORM {{schema}}.validate_job(p_queue, p_kind, v_payload, v_priority, v_run_at,
        p_max_attempts, p_unique_key, p_tenant, p_entity);
    PERFORM {{schema}}.validate_metadata(p_metadata);
    PERFORM {{schema}}.validate_limit_weight(p_limit_weight);

    IF p_unique_key IS NULL THEN
        INSERT INTO {{schema}}.jobs AS j (queue, kind, payload, priority, run_at, max_attempts, tenant, entity, metadata,
                                          limit_weight, gen)
        VALUES (p_queue, p_kind, v_payload, v_priority, v_run_at, coalesce(p_max_attempts, 20), p_tenant, p_entity, p_metadata,
                v_weight, CASE WHEN p_entity IS NULL THEN {{schema}}.ring_gen() ELSE -1 END)
        RETURNING j.id INTO id;
        inserted := true;
    ELSE
        -- Loop only if the conflicting job finishes between our INSERT and SELECT.
        FOR i IN 1..10 LOOP
            INSERT INTO {{schema}}.jobs_keyed AS j (queue, kind, payload, priority, run_at, max_attempts, unique_key, tenant, entity,
                                                    metadata, limit_weight)
            VALUES (p_queue, p_kind, v_payload, v_priority, v_run_at, coalesce(p_max_attempts, 20), p_unique_key, p_tenant, p_entity,
                    p_metadata, v_weight)
            ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
            RETURNING j.id INTO id;
            IF id IS NOT NULL THEN
                inserted := true;
                EXIT;
            END IF;
            inserted := false;
            IF p_bump THEN
                UPDATE {{schema}}.jobs_keyed AS j SET run_at = GREATEST(j.run_at, v_run_at)
                WHERE j.queue = p_queue AND j.unique_key = p_unique_key
                RETURNING j.id INTO id;
            ELSE
                SELECT j.id INTO id FROM {{schema}}.jobs_keyed AS j
                WHERE j.queue = p_queue AND j.unique_key = p_unique_key;
            END IF;
            EXIT WHEN id IS NOT NULL;
        END LOOP;
        IF id IS NULL THEN
            RAISE EXCEPTION 'skiplock: unique_key: the in-flight job kept changing; retry'
                USING ERRCODE = '40001';
        END IF;
    END IF;

    IF inserted AND v_run_at <= now() THEN
        PERFORM pg_notify({{schema_lit}} || '.jobs', p_queue);
    END IF;
END
$$;

-- retry_job (migration 014): a replayed dead job goes to jobs_keyed, the
-- arbiter of its unique key.
CREATE OR REPLACE FUNCTION {{schema}}.retry_job(p_id bigint, OUT new_id bigint, OUT state text)
LANGUAGE plpgsql AS $$
DECLARE
    d {{schema}}.jobs_dead%ROWTYPE;
    f record;
BEGIN
    DELETE FROM {{schema}}.jobs_dead AS x WHERE x.id = p_id RETURNING x.* INTO d;
    IF FOUND THEN
        state := 'dead';
        INSERT INTO {{schema}}.jobs_keyed AS j (queue, kind, payload, priority, run_at, max_attempts, unique_key, tenant, entity,
                                                metadata, limit_weight)
        VALUES (d.queue, d.kind, d.payload, d.priority, now(), d.max_attempts, d.unique_key, d.tenant, d.entity, d.metadata,
                d.limit_weight)
        ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
        RETURNING j.id INTO new_id;
        IF new_id IS NULL THEN
            RAISE EXCEPTION 'skiplock: id: dead job % has unique key % in flight again; it stays dead', p_id, d.unique_key
                USING ERRCODE = '55000';
        END IF;
        PERFORM pg_notify({{schema_lit}} || '.jobs', d.queue);
        RETURN;
    END IF;
    SELECT x.queue, x.kind, x.payload, x.priority, x.max_attempts, x.tenant, x.entity, x.metadata, x.limit_weight INTO f
    FROM {{schema}}.jobs_done AS x WHERE x.id = p_id
    ORDER BY x.finished_at DESC LIMIT 1;
    IF FOUND THEN
        state := 'completed';
        INSERT INTO {{schema}}.jobs AS j (queue, kind, payload, priority, run_at, max_attempts, tenant, entity, metadata, limit_weight)
        VALUES (f.queue, f.kind, f.payload, f.priority, now(), coalesce(f.max_attempts, 20), f.tenant, f.entity, f.metadata,
                f.limit_weight)
        RETURNING j.id INTO new_id;
        PERFORM pg_notify({{schema_lit}} || '.jobs', f.queue);
        RETURN;
    END IF;
    SELECT CASE WHEN j.state = 'ready' AND j.run_at > now() THEN 'scheduled' ELSE j.state END INTO state
    FROM {{schema}}.jobs AS j WHERE j.id = p_id;
END
$$;
