-- Deletes a finished workflow with its tasks, edges and signals (the jobs of
-- a finished workflow have all left the hot table). Returns whether it
-- existed; a running workflow is refused.
CREATE OR REPLACE FUNCTION {{schema}}.delete_workflow(p_workflow bigint)
RETURNS boolean
LANGUAGE plpgsql
SET enable_seqscan = off -- as add_tasks
AS $$
DECLARE
    v_state text;
BEGIN
    SELECT w.state INTO v_state FROM {{schema}}.workflows AS w WHERE w.id = p_workflow FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    ELSIF v_state = 'running' THEN
        RAISE EXCEPTION 'skiplock: id: workflow % is still running; cancel it first', p_workflow USING ERRCODE = '55000';
    END IF;
    DELETE FROM {{schema}}.workflow_deps AS d
    WHERE d.task_id = ANY (ARRAY(SELECT t.id FROM {{schema}}.workflow_tasks AS t WHERE t.workflow_id = p_workflow));
    DELETE FROM {{schema}}.workflow_tasks AS t WHERE t.workflow_id = p_workflow;
    DELETE FROM {{schema}}.signals AS g WHERE g.workflow_id = p_workflow;
    DELETE FROM {{schema}}.workflows AS w WHERE w.id = p_workflow;
    RETURN true;
END
$$;
