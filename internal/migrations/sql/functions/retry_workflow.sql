-- Retries a finished workflow's failed part: every dead or cancelled task is
-- made pending again (its output and error cleared), the counters follow, and
-- the tasks whose parents all completed are enqueued; the rest wait for them
-- as before. Completed tasks are not run again. Returns the number of tasks
-- retried.
CREATE OR REPLACE FUNCTION {{schema}}.retry_workflow(p_workflow bigint)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    w {{schema}}.workflows%ROWTYPE;
    v_n integer;
    t record;
BEGIN
    SELECT * INTO w FROM {{schema}}.workflows WHERE id = p_workflow FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'skiplock: id: no workflow %', p_workflow USING ERRCODE = '22023';
    ELSIF w.state = 'running' THEN
        RAISE EXCEPTION 'skiplock: id: workflow % is still running; cancel it first or wait for it', p_workflow
            USING ERRCODE = '55000';
    END IF;
    WITH again AS (
        UPDATE {{schema}}.workflow_tasks AS x
        SET state = 'pending', job_id = NULL, output = NULL, error = NULL, finished_at = NULL, enqueued_at = NULL,
            parents_failed = 0,
            waiting = (SELECT count(*) FROM {{schema}}.workflow_deps AS d
                       JOIN {{schema}}.workflow_tasks AS p ON p.id = d.parent_id
                       WHERE d.task_id = x.id AND p.state <> 'completed')
        WHERE x.workflow_id = p_workflow AND x.state IN ('dead', 'cancelled')
        RETURNING x.id
    )
    SELECT count(*) INTO v_n FROM again;
    IF v_n = 0 THEN
        RETURN 0;
    END IF;
    UPDATE {{schema}}.workflows
    SET state = 'running', finished_at = NULL, tasks_open = v_n, tasks_dead = 0, tasks_cancelled = 0
    WHERE id = p_workflow;
    FOR t IN SELECT x.id FROM {{schema}}.workflow_tasks AS x
             WHERE x.workflow_id = p_workflow AND x.state = 'pending' AND x.waiting = 0 ORDER BY x.id LOOP
        PERFORM {{schema}}.enqueue_task(t.id);
    END LOOP;
    RETURN v_n;
END
$$;
