-- Durable workflows (issue 19): task graphs whose tasks are jobs, task
-- outputs, checkpointed steps, timers and signals, batches with a callback.
--
-- A task that is not yet runnable never sits in the hot table: it waits in
-- workflow_tasks with the spec of its job, and becomes a job (enqueue_task)
-- when its last parent finishes. The hot table only learns one nullable
-- column, task_id, in no index; plain jobs leave it NULL and pay nothing.
--
-- A task's end is seen by one AFTER DELETE trigger on jobs, fired only for
-- rows with a task_id (its WHEN clause is evaluated in C, so a plain job's
-- completion runs no PL/pgSQL). Every way a job leaves the hot table passes
-- through it, in the transaction that removes the row: the completer's
-- batched completions and dead letters, CompleteTx in the handler's own
-- transaction, the reaper, cancel and job delete. docs/workflows.md says why
-- this is a trigger and not a second path in the completer.

-- NULL: a plain job. > 0: the workflow task this job runs. 0: a plain job
-- that keeps durable state (checkpointed steps), removed when it ends.
ALTER TABLE {{schema}}.jobs ADD COLUMN task_id bigint;

CREATE TABLE {{schema}}.workflows (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name            text        NOT NULL,
    state           text        NOT NULL DEFAULT 'running',
    on_failure      text        NOT NULL DEFAULT 'cancel',
    is_batch        boolean     NOT NULL DEFAULT false,
    -- Counters kept by the trigger under the workflow's row lock: they decide
    -- the workflow's end exactly once, without counting tasks.
    tasks_total     integer     NOT NULL DEFAULT 0,
    tasks_open      integer     NOT NULL DEFAULT 0,  -- pending or enqueued
    tasks_completed integer     NOT NULL DEFAULT 0,
    tasks_dead      integer     NOT NULL DEFAULT 0,
    tasks_cancelled integer     NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz,
    metadata        jsonb,
    CONSTRAINT workflows_state_check CHECK (state IN ('running', 'completed', 'failed', 'cancelled')),
    CONSTRAINT workflows_on_failure_check CHECK (on_failure IN ('cancel', 'continue')),
    CONSTRAINT workflows_name_check CHECK (name <> '' AND octet_length(name) <= 128)
) WITH (
    fillfactor = 50,                       -- a workflow's row is updated once per task: keep it HOT
    autovacuum_vacuum_scale_factor = 0.02
);
CREATE INDEX workflows_running ON {{schema}}.workflows (id) WHERE state = 'running';
CREATE INDEX workflows_created ON {{schema}}.workflows (created_at);

-- One row per task. The job spec (queue .. metadata) is kept so a pending
-- task can be enqueued when it becomes ready, and a dead one retried.
CREATE TABLE {{schema}}.workflow_tasks (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workflow_id    bigint      NOT NULL,
    name           text        NOT NULL,
    state          text        NOT NULL DEFAULT 'pending',
    waiting        integer     NOT NULL DEFAULT 0,  -- parents not finished yet
    parents_failed integer     NOT NULL DEFAULT 0,  -- parents that died or were cancelled
    is_callback    boolean     NOT NULL DEFAULT false,
    job_id         bigint,                          -- the task's job, once enqueued
    queue          text        NOT NULL,
    kind           text        NOT NULL,
    payload        jsonb       NOT NULL DEFAULT '{}',
    priority       integer     NOT NULL DEFAULT 0,
    max_attempts   integer,
    tenant         text,
    entity         text,
    metadata       jsonb,
    output         jsonb,
    error          text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    enqueued_at    timestamptz,
    finished_at    timestamptz,
    CONSTRAINT workflow_tasks_state_check CHECK (state IN ('pending', 'enqueued', 'completed', 'dead', 'cancelled')),
    CONSTRAINT workflow_tasks_name_check CHECK (name <> '' AND octet_length(name) <= 128),
    -- Outputs are for small results (ids, totals), 256 KiB at most; the Go
    -- API checks the same bound first (MaxOutputBytes).
    CONSTRAINT workflow_tasks_output_check CHECK (output IS NULL OR octet_length(output::text) <= 262144),
    UNIQUE (workflow_id, name)
) WITH (
    -- A task's row is updated when it is enqueued, when it ends and, for a
    -- fan-in, once per parent: room on the page keeps those updates HOT
    -- (no column they change is indexed; tasks are reached by id, or by
    -- workflow and name).
    fillfactor = 70,
    autovacuum_vacuum_scale_factor = 0.02
);

