-- Back to 007's row trigger (one call per task that leaves the hot table).
DROP TRIGGER IF EXISTS jobs_left ON {{schema}}.jobs;
DROP FUNCTION IF EXISTS {{schema}}.jobs_left();
DROP FUNCTION IF EXISTS {{schema}}.tasks_left(bigint[], bigint[], boolean[]);
ALTER FUNCTION {{schema}}.add_tasks(bigint, jsonb) RESET enable_seqscan;
ALTER FUNCTION {{schema}}.add_tasks(bigint, jsonb) SET plan_cache_mode = force_custom_plan;
ALTER FUNCTION {{schema}}.delete_workflow(bigint) RESET enable_seqscan;
ALTER FUNCTION {{schema}}.delete_workflow(bigint) SET plan_cache_mode = force_custom_plan;

CREATE FUNCTION {{schema}}.job_left()
RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_state text;
    v_workflow bigint;
    v_policy text := 'continue';
    v_failed integer := 0;
    v_cancelled integer := 0;
    v_n integer;
BEGIN
    IF OLD.task_id = 0 THEN
        WITH s AS (DELETE FROM {{schema}}.job_steps AS s WHERE s.job_id = OLD.id)
        DELETE FROM {{schema}}.signals AS g WHERE g.job_id = OLD.id;
        RETURN NULL;
    END IF;

    -- Statement 1: the job's checkpoints and signals go, the task ends.
    WITH s AS (DELETE FROM {{schema}}.job_steps AS s WHERE s.job_id = OLD.id),
         g AS (DELETE FROM {{schema}}.signals AS g WHERE g.job_id = OLD.id)
    UPDATE {{schema}}.workflow_tasks AS t
    SET state = e.state, finished_at = now(), error = e.error
    FROM (SELECT CASE WHEN d.reason = 'cancelled' THEN 'cancelled'
                      WHEN d.reason IS NOT NULL THEN 'dead'
                      WHEN OLD.state = 'running' THEN 'completed'
                      ELSE 'cancelled' END AS state,
                 CASE WHEN d.reason IS NOT NULL THEN left(d.last_error, 2048)
                      WHEN OLD.state = 'running' THEN NULL
                      ELSE 'its job was deleted' END AS error
          FROM (SELECT 1) AS one LEFT JOIN {{schema}}.jobs_dead AS d ON d.id = OLD.id) AS e
    WHERE t.id = OLD.task_id AND t.job_id = OLD.id AND t.state = 'enqueued'
    RETURNING t.workflow_id, t.state INTO v_workflow, v_state;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;

    IF v_state = 'completed' THEN
        -- Statement 2 (the common case): the workflow counts the task, under
        -- its row lock, ending when this was its last open task; every
        -- child waits for one parent less, and a child with none left takes
        -- its job's id and becomes that job.
        WITH w AS (
            UPDATE {{schema}}.workflows AS x
            SET tasks_open = x.tasks_open - 1,
                tasks_completed = x.tasks_completed + 1,
                state = CASE
                    WHEN x.state <> 'running' OR x.tasks_open > 1 THEN x.state
                    WHEN x.is_batch THEN 'completed'
                    WHEN x.tasks_dead + x.tasks_cancelled > 0 THEN 'failed'
                    ELSE 'completed' END,
                finished_at = CASE WHEN x.tasks_open = 1 THEN now() ELSE x.finished_at END
            WHERE x.id = v_workflow
        ), kids AS (
            UPDATE {{schema}}.workflow_tasks AS c
            SET waiting = c.waiting - 1,
                state = CASE WHEN c.waiting = 1 THEN 'enqueued' ELSE c.state END,
                job_id = CASE WHEN c.waiting = 1 THEN nextval('{{schema}}.jobs_id_seq'::regclass) ELSE c.job_id END,
                enqueued_at = CASE WHEN c.waiting = 1 THEN now() ELSE c.enqueued_at END
            -- By primary key from the edges' array: a join would let a plan
            -- made before the tables had statistics scan workflow_tasks.
            WHERE c.id = ANY (ARRAY(SELECT d.task_id FROM {{schema}}.workflow_deps AS d WHERE d.parent_id = OLD.task_id))
              AND c.state = 'pending'
            RETURNING c.*
        ), ins AS (
            INSERT INTO {{schema}}.jobs AS j (id, queue, kind, payload, priority, run_at, max_attempts, tenant, entity,
                                              metadata, task_id)
            OVERRIDING SYSTEM VALUE
            SELECT k.job_id, k.queue, k.kind, k.payload, k.priority, clock_timestamp(), coalesce(k.max_attempts, 20),
                   k.tenant, k.entity, k.metadata, k.id
            FROM kids AS k WHERE k.state = 'enqueued'
            RETURNING j.queue
        )
        SELECT count(*) INTO v_n FROM ins, pg_notify({{schema_lit}} || '.jobs', ins.queue) AS n;
        RETURN NULL;
    END IF;

    -- A task that died or was cancelled: its workflow's policy decides.
    IF v_state <> 'completed' THEN
        v_failed := 1;
        SELECT w.on_failure INTO v_policy FROM {{schema}}.workflows AS w WHERE w.id = v_workflow FOR UPDATE;
    END IF;
    IF v_policy = 'cancel' THEN
        WITH RECURSIVE below(id) AS (
            SELECT d.task_id FROM {{schema}}.workflow_deps AS d WHERE d.parent_id = OLD.task_id
            UNION
            SELECT d.task_id FROM {{schema}}.workflow_deps AS d JOIN below AS b ON d.parent_id = b.id
        ), gone AS (
            UPDATE {{schema}}.workflow_tasks AS t
            SET state = 'cancelled', finished_at = now(), error = 'a task it depends on failed'
            FROM below AS b
            WHERE t.id = b.id AND t.state = 'pending'
            RETURNING t.id
        )
        SELECT count(*) INTO v_cancelled FROM gone;
    END IF;

    -- The row lock taken here serializes the ends of one workflow's tasks.
    UPDATE {{schema}}.workflows AS x
    SET tasks_open      = x.tasks_open - 1 - v_cancelled,
        tasks_completed = x.tasks_completed + (v_state = 'completed')::int,
        tasks_dead      = x.tasks_dead + (v_state = 'dead')::int,
        tasks_cancelled = x.tasks_cancelled + (v_state = 'cancelled')::int + v_cancelled,
        state = CASE
            WHEN x.state <> 'running' OR x.tasks_open - 1 - v_cancelled > 0 THEN x.state
            -- A batch's last task is its callback: the batch ends as it does.
            WHEN x.is_batch THEN CASE WHEN v_state = 'completed' THEN 'completed' ELSE 'failed' END
            WHEN x.tasks_dead + (v_state = 'dead')::int > 0
              OR x.tasks_cancelled + (v_state = 'cancelled')::int + v_cancelled > 0 THEN 'failed'
            ELSE 'completed' END,
        finished_at = CASE WHEN x.tasks_open - 1 - v_cancelled = 0 THEN now() ELSE x.finished_at END
    WHERE x.id = v_workflow;

    IF v_policy = 'continue' THEN
        -- One statement: every child waits for one parent less; a child
        -- with none left takes its job's id and becomes that job.
        WITH kids AS (
            UPDATE {{schema}}.workflow_tasks AS c
            SET waiting = c.waiting - 1,
                parents_failed = c.parents_failed + v_failed,
                state = CASE WHEN c.waiting = 1 THEN 'enqueued' ELSE c.state END,
                job_id = CASE WHEN c.waiting = 1 THEN nextval('{{schema}}.jobs_id_seq'::regclass) ELSE c.job_id END,
                enqueued_at = CASE WHEN c.waiting = 1 THEN now() ELSE c.enqueued_at END
            -- By primary key from the edges' array: a join would let a plan
            -- made before the tables had statistics scan workflow_tasks.
            WHERE c.id = ANY (ARRAY(SELECT d.task_id FROM {{schema}}.workflow_deps AS d WHERE d.parent_id = OLD.task_id))
              AND c.state = 'pending'
            RETURNING c.*
        ), ins AS (
            INSERT INTO {{schema}}.jobs AS j (id, queue, kind, payload, priority, run_at, max_attempts, tenant, entity,
                                              metadata, task_id)
            OVERRIDING SYSTEM VALUE
            SELECT k.job_id, k.queue, k.kind, k.payload, k.priority, clock_timestamp(), coalesce(k.max_attempts, 20), k.tenant,
                   k.entity, k.metadata, k.id
            FROM kids AS k WHERE k.state = 'enqueued'
            RETURNING j.queue
        )
        SELECT count(*) INTO v_n FROM ins, pg_notify({{schema_lit}} || '.jobs', ins.queue) AS n;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_task_left AFTER DELETE ON {{schema}}.jobs
    FOR EACH ROW WHEN (OLD.task_id IS NOT NULL) EXECUTE FUNCTION {{schema}}.job_left();
