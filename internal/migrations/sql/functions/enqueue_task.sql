-- Turns a ready task into a job (tasks without parents, and retried ones):
-- the task's row gets its job's id and the job is inserted with its
-- task_id, in one statement; the queue is woken. The spec was validated
-- when the task was added. A task's job is due at clock_timestamp(), not
-- at its transaction's start (now()): a pool that claims after
-- a remembered bound (claim.sql) finds a job sorting after the jobs it
-- already took without waiting for its periodic claim from the front.
CREATE OR REPLACE FUNCTION {{schema}}.enqueue_task(p_task bigint)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_job bigint;
BEGIN
    WITH t AS (
        UPDATE {{schema}}.workflow_tasks AS t
        SET state = 'enqueued', job_id = nextval('{{schema}}.jobs_id_seq'::regclass), enqueued_at = now(), error = NULL
        WHERE t.id = p_task
        RETURNING t.*
    ), ins AS (
        INSERT INTO {{schema}}.jobs AS j (id, queue, kind, payload, priority, run_at, max_attempts, tenant, entity, metadata, task_id)
        OVERRIDING SYSTEM VALUE
        SELECT t.job_id, t.queue, t.kind, t.payload, t.priority, clock_timestamp(), coalesce(t.max_attempts, 20), t.tenant, t.entity,
               t.metadata, t.id
        FROM t
        RETURNING j.id, j.queue
    )
    SELECT max(ins.id) INTO v_job FROM ins, pg_notify({{schema_lit}} || '.jobs', ins.queue) AS n;
    RETURN v_job;
END
$$;