-- The graph's edges: task waits for parent.
--
-- No foreign keys between these tables: PostgreSQL checks one with a query
-- per inserted or updated row, which made a 12-task workflow cost 60 of
-- them to enqueue and one per task update to run. Only the functions below
-- write these tables, and they keep them consistent; delete_workflow
-- removes a workflow with its tasks, edges and signals.
CREATE TABLE {{schema}}.workflow_deps (
    parent_id bigint NOT NULL,
    task_id   bigint NOT NULL,
    PRIMARY KEY (parent_id, task_id)
);
CREATE INDEX workflow_deps_task ON {{schema}}.workflow_deps (task_id);

-- Checkpoints of a job's durable steps (Step, Sleep, WaitSignal), keyed by
-- the job id, which a retry keeps. Removed when the job leaves the hot table.
CREATE TABLE {{schema}}.job_steps (
    job_id     bigint      NOT NULL,
    name       text        NOT NULL,
    output     jsonb       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, name),
    CONSTRAINT job_steps_output_check CHECK (octet_length(output::text) <= 262144)
);

-- Signals, addressed to one job or to a workflow (any of its tasks that waits
-- for the name). Kept until consumed, so one sent before the wait begins is
-- never lost; consumed_by records the job that received it, once.
CREATE TABLE {{schema}}.signals (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        text        NOT NULL,
    workflow_id bigint,
    job_id      bigint,
    payload     jsonb       NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now(),
    consumed_by bigint,
    consumed_at timestamptz,
    CONSTRAINT signals_target_check CHECK ((workflow_id IS NULL) <> (job_id IS NULL))
);
-- By job, consumed or not: a wait reads the unconsumed ones, and a job's
-- signals are removed with it.
CREATE INDEX signals_job ON {{schema}}.signals (job_id, name, id) WHERE job_id IS NOT NULL;
CREATE INDEX signals_workflow ON {{schema}}.signals (workflow_id, name, id) WHERE workflow_id IS NOT NULL;

-- Validation of a workflow's or a signal's name, shared by every entry point.
CREATE FUNCTION {{schema}}.validate_step_name(p_field text, p_name text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_name IS NULL OR p_name = '' THEN
        RAISE EXCEPTION 'skiplock: %: must not be empty', p_field USING ERRCODE = '22023';
    ELSIF octet_length(p_name) > 128 THEN
        RAISE EXCEPTION 'skiplock: %: longer than 128 bytes', p_field USING ERRCODE = '22023';
    ELSIF p_name ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION 'skiplock: %: must not contain control characters', p_field USING ERRCODE = '22023';
    END IF;
END
$$;

-- A task's job takes its id from the jobs table's own identity sequence
-- before the row is inserted, so that the task's row and its job can be
-- written in one statement (see job_left). The sequence must be the one
-- the identity column uses.
DO $$
BEGIN
    IF pg_get_serial_sequence('{{schema}}.jobs', 'id')::regclass <> '{{schema}}.jobs_id_seq'::regclass THEN
        RAISE EXCEPTION 'skiplock: the jobs table''s identity sequence is not jobs_id_seq';
    END IF;
END
$$;

-- Turns a ready task into a job (tasks without parents, and retried ones):
-- the task's row gets its job's id and the job is inserted with its
-- task_id, in one statement; the queue is woken. The spec was validated
-- when the task was added. A task's job is due at clock_timestamp(), not
-- at its transaction's start (now()): a pool that claims after
-- a remembered bound (claim.sql) finds a job sorting after the jobs it
-- already took without waiting for its periodic claim from the front.
CREATE FUNCTION {{schema}}.enqueue_task(p_task bigint)
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

-- The trigger: a task's job left the hot table, so the task ended, in the
-- transaction that removed the row. Its end is read from where the row
-- went: jobs_dead (dead, or cancelled when that is the reason), else
-- completed when it was running (only a lease holder deletes a running
-- row), else cancelled (an operator deleted a ready job). A job that is no
-- longer its task's current job (a retried task's old one) changes nothing.
--
-- Then what follows, in as few statements as possible (each statement a
-- trigger runs costs tens of microseconds whatever it does; a completer
-- batch runs this once per task): the workflow's counters, updated under
-- its row lock, end the workflow exactly once when its last open task ends;
-- the children's wait counts go down, and those with no parent left become
-- jobs in the same statement. Under the 'cancel' policy a dead or cancelled
-- task instead cancels every pending descendant at once; under 'continue'
-- its children run anyway once their other parents finished.
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

