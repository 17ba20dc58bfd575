-- Cancels a running workflow: pending tasks are cancelled, ready jobs go to
-- the dead-letter table as cancelled, running ones are asked to stop (their
-- worker dead-letters them as cancelled when the handler returns). The
-- workflow ends as 'cancelled' once nothing is open. Returns the number of
-- tasks it stopped or asked to stop.
CREATE OR REPLACE FUNCTION {{schema}}.cancel_workflow(p_workflow bigint)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    w {{schema}}.workflows%ROWTYPE;
    v_pending integer;
    v_jobs integer := 0;
    r record;
BEGIN
    SELECT * INTO w FROM {{schema}}.workflows WHERE id = p_workflow FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'skiplock: id: no workflow %', p_workflow USING ERRCODE = '22023';
    ELSIF w.state <> 'running' THEN
        RETURN 0;
    END IF;
    -- The state first: the tasks ending below must not end it as 'failed'.
    WITH gone AS (
        UPDATE {{schema}}.workflow_tasks AS t SET state = 'cancelled', finished_at = now(), error = 'workflow cancelled'
        WHERE t.workflow_id = p_workflow AND t.state = 'pending'
        RETURNING t.id
    )
    SELECT count(*) INTO v_pending FROM gone;
    UPDATE {{schema}}.workflows AS x
    SET state = 'cancelled', tasks_open = x.tasks_open - v_pending, tasks_cancelled = x.tasks_cancelled + v_pending,
        finished_at = CASE WHEN x.tasks_open - v_pending = 0 THEN now() END
    WHERE x.id = p_workflow;
    FOR r IN SELECT t.job_id FROM {{schema}}.workflow_tasks AS t
             WHERE t.workflow_id = p_workflow AND t.state = 'enqueued' ORDER BY t.job_id LOOP
        -- As lease.sql's "cancel" does to one job: a ready job goes to
        -- jobs_dead as cancelled (the trigger ends its task), a running one
        -- is flagged and its worker told; it is dead-lettered as cancelled
        -- when its handler returns.
        WITH x AS (
            DELETE FROM {{schema}}.jobs AS j WHERE j.id = r.job_id AND j.state = 'ready' RETURNING j.*
        )
        INSERT INTO {{schema}}.jobs_dead (id, priority, attempts, max_attempts, run_at, created_at, queue, kind,
                                          reason, locked_by, unique_key, tenant, entity, last_error, payload, metadata,
                                          limit_weight, sealed)
        SELECT x.id, x.priority, x.attempts, x.max_attempts, x.run_at, x.created_at, x.queue, x.kind,
               'cancelled', x.locked_by, x.unique_key, x.tenant, x.entity, 'workflow cancelled', x.payload, x.metadata,
               x.limit_weight, x.sealed
        FROM x;
        UPDATE {{schema}}.jobs AS j SET cancel_requested = true
        WHERE j.id = r.job_id AND j.state = 'running';
        IF FOUND THEN
            PERFORM pg_notify({{schema_lit}} || '.cancel', r.job_id::text);
        END IF;
        v_jobs := v_jobs + 1;
    END LOOP;
    RETURN v_pending + v_jobs;
END
$$;
