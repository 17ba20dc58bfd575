-- Adds tasks to a workflow: at creation, or at run time from a task (fan-out).
-- p_tasks is a JSON array of objects with the keys name, queue, kind, payload,
-- priority, max_attempts, tenant, entity, metadata, depends_on (names) and
-- callback. A task may depend on tasks earlier in the array or already in
-- the workflow, so no cycle can be built. A task whose name exists already is
-- skipped (adding is idempotent, so a retried fan-out adds nothing twice).
-- Tasks with no open parent are enqueued at once. Returns the ids of the
-- tasks added.
CREATE OR REPLACE FUNCTION {{schema}}.add_tasks(p_workflow bigint, p_tasks jsonb)
RETURNS SETOF bigint
LANGUAGE plpgsql
-- Sequential scans off (as in tasks_left): a plan the connection cached while
-- the tables were small reaches the workflow tables by their keys whatever
-- their size was when it was made (planning every call instead was most of a
-- workflow's enqueue: 2.4-3.2 ms for 12 tasks, 1.7 ms this way).
SET enable_seqscan = off
AS $$
DECLARE
    w {{schema}}.workflows%ROWTYPE;
    v_bad record;
    v_added bigint[];
    v_cancelled integer := 0;
    v_n integer;
BEGIN
    SELECT * INTO w FROM {{schema}}.workflows WHERE id = p_workflow FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'skiplock: workflow: no workflow %', p_workflow USING ERRCODE = '22023';
    ELSIF w.state <> 'running' THEN
        RAISE EXCEPTION 'skiplock: workflow: workflow % is %, tasks cannot be added', p_workflow, w.state USING ERRCODE = '55000';
    END IF;
    IF p_tasks IS NULL OR jsonb_typeof(p_tasks) <> 'array' OR jsonb_array_length(p_tasks) = 0 THEN
        RAISE EXCEPTION 'skiplock: tasks: must be a non-empty JSON array' USING ERRCODE = '22023';
    END IF;
    -- Set-based throughout: a statement costs the same for one task or a
    -- thousand, and a batch adds thousands.
    PERFORM {{schema}}.validate_step_name('tasks[' || a.i || '].name', a.x->>'name'),
            {{schema}}.validate_job(a.x->>'queue', a.x->>'kind', coalesce(a.x->'payload', '{}'),
                coalesce((a.x->>'priority')::integer, 0), now(), (a.x->>'max_attempts')::integer,
                NULL, a.x->>'tenant', a.x->>'entity'),
            {{schema}}.validate_metadata(nullif(a.x->'metadata', 'null'::jsonb))
    FROM jsonb_array_elements(p_tasks) WITH ORDINALITY AS a(x, i);
    SELECT min(a.i) AS i, a.x->>'name' AS name INTO v_bad
    FROM jsonb_array_elements(p_tasks) WITH ORDINALITY AS a(x, i)
    GROUP BY a.x->>'name' HAVING count(*) > 1
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'skiplock: tasks[%].name: % is named twice', v_bad.i, v_bad.name USING ERRCODE = '22023';
    END IF;
    -- Every dependency of a task to add names an earlier task of the array
    -- or a task the workflow had before: no cycle can be built. (Joins, not
    -- correlated scans of the array: a batch's callback has one dependency
    -- per member.)
    WITH input AS MATERIALIZED (
        SELECT a.i, a.x->>'name' AS name, a.x->'depends_on' AS deps
        FROM jsonb_array_elements(p_tasks) WITH ORDINALITY AS a(x, i)
    ), had AS MATERIALIZED (
        SELECT t.name FROM {{schema}}.workflow_tasks AS t
        JOIN input AS n ON t.workflow_id = p_workflow AND t.name = n.name
    )
    SELECT n.i, dep INTO v_bad
    FROM input AS n
    CROSS JOIN jsonb_array_elements_text(coalesce(n.deps, '[]')) AS dep
    LEFT JOIN input AS e ON e.name = dep AND e.i < n.i
    WHERE e.i IS NULL
      AND n.name NOT IN (SELECT had.name FROM had)
      AND NOT EXISTS (SELECT 1 FROM {{schema}}.workflow_tasks AS t WHERE t.workflow_id = p_workflow AND t.name = dep)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'skiplock: tasks[%].depends_on: % names no earlier task of the workflow', v_bad.i, v_bad.dep
            USING ERRCODE = '22023';
    END IF;

    -- The tasks (a name the workflow has already is skipped), then their edges.
    WITH ins AS (
        INSERT INTO {{schema}}.workflow_tasks AS t (workflow_id, name, queue, kind, payload, priority, max_attempts,
                                                   tenant, entity, metadata, is_callback)
        SELECT p_workflow, a.x->>'name', a.x->>'queue', a.x->>'kind', coalesce(a.x->'payload', '{}'),
               coalesce((a.x->>'priority')::integer, 0), (a.x->>'max_attempts')::integer, a.x->>'tenant',
               a.x->>'entity', nullif(a.x->'metadata', 'null'::jsonb), coalesce((a.x->>'callback')::boolean, false)
        FROM jsonb_array_elements(p_tasks) WITH ORDINALITY AS a(x, i)
        ORDER BY a.i
        ON CONFLICT (workflow_id, name) DO NOTHING
        RETURNING t.id
    )
    SELECT coalesce(array_agg(ins.id), '{}') INTO v_added FROM ins;
    IF cardinality(v_added) = 0 THEN
        RETURN;
    END IF;
    INSERT INTO {{schema}}.workflow_deps (parent_id, task_id)
    SELECT DISTINCT p.id, t.id
    FROM {{schema}}.workflow_tasks AS t
    JOIN jsonb_array_elements(p_tasks) AS a(x) ON a.x->>'name' = t.name
    CROSS JOIN jsonb_array_elements_text(coalesce(a.x->'depends_on', '[]')) AS dep
    JOIN {{schema}}.workflow_tasks AS p ON p.workflow_id = p_workflow AND p.name = dep
    WHERE t.id = ANY (v_added)
    ON CONFLICT DO NOTHING;

    -- What each new task waits for: its parents not finished yet; a parent
    -- that failed counts as failed. (Per task, by index: without statistics
    -- a join over the edges would be planned as whole-table scans.)
    WITH u AS (
        UPDATE {{schema}}.workflow_tasks AS t
        SET waiting = (SELECT count(*) FROM {{schema}}.workflow_deps AS d
                       JOIN {{schema}}.workflow_tasks AS p ON p.id = d.parent_id
                       WHERE d.task_id = t.id AND p.state IN ('pending', 'enqueued')),
            parents_failed = (SELECT count(*) FROM {{schema}}.workflow_deps AS d
                              JOIN {{schema}}.workflow_tasks AS p ON p.id = d.parent_id
                              WHERE d.task_id = t.id AND p.state IN ('dead', 'cancelled'))
        WHERE t.id = ANY (v_added)
        RETURNING t.parents_failed
    )
    SELECT count(*) INTO v_n FROM u WHERE u.parents_failed > 0;
    IF w.on_failure = 'cancel' AND v_n > 0 THEN
        -- A new task below a failed parent never runs, nor do the new tasks
        -- below it (only new tasks can depend on new tasks).
        WITH RECURSIVE below(id) AS (
            SELECT t.id FROM {{schema}}.workflow_tasks AS t WHERE t.id = ANY (v_added) AND t.parents_failed > 0
            UNION
            SELECT d.task_id FROM {{schema}}.workflow_deps AS d JOIN below AS b ON d.parent_id = b.id
        ), gone AS (
            UPDATE {{schema}}.workflow_tasks AS t
            SET state = 'cancelled', finished_at = now(), error = 'a task it depends on failed'
            FROM below AS b WHERE t.id = b.id AND t.state = 'pending'
            RETURNING t.id
        )
        SELECT count(*) INTO v_cancelled FROM gone;
    END IF;
    -- Tasks with no open parent become jobs now (as in enqueue_task).
    WITH t AS (
        UPDATE {{schema}}.workflow_tasks AS t
        SET state = 'enqueued', job_id = nextval('{{schema}}.jobs_id_seq'::regclass), enqueued_at = now()
        WHERE t.id = ANY (v_added) AND t.state = 'pending' AND t.waiting = 0
        RETURNING t.*
    ), ins AS (
        INSERT INTO {{schema}}.jobs AS j (id, queue, kind, payload, priority, run_at, max_attempts, tenant, entity, metadata, task_id)
        OVERRIDING SYSTEM VALUE
        SELECT t.job_id, t.queue, t.kind, t.payload, t.priority, clock_timestamp(), coalesce(t.max_attempts, 20), t.tenant, t.entity,
               t.metadata, t.id
        FROM t
        RETURNING j.queue
    )
    SELECT count(*) INTO v_n FROM ins, pg_notify({{schema_lit}} || '.jobs', ins.queue) AS n;
    -- One update of the workflow's row for the whole call.
    UPDATE {{schema}}.workflows
    SET tasks_total = tasks_total + cardinality(v_added), tasks_open = tasks_open + cardinality(v_added) - v_cancelled,
        tasks_cancelled = tasks_cancelled + v_cancelled
    WHERE id = p_workflow;
    RETURN QUERY SELECT unnest(v_added);
END
$$;
