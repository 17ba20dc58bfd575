-- Back to version 17: no job_actions, and retry_job as version 17 had it
-- (the function file of the binary released at 17). The other bodies are
-- this version's too: 018 changed no other function.
DROP TABLE {{schema}}.job_actions;

-- Runs a finished job again as a new job (new_id): a dead letter leaves
-- jobs_dead for jobs_keyed, the arbiter of its unique key (refused, 55000,
-- while another job holds the key); a completed job is copied from jobs_done
-- (its latest run). Otherwise no new id, and the state of the job if it is
-- in flight (ready, scheduled, running), else NULL. The columns a replay leaves behind, and why:
-- internal/store/copies_test.go.
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

COMMENT ON FUNCTION {{schema}}.retry_job(bigint) IS
    'skiplock: retries a dead or finished job as exactly one new ready job; returns its id and the old state (new_id NULL: not retryable, state says why).';
