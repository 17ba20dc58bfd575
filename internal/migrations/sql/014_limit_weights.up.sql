-- Job weights in rate limits (issue 18): a job may count as w starts of
-- every rate limit that covers it (an API call that costs 5 units of a
-- partner's quota). Concurrency limits still count one per running job.
--
-- jobs.limit_weight is NULL for weight 1, the default: a nullable column
-- without a default is a catalog change (no rewrite), and a job without a
-- weight pays one bit of the row's null bitmap, which every jobs row has
-- already (tenant, entity, ... are nullable). The claim paths read it only
-- in claim_limited. It travels with the job like metadata: into jobs_dead
-- and jobs_done, and back by retry_job and the dead-letter replay.
ALTER TABLE {{schema}}.jobs ADD COLUMN limit_weight integer;
ALTER TABLE {{schema}}.jobs_dead ADD COLUMN limit_weight integer;
-- jobs_done is partitioned: the column reaches every partition, and
-- ensure_done_partitions creates new ones LIKE the parent.
ALTER TABLE {{schema}}.jobs_done ADD COLUMN limit_weight integer;
-- Every entry point validates it (enqueue_job, the Go API before COPY);
-- NOT VALID: no scan of the existing rows (they are all NULL), new and
-- updated rows are checked.
ALTER TABLE {{schema}}.jobs ADD CONSTRAINT jobs_limit_weight_check
    CHECK (limit_weight BETWEEN 1 AND 1000000) NOT VALID;

-- The ready jobs that carry a weight, for limit_next_start: when a claim came
-- back short it asks when the lightest of them waiting under a rate limit
-- fits the window. Jobs without a weight have no entry (the predicate), so
-- enqueues, claims and completions of the rest never touch it, and it stays
-- empty where nobody sets a weight. Built by a scan of jobs, under a lock that
-- holds enqueues for its duration (about a second per million rows).
CREATE INDEX jobs_ready_weighted ON {{schema}}.jobs (queue, kind)
    WHERE state = 'ready' AND limit_weight IS NOT NULL;

-- A start's weight: a rate limit counts the sum of the weights of the starts
-- in its window. One row per start with its weight, not one row per unit:
-- a weight of 1000 would write 1000 rows and index entries per claim and
-- make every window read 1000 times longer. A constant default is a
-- catalog change; existing starts count 1, as they did.
ALTER TABLE {{schema}}.limit_starts ADD COLUMN weight integer NOT NULL DEFAULT 1;

-- NULL or 1 to 1000000 (validate.go MaxLimitWeight). Raises 22023 naming
-- the field.
CREATE FUNCTION {{schema}}.validate_limit_weight(p_limit_weight integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_limit_weight IS NOT NULL AND (p_limit_weight < 1 OR p_limit_weight > 1000000) THEN
        RAISE EXCEPTION 'skiplock: limit_weight: must be between 1 and 1000000, got %', p_limit_weight
            USING ERRCODE = '22023';
    END IF;
END
$$;

-- enqueue_job and enqueue gain a trailing limit_weight argument that
-- defaults to NULL (weight 1), so every existing call (positional or named)
-- keeps working. Adding a parameter changes the signature, so the old
-- functions are replaced.
DROP FUNCTION {{schema}}.enqueue(text, text, jsonb, integer, timestamptz, integer, text, text, text, jsonb);
DROP FUNCTION {{schema}}.enqueue_job(text, text, jsonb, integer, timestamptz, integer, text, text, text, boolean, jsonb);

CREATE FUNCTION {{schema}}.enqueue_job(
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

-- The public SQL API, callable with named arguments from any language,
-- psql or a trigger:
--   SELECT skiplock.enqueue(queue => 'partner', kind => 'bulk-export', limit_weight => 5);
CREATE FUNCTION {{schema}}.enqueue(
    queue text, kind text, payload jsonb DEFAULT '{}', priority integer DEFAULT 0,
    run_at timestamptz DEFAULT now(), max_attempts integer DEFAULT NULL,
    unique_key text DEFAULT NULL, tenant text DEFAULT NULL, entity text DEFAULT NULL,
    metadata jsonb DEFAULT NULL, limit_weight integer DEFAULT NULL)
RETURNS bigint
LANGUAGE sql AS $$
    SELECT e.id FROM {{schema}}.enqueue_job($1, $2, $3, $4, $5, $6, $7, $8, $9, false, $10, $11) AS e
$$;

-- retry_job (migrations 005, 006) carries the retried job's weight too.
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
