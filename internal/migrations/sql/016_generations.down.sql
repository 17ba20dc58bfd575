-- Back to one unpartitioned jobs table (migrations 001-015): every row of
-- every partition moves into it; the ring's functions go.
DROP FUNCTION IF EXISTS {{schema}}.rotate_ring(integer);
DROP VIEW {{schema}}.long_runners;
DROP VIEW {{schema}}.wait_p99;
DROP VIEW {{schema}}.vacuum_state;
DROP TRIGGER jobs_left ON {{schema}}.jobs;
ALTER TABLE {{schema}}.jobs RENAME TO jobs_partitioned;
-- Its primary key's name is the old table's: free it for the new one.
ALTER TABLE {{schema}}.jobs_partitioned RENAME CONSTRAINT jobs_pkey TO jobs_partitioned_pkey;
ALTER SEQUENCE {{schema}}.jobs_id_seq OWNED BY NONE;
ALTER SEQUENCE {{schema}}.jobs_id_seq RENAME TO jobs_id_seq_ring;

CREATE TABLE {{schema}}.jobs (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
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
    CONSTRAINT jobs_state_check CHECK (state IN ('ready', 'running')),
    CONSTRAINT jobs_lease_check CHECK (
        (state = 'ready' AND locked_by IS NULL AND lease_token IS NULL)
        OR (state = 'running' AND locked_by IS NOT NULL AND lease_token IS NOT NULL
            AND lease_expires_at IS NOT NULL))
) WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0);
-- As migration 014 added it (NOT VALID): the catalog of 015, exactly.
ALTER TABLE {{schema}}.jobs
    ADD CONSTRAINT jobs_limit_weight_check CHECK (limit_weight >= 1 AND limit_weight <= 1000000) NOT VALID;

INSERT INTO {{schema}}.jobs (id, priority, attempts, max_attempts, run_at, created_at, lease_token, lease_expires_at,
                             attempted_at, cancel_requested, state, queue, kind, locked_by, unique_key, tenant, entity,
                             last_error, payload, metadata, task_id, limit_weight)
OVERRIDING SYSTEM VALUE
SELECT id, priority, attempts, max_attempts, run_at, created_at, lease_token, lease_expires_at,
       attempted_at, cancel_requested, state, queue, kind, locked_by, unique_key, tenant, entity,
       last_error, payload, metadata, task_id, limit_weight
FROM {{schema}}.jobs_partitioned;
SELECT setval('{{schema}}.jobs_id_seq', s.last_value, s.is_called) FROM {{schema}}.jobs_id_seq_ring AS s;
DROP TABLE {{schema}}.jobs_partitioned;
DROP SEQUENCE {{schema}}.jobs_id_seq_ring;

CREATE INDEX jobs_ready ON {{schema}}.jobs (queue, priority DESC, run_at, id)
    WHERE state = 'ready';
CREATE INDEX jobs_ready_tenant ON {{schema}}.jobs (queue, tenant, priority DESC, run_at, id)
    WHERE state = 'ready' AND tenant IS NOT NULL;
CREATE INDEX jobs_ready_no_tenant ON {{schema}}.jobs (queue, priority DESC, run_at, id)
    WHERE state = 'ready' AND tenant IS NULL;
CREATE INDEX jobs_ready_weighted ON {{schema}}.jobs (queue, kind)
    WHERE state = 'ready' AND limit_weight IS NOT NULL;
CREATE UNIQUE INDEX jobs_running ON {{schema}}.jobs ((COALESCE('e:' || entity, id::text)))
    WHERE state = 'running';
CREATE UNIQUE INDEX jobs_unique_inflight ON {{schema}}.jobs (queue, unique_key)
    WHERE unique_key IS NOT NULL;

CREATE TRIGGER jobs_left AFTER DELETE ON {{schema}}.jobs
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.jobs_left();

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
        INSERT INTO {{schema}}.jobs AS j (queue, kind, payload, priority, run_at, max_attempts, tenant, entity, metadata, limit_weight)
        VALUES (p_queue, p_kind, v_payload, v_priority, v_run_at, coalesce(p_max_attempts, 20), p_tenant, p_entity, p_metadata, v_weight)
        RETURNING j.id INTO id;
        inserted := true;
    ELSE
        -- Loop only if the conflicting job finishes between our INSERT and SELECT.
        FOR i IN 1..10 LOOP
            INSERT INTO {{schema}}.jobs AS j (queue, kind, payload, priority, run_at, max_attempts, unique_key, tenant, entity, metadata, limit_weight)
            VALUES (p_queue, p_kind, v_payload, v_priority, v_run_at, coalesce(p_max_attempts, 20), p_unique_key, p_tenant, p_entity, p_metadata, v_weight)
            ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
            RETURNING j.id INTO id;
            IF id IS NOT NULL THEN
                inserted := true;
                EXIT;
            END IF;
            inserted := false;
            IF p_bump THEN
                UPDATE {{schema}}.jobs AS j SET run_at = GREATEST(j.run_at, v_run_at)
                WHERE j.queue = p_queue AND j.unique_key = p_unique_key
                RETURNING j.id INTO id;
            ELSE
                SELECT j.id INTO id FROM {{schema}}.jobs AS j
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


CREATE OR REPLACE FUNCTION {{schema}}.retry_job(p_id bigint, OUT new_id bigint, OUT state text)
LANGUAGE plpgsql AS $$
DECLARE
    d {{schema}}.jobs_dead%ROWTYPE;
    f record;
BEGIN
    DELETE FROM {{schema}}.jobs_dead AS x WHERE x.id = p_id RETURNING x.* INTO d;
    IF FOUND THEN
        state := 'dead';
        INSERT INTO {{schema}}.jobs AS j (queue, kind, payload, priority, run_at, max_attempts, unique_key, tenant, entity, metadata, limit_weight)
        VALUES (d.queue, d.kind, d.payload, d.priority, now(), d.max_attempts, d.unique_key, d.tenant, d.entity, d.metadata, d.limit_weight)
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
        VALUES (f.queue, f.kind, f.payload, f.priority, now(), coalesce(f.max_attempts, 20), f.tenant, f.entity, f.metadata, f.limit_weight)
        RETURNING j.id INTO new_id;
        PERFORM pg_notify({{schema_lit}} || '.jobs', f.queue);
        RETURN;
    END IF;
    SELECT CASE WHEN j.state = 'ready' AND j.run_at > now() THEN 'scheduled' ELSE j.state END INTO state
    FROM {{schema}}.jobs AS j WHERE j.id = p_id;
END
$$;

DROP FUNCTION IF EXISTS {{schema}}.ring_gen();
DROP FUNCTION IF EXISTS {{schema}}.ring_period();
