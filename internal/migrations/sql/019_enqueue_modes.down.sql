-- Back to version 18: no unique_keys, no enqueue_unique; enqueue and
-- enqueue_job without the uniqueness and mode arguments.
DROP FUNCTION {{schema}}.enqueue(text, text, jsonb, integer, timestamptz, integer, text, text, text, jsonb, integer, text,
    text[], interval, boolean, interval, interval);
DROP FUNCTION {{schema}}.enqueue_job(text, text, jsonb, integer, timestamptz, integer, text, text, text, boolean, jsonb,
    integer, text, text[], interval, text, interval);
DROP FUNCTION {{schema}}.enqueue_unique(text, text, jsonb, integer, timestamptz, integer, text, text, text, boolean,
    jsonb, integer, text, text[], interval, text, interval);
DROP TABLE {{schema}}.unique_keys;

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

CREATE OR REPLACE FUNCTION {{schema}}.enqueue(
    queue text, kind text, payload jsonb DEFAULT '{}', priority integer DEFAULT 0,
    run_at timestamptz DEFAULT now(), max_attempts integer DEFAULT NULL,
    unique_key text DEFAULT NULL, tenant text DEFAULT NULL, entity text DEFAULT NULL,
    metadata jsonb DEFAULT NULL, limit_weight integer DEFAULT NULL)
RETURNS bigint
LANGUAGE sql AS $$
    SELECT e.id FROM {{schema}}.enqueue_job($1, $2, $3, $4, $5, $6, $7, $8, $9, false, $10, $11) AS e
$$;