-- Adds tasks to a workflow: at creation, or at run time from a task (fan-out).
-- p_tasks is a JSON array of objects with the keys name, queue, kind, payload,
-- priority, max_attempts, tenant, entity, metadata, depends_on (names) and
-- callback. A task may depend on tasks earlier in the array or already in
-- the workflow, so no cycle can be built. A task whose name exists already is
-- skipped (adding is idempotent, so a retried fan-out adds nothing twice).
-- Tasks with no open parent are enqueued at once. Returns the ids of the
-- tasks added.
CREATE FUNCTION {{schema}}.add_tasks(p_workflow bigint, p_tasks jsonb)
RETURNS SETOF bigint
LANGUAGE plpgsql
-- Planned for each call: a connection's cached generic plans were made when
-- the tables were small, and kept scanning workflow_tasks whole once it had
-- grown (2 ms a workflow at 24,000 tasks).
SET plan_cache_mode = force_custom_plan
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

-- Creates a workflow with its tasks (see add_tasks). Returns its id.
CREATE FUNCTION {{schema}}.create_workflow(p_name text, p_on_failure text, p_tasks jsonb,
                                           p_metadata jsonb DEFAULT NULL, p_batch boolean DEFAULT false)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_id bigint;
BEGIN
    PERFORM {{schema}}.validate_step_name('name', p_name);
    IF coalesce(p_on_failure, 'cancel') NOT IN ('cancel', 'continue') THEN
        RAISE EXCEPTION 'skiplock: on_failure: must be cancel or continue, got %', p_on_failure USING ERRCODE = '22023';
    END IF;
    PERFORM {{schema}}.validate_metadata(p_metadata);
    INSERT INTO {{schema}}.workflows AS w (name, on_failure, metadata, is_batch)
    VALUES (p_name, coalesce(p_on_failure, 'cancel'), p_metadata, coalesce(p_batch, false))
    RETURNING w.id INTO v_id;
    PERFORM {{schema}}.add_tasks(v_id, p_tasks);
    RETURN v_id;
END
$$;

-- Cancels a running workflow: pending tasks are cancelled, ready jobs go to
-- the dead-letter table as cancelled, running ones are asked to stop (their
-- worker dead-letters them as cancelled when the handler returns). The
-- workflow ends as 'cancelled' once nothing is open. Returns the number of
-- tasks it stopped or asked to stop.
CREATE FUNCTION {{schema}}.cancel_workflow(p_workflow bigint)
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
                                          reason, locked_by, unique_key, tenant, entity, last_error, payload, metadata)
        SELECT x.id, x.priority, x.attempts, x.max_attempts, x.run_at, x.created_at, x.queue, x.kind,
               'cancelled', x.locked_by, x.unique_key, x.tenant, x.entity, 'workflow cancelled', x.payload, x.metadata
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

-- Retries a finished workflow's failed part: every dead or cancelled task is
-- made pending again (its output and error cleared), the counters follow, and
-- the tasks whose parents all completed are enqueued; the rest wait for them
-- as before. Completed tasks are not run again. Returns the number of tasks
-- retried.
CREATE FUNCTION {{schema}}.retry_workflow(p_workflow bigint)
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

-- Deletes a finished workflow with its tasks, edges and signals (the jobs of
-- a finished workflow have all left the hot table). Returns whether it
-- existed; a running workflow is refused.
CREATE FUNCTION {{schema}}.delete_workflow(p_workflow bigint)
RETURNS boolean
LANGUAGE plpgsql
SET plan_cache_mode = force_custom_plan -- as add_tasks
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

