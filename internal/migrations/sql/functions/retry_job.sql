-- Runs a finished job again as one new job (new_id): a dead letter leaves
-- jobs_dead for jobs_keyed, the arbiter of its unique key (refused, 55000,
-- while another job holds the key); a completed job is copied from jobs_done
-- (its latest run). Idempotent (migration 018): the retry is recorded in
-- job_actions, and a second call, concurrent or later, returns the same
-- new_id and the state the job had then, never a second copy. Otherwise no
-- new id, and the state of the job if it is in flight (ready, scheduled,
-- running), else NULL. The columns a replay leaves behind, and why:
-- internal/store/copies_test.go.
CREATE OR REPLACE FUNCTION {{schema}}.retry_job(p_id bigint, OUT new_id bigint, OUT state text)
LANGUAGE plpgsql AS $$
DECLARE
    d {{schema}}.jobs_dead%ROWTYPE;
    f record;
BEGIN
    -- Retried before: the first call's answer.
    SELECT a.new_id, a.was INTO new_id, state
    FROM {{schema}}.job_actions AS a WHERE a.id = p_id AND a.action = 'retry';
    IF FOUND THEN
        RETURN;
    END IF;
    -- A dead letter: deleting it is the arbiter (a concurrent retry waits
    -- for this row, finds it gone, and reads the record below).
    DELETE FROM {{schema}}.jobs_dead AS x WHERE x.id = p_id RETURNING x.* INTO d;
    IF FOUND THEN
        state := 'dead';
        INSERT INTO {{schema}}.jobs_keyed AS j (queue, kind, payload, priority, run_at, max_attempts, unique_key, tenant, entity,
                                                metadata, limit_weight, sealed)
        VALUES (d.queue, d.kind, d.payload, d.priority, now(), d.max_attempts, d.unique_key, d.tenant, d.entity, d.metadata,
                d.limit_weight, d.sealed)
        ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
        RETURNING j.id INTO new_id;
        IF new_id IS NULL THEN
            RAISE EXCEPTION 'skiplock: id: dead job % has unique key % in flight again; it stays dead', p_id, d.unique_key
                USING ERRCODE = '55000';
        END IF;
        INSERT INTO {{schema}}.job_actions (id, action, was, new_id) VALUES (p_id, 'retry', 'dead', new_id);
        PERFORM pg_notify({{schema_lit}} || '.jobs', d.queue);
        RETURN;
    END IF;
    SELECT x.queue, x.kind, x.payload, x.priority, x.max_attempts, x.tenant, x.entity, x.metadata, x.limit_weight, x.sealed INTO f
    FROM {{schema}}.jobs_done AS x WHERE x.id = p_id
    ORDER BY x.finished_at DESC LIMIT 1;
    IF FOUND THEN
        -- A completed job stays where it is: the record's primary key is the
        -- arbiter. A concurrent retry waits for this insert and, once it
        -- commits, returns this call's copy.
        INSERT INTO {{schema}}.job_actions AS a (id, action, was) VALUES (p_id, 'retry', 'completed')
        ON CONFLICT (id, action) DO NOTHING;
        IF NOT FOUND THEN
            SELECT a.new_id, a.was INTO new_id, state
            FROM {{schema}}.job_actions AS a WHERE a.id = p_id AND a.action = 'retry';
            RETURN;
        END IF;
        state := 'completed';
        INSERT INTO {{schema}}.jobs AS j (queue, kind, payload, priority, run_at, max_attempts, tenant, entity, metadata, limit_weight,
                                          sealed)
        VALUES (f.queue, f.kind, f.payload, f.priority, now(), coalesce(f.max_attempts, 20), f.tenant, f.entity, f.metadata,
                f.limit_weight, f.sealed)
        RETURNING j.id INTO new_id;
        UPDATE {{schema}}.job_actions AS a SET new_id = retry_job.new_id WHERE a.id = p_id AND a.action = 'retry';
        PERFORM pg_notify({{schema_lit}} || '.jobs', f.queue);
        RETURN;
    END IF;
    -- A concurrent retry took the dead letter first: its record.
    SELECT a.new_id, a.was INTO new_id, state
    FROM {{schema}}.job_actions AS a WHERE a.id = p_id AND a.action = 'retry';
    IF FOUND THEN
        RETURN;
    END IF;
    SELECT CASE WHEN j.state = 'ready' AND j.run_at > now() THEN 'scheduled' ELSE j.state END INTO state
    FROM {{schema}}.jobs AS j WHERE j.id = p_id;
END
$$;

COMMENT ON FUNCTION {{schema}}.retry_job(bigint) IS
    'skiplock: retries a dead or finished job as exactly one new ready job, once: a repeated call returns the same id and old state (new_id NULL: not retryable, state says why).';
