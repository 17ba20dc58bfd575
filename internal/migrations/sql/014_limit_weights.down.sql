-- Back to the functions of 006 (without limit_weight); the weight columns
-- and the values they hold are dropped.
DROP FUNCTION IF EXISTS {{schema}}.enqueue(text, text, jsonb, integer, timestamptz, integer, text, text, text, jsonb, integer);
DROP FUNCTION IF EXISTS {{schema}}.enqueue_job(text, text, jsonb, integer, timestamptz, integer, text, text, text, boolean, jsonb, integer);
DROP FUNCTION IF EXISTS {{schema}}.validate_limit_weight(integer);
ALTER TABLE {{schema}}.limit_starts DROP COLUMN IF EXISTS weight;
DROP INDEX IF EXISTS {{schema}}.jobs_ready_weighted;
ALTER TABLE {{schema}}.jobs DROP CONSTRAINT IF EXISTS jobs_limit_weight_check;
ALTER TABLE {{schema}}.jobs_done DROP COLUMN IF EXISTS limit_weight;
ALTER TABLE {{schema}}.jobs_dead DROP COLUMN IF EXISTS limit_weight;
ALTER TABLE {{schema}}.jobs DROP COLUMN IF EXISTS limit_weight;

CREATE FUNCTION {{schema}}.enqueue_job(
    p_queue text, p_kind text, p_payload jsonb, p_priority integer,
    p_run_at timestamptz, p_max_attempts integer, p_unique_key text,
    p_tenant text, p_entity text, p_bump boolean, p_metadata jsonb DEFAULT NULL,
    OUT id bigint, OUT inserted boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_run_at timestamptz := coalesce(p_run_at, now());
    v_payload jsonb := coalesce(p_payload, '{}'::jsonb);
    v_priority integer := coalesce(p_priority, 0);
BEGIN
    PERFORM {{schema}}.validate_job(p_queue, p_kind, v_payload, v_priority, v_run_at,
        p_max_attempts, p_unique_key, p_tenant, p_entity);
    PERFORM {{schema}}.validate_metadata(p_metadata);

    IF p_unique_key IS NULL THEN
        INSERT INTO {{schema}}.jobs AS j (queue, kind, payload, priority, run_at, max_attempts, tenant, entity, metadata)
        VALUES (p_queue, p_kind, v_payload, v_priority, v_run_at, coalesce(p_max_attempts, 20), p_tenant, p_entity, p_metadata)
        RETURNING j.id INTO id;
        inserted := true;
    ELSE
        -- Loop only if the conflicting job finishes between our INSERT and SELECT.
        FOR i IN 1..10 LOOP
            INSERT INTO {{schema}}.jobs AS j (queue, kind, payload, priority, run_at, max_attempts, unique_key, tenant, entity, metadata)
            VALUES (p_queue, p_kind, v_payload, v_priority, v_run_at, coalesce(p_max_attempts, 20), p_unique_key, p_tenant, p_entity, p_metadata)
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

-- The public SQL API, callable with named arguments from any language,
-- psql or a trigger:
--   SELECT skiplock.enqueue(queue => 'emails', kind => 'welcome', payload => '{"user": 7}',
--                           metadata => '{"traceparent": "00-…-01"}');
CREATE FUNCTION {{schema}}.enqueue(
    queue text, kind text, payload jsonb DEFAULT '{}', priority integer DEFAULT 0,
    run_at timestamptz DEFAULT now(), max_attempts integer DEFAULT NULL,
    unique_key text DEFAULT NULL, tenant text DEFAULT NULL, entity text DEFAULT NULL,
    metadata jsonb DEFAULT NULL)
RETURNS bigint
LANGUAGE sql AS $$
    SELECT e.id FROM {{schema}}.enqueue_job($1, $2, $3, $4, $5, $6, $7, $8, $9, false, $10) AS e
$$;

-- retry_job (migration 005) carries the retried job's metadata too.
CREATE OR REPLACE FUNCTION {{schema}}.retry_job(p_id bigint, OUT new_id bigint, OUT state text)
LANGUAGE plpgsql AS $$
DECLARE
    d {{schema}}.jobs_dead%ROWTYPE;
    f record;
BEGIN
    DELETE FROM {{schema}}.jobs_dead AS x WHERE x.id = p_id RETURNING x.* INTO d;
    IF FOUND THEN
        state := 'dead';
        INSERT INTO {{schema}}.jobs AS j (queue, kind, payload, priority, run_at, max_attempts, unique_key, tenant, entity, metadata)
        VALUES (d.queue, d.kind, d.payload, d.priority, now(), d.max_attempts, d.unique_key, d.tenant, d.entity, d.metadata)
        ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
        RETURNING j.id INTO new_id;
        IF new_id IS NULL THEN
            RAISE EXCEPTION 'skiplock: id: dead job % has unique key % in flight again; it stays dead', p_id, d.unique_key
                USING ERRCODE = '55000';
        END IF;
        PERFORM pg_notify({{schema_lit}} || '.jobs', d.queue);
        RETURN;
    END IF;
    SELECT x.queue, x.kind, x.payload, x.priority, x.max_attempts, x.tenant, x.entity, x.metadata INTO f
    FROM {{schema}}.jobs_done AS x WHERE x.id = p_id
    ORDER BY x.finished_at DESC LIMIT 1;
    IF FOUND THEN
        state := 'completed';
        INSERT INTO {{schema}}.jobs AS j (queue, kind, payload, priority, run_at, max_attempts, tenant, entity, metadata)
        VALUES (f.queue, f.kind, f.payload, f.priority, now(), coalesce(f.max_attempts, 20), f.tenant, f.entity, f.metadata)
        RETURNING j.id INTO new_id;
        PERFORM pg_notify({{schema_lit}} || '.jobs', f.queue);
        RETURN;
    END IF;
    SELECT CASE WHEN j.state = 'ready' AND j.run_at > now() THEN 'scheduled' ELSE j.state END INTO state
    FROM {{schema}}.jobs AS j WHERE j.id = p_id;
END
$$;