-- Sends a signal, from any language, psql or a trigger:
--   SELECT skiplock.signal(name => 'payment_received', workflow_id => 42, payload => '{"amount": 1200}');
-- Exactly one of workflow_id and job_id names the target: a running
-- workflow (any of its tasks that waits for the name receives it) or a job
-- in flight. The signal is kept until a wait consumes it, so one sent before
-- the wait begins is never lost. The target's jobs are locked and, if they
-- sleep in a wait for this name, made due now: WaitSignal locks its own job
-- before it looks for a signal and goes to sleep in that same transaction,
-- so a signal is either seen by the wait or wakes the job it sent to sleep
-- (docs/workflows.md). In a REPEATABLE READ or SERIALIZABLE transaction the
-- lock may raise a serialization failure (40001): retry the transaction.
-- Returns the signal's id.
CREATE FUNCTION {{schema}}.signal(name text, workflow_id bigint DEFAULT NULL, job_id bigint DEFAULT NULL,
                                  payload jsonb DEFAULT '{}')
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_id bigint;
    v_payload jsonb := coalesce(payload, '{}'::jsonb);
    q record;
BEGIN
    PERFORM {{schema}}.validate_step_name('name', signal.name);
    IF (signal.workflow_id IS NULL) = (signal.job_id IS NULL) THEN
        RAISE EXCEPTION 'skiplock: workflow_id, job_id: give exactly one target' USING ERRCODE = '22023';
    END IF;
    IF jsonb_typeof(v_payload) <> 'object' THEN
        RAISE EXCEPTION 'skiplock: payload: must be a JSON object, got %', jsonb_typeof(v_payload) USING ERRCODE = '22023';
    ELSIF octet_length(v_payload::text) > 65536 THEN
        RAISE EXCEPTION 'skiplock: payload: % bytes exceeds the limit of 65536 bytes', octet_length(v_payload::text)
            USING ERRCODE = '22023';
    END IF;
    IF signal.workflow_id IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM {{schema}}.workflows AS w WHERE w.id = signal.workflow_id AND w.state = 'running') THEN
        RAISE EXCEPTION 'skiplock: workflow_id: no running workflow %', signal.workflow_id USING ERRCODE = '22023';
    END IF;
    IF signal.job_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM {{schema}}.jobs AS j WHERE j.id = signal.job_id) THEN
        RAISE EXCEPTION 'skiplock: job_id: no job % in flight', signal.job_id USING ERRCODE = '22023';
    END IF;
    INSERT INTO {{schema}}.signals AS s (name, workflow_id, job_id, payload)
    VALUES (signal.name, signal.workflow_id, signal.job_id, v_payload)
    RETURNING s.id INTO v_id;
    -- Lock the target's job rows (waiting for a wait's transaction that
    -- holds one), then, in a statement that sees what that transaction
    -- committed, make due the jobs asleep in a wait for this name: ready,
    -- due at exactly the wait's deadline, the wait not yet over. A job
    -- waiting out a retry's backoff or a Sleep is left alone.
    PERFORM 1 FROM {{schema}}.jobs AS j
    WHERE j.id IN (SELECT signal.job_id WHERE signal.job_id IS NOT NULL
                   UNION ALL
                   SELECT t.job_id FROM {{schema}}.workflow_tasks AS t
                   WHERE t.workflow_id = signal.workflow_id AND t.state = 'enqueued')
    ORDER BY j.id
    FOR NO KEY UPDATE OF j;
    FOR q IN
        UPDATE {{schema}}.jobs AS j
        SET run_at = now()
        FROM {{schema}}.job_steps AS w
        WHERE j.id IN (SELECT signal.job_id WHERE signal.job_id IS NOT NULL
                       UNION ALL
                       SELECT t.job_id FROM {{schema}}.workflow_tasks AS t
                       WHERE t.workflow_id = signal.workflow_id AND t.state = 'enqueued')
          AND j.state = 'ready' AND j.run_at > now()
          AND w.job_id = j.id AND w.name = 'wait:' || signal.name
          AND j.run_at = (w.output->>'wake_at')::timestamptz
          AND NOT EXISTS (SELECT 1 FROM {{schema}}.job_steps AS r WHERE r.job_id = j.id AND r.name = 'signal:' || signal.name)
        RETURNING j.queue
    LOOP
        PERFORM pg_notify({{schema_lit}} || '.jobs', q.queue);
    END LOOP;
    RETURN v_id;
END
$$;
