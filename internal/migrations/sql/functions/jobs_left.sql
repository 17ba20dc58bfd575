-- The trigger: one look at the rows the statement deleted; plain jobs
-- (task_id NULL) stop here.
CREATE OR REPLACE FUNCTION {{schema}}.jobs_left()
RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_jobs bigint[];
    v_tasks bigint[];
    v_running boolean[];
BEGIN
    SELECT array_agg(g.id ORDER BY g.task_id), array_agg(g.task_id ORDER BY g.task_id),
           array_agg(g.state = 'running' ORDER BY g.task_id)
    INTO v_jobs, v_tasks, v_running
    FROM gone AS g WHERE g.task_id IS NOT NULL;
    IF v_jobs IS NOT NULL THEN
        PERFORM {{schema}}.tasks_left(v_jobs, v_tasks, v_running);
    END IF;
    RETURN NULL;
END
$$;
