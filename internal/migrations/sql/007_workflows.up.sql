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
);
CREATE INDEX workflows_running ON {{schema}}.workflows (id) WHERE state = 'running';
CREATE INDEX workflows_created ON {{schema}}.workflows (created_at);

-- One row per task. The job spec (queue .. metadata) is kept so a pending
-- task can be enqueued when it becomes ready, and a dead one retried.
CREATE TABLE {{schema}}.workflow_tasks (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workflow_id    bigint      NOT NULL REFERENCES {{schema}}.workflows (id) ON DELETE CASCADE,
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
);
CREATE INDEX workflow_tasks_job ON {{schema}}.workflow_tasks (job_id) WHERE job_id IS NOT NULL;

-- The graph's edges: task waits for parent.
CREATE TABLE {{schema}}.workflow_deps (
    parent_id bigint NOT NULL REFERENCES {{schema}}.workflow_tasks (id) ON DELETE CASCADE,
    task_id   bigint NOT NULL REFERENCES {{schema}}.workflow_tasks (id) ON DELETE CASCADE,
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
    workflow_id bigint      REFERENCES {{schema}}.workflows (id) ON DELETE CASCADE,
    job_id      bigint,
    payload     jsonb       NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now(),
    consumed_by bigint,
    consumed_at timestamptz,
    CONSTRAINT signals_target_check CHECK ((workflow_id IS NULL) <> (job_id IS NULL))
);
CREATE INDEX signals_job_waiting ON {{schema}}.signals (job_id, name, id) WHERE consumed_at IS NULL AND job_id IS NOT NULL;
CREATE INDEX signals_workflow_waiting ON {{schema}}.signals (workflow_id, name, id) WHERE consumed_at IS NULL AND workflow_id IS NOT NULL;

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

-- Turns a ready task into a job. The spec was validated when the task was
-- added; the job is inserted with its task_id, and the queue woken.
CREATE FUNCTION {{schema}}.enqueue_task(p_task bigint)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    t {{schema}}.workflow_tasks%ROWTYPE;
    v_job bigint;
BEGIN
    SELECT * INTO t FROM {{schema}}.workflow_tasks WHERE id = p_task;
    INSERT INTO {{schema}}.jobs AS j (queue, kind, payload, priority, run_at, max_attempts, tenant, entity, metadata, task_id)
    VALUES (t.queue, t.kind, t.payload, t.priority, now(), coalesce(t.max_attempts, 20), t.tenant, t.entity, t.metadata, t.id)
    RETURNING j.id INTO v_job;
    UPDATE {{schema}}.workflow_tasks SET state = 'enqueued', job_id = v_job, enqueued_at = now(), error = NULL
    WHERE id = p_task;
    PERFORM pg_notify({{schema_lit}} || '.jobs', t.queue);
    RETURN v_job;
END
$$;

-- Records that task p_task (already marked finished with p_state) ended, and
-- does what follows: counts it on its workflow (ending the workflow when it
-- was the last open task), then releases or cancels its children. Under the
-- 'cancel' policy a dead or cancelled task cancels every pending descendant
-- at once; under 'continue' its children run anyway once their other parents
-- finished. Called with the task's row already updated, in the transaction
-- that ended it.
CREATE FUNCTION {{schema}}.task_settled(p_task bigint, p_workflow bigint, p_state text)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    w {{schema}}.workflows%ROWTYPE;
    c record;
    v_failed boolean := p_state <> 'completed';
    v_cancelled integer := 0;
BEGIN
    -- The workflow's row lock serializes the ends of its tasks: the counters
    -- below decide its end exactly once.
    SELECT * INTO w FROM {{schema}}.workflows WHERE id = p_workflow FOR UPDATE;

    IF v_failed AND w.on_failure = 'cancel' THEN
        WITH RECURSIVE below(id) AS (
            SELECT d.task_id FROM {{schema}}.workflow_deps AS d WHERE d.parent_id = p_task
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
    ELSE
        FOR c IN
            UPDATE {{schema}}.workflow_tasks AS t
            SET waiting = t.waiting - 1, parents_failed = t.parents_failed + v_failed::int
            FROM {{schema}}.workflow_deps AS d
            WHERE d.parent_id = p_task AND t.id = d.task_id AND t.state = 'pending'
            RETURNING t.id, t.waiting
        LOOP
            IF c.waiting = 0 THEN
                PERFORM {{schema}}.enqueue_task(c.id);
            END IF;
        END LOOP;
    END IF;

    UPDATE {{schema}}.workflows AS x
    SET tasks_open      = x.tasks_open - 1 - v_cancelled,
        tasks_completed = x.tasks_completed + (p_state = 'completed')::int,
        tasks_dead      = x.tasks_dead + (p_state = 'dead')::int,
        tasks_cancelled = x.tasks_cancelled + (p_state = 'cancelled')::int + v_cancelled,
        state = CASE
            WHEN x.state <> 'running' OR x.tasks_open - 1 - v_cancelled > 0 THEN x.state
            -- A batch's last task is its callback: the batch ends as it does.
            WHEN x.is_batch THEN CASE WHEN p_state = 'completed' THEN 'completed' ELSE 'failed' END
            WHEN x.tasks_dead + (p_state = 'dead')::int > 0
              OR x.tasks_cancelled + (p_state = 'cancelled')::int + v_cancelled > 0 THEN 'failed'
            ELSE 'completed' END,
        finished_at = CASE WHEN x.tasks_open - 1 - v_cancelled = 0 THEN now() ELSE x.finished_at END
    WHERE x.id = p_workflow;
END
$$;

-- The trigger: a task's job left the hot table. Its end is read from where
-- the row went: jobs_dead (dead, or cancelled when that is the reason), else
-- completed when it was running (only a lease holder deletes a running row),
-- else cancelled (an operator deleted a ready job). A job that is no longer
-- its task's current job (a retried task) changes nothing.
CREATE FUNCTION {{schema}}.job_left()
RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_reason text;
    v_error text;
    v_state text;
    v_workflow bigint;
BEGIN
    DELETE FROM {{schema}}.job_steps WHERE job_id = OLD.id;
    DELETE FROM {{schema}}.signals WHERE job_id = OLD.id;
    IF OLD.task_id = 0 THEN
        RETURN NULL;
    END IF;
    SELECT d.reason, d.last_error INTO v_reason, v_error FROM {{schema}}.jobs_dead AS d WHERE d.id = OLD.id;
    IF FOUND THEN
        v_state := CASE WHEN v_reason = 'cancelled' THEN 'cancelled' ELSE 'dead' END;
    ELSIF OLD.state = 'running' THEN
        v_state := 'completed';
    ELSE
        v_state := 'cancelled';
        v_error := 'its job was deleted';
    END IF;
    UPDATE {{schema}}.workflow_tasks AS t
    SET state = v_state, finished_at = now(), error = CASE WHEN v_state = 'completed' THEN NULL ELSE left(v_error, 2048) END
    WHERE t.id = OLD.task_id AND t.job_id = OLD.id AND t.state = 'enqueued'
    RETURNING t.workflow_id INTO v_workflow;
    IF FOUND THEN
        PERFORM {{schema}}.task_settled(OLD.task_id, v_workflow, v_state);
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
LANGUAGE plpgsql AS $$
DECLARE
    w {{schema}}.workflows%ROWTYPE;
    x jsonb;
    v_i integer := 0;
    v_task bigint;
    v_dep text;
    p record;
    v_waiting integer;
    v_failed integer;
    v_added bigint[] := '{}';
    v_payload jsonb;
    v_priority integer;
    v_max integer;
    v_meta jsonb;
    v_total integer := 0;
    v_open integer := 0;
    v_cancelled integer := 0;
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
    FOR x IN SELECT e FROM jsonb_array_elements(p_tasks) AS e LOOP
        v_i := v_i + 1;
        PERFORM {{schema}}.validate_step_name('tasks[' || v_i || '].name', x->>'name');
        v_payload := coalesce(x->'payload', '{}');
        v_priority := coalesce((x->>'priority')::integer, 0);
        v_max := (x->>'max_attempts')::integer;
        v_meta := nullif(x->'metadata', 'null'::jsonb);
        -- No EXCEPTION block to prefix the task's index: it would open a
        -- subtransaction per task. The Go API names the task first.
        PERFORM {{schema}}.validate_job(x->>'queue', x->>'kind', v_payload, v_priority, now(), v_max,
            NULL, x->>'tenant', x->>'entity');
        PERFORM {{schema}}.validate_metadata(v_meta);
        IF EXISTS (SELECT 1 FROM {{schema}}.workflow_tasks AS t WHERE t.workflow_id = p_workflow AND t.name = x->>'name') THEN
            IF x->>'name' = ANY (SELECT t.name FROM {{schema}}.workflow_tasks AS t WHERE t.id = ANY (v_added)) THEN
                RAISE EXCEPTION 'skiplock: tasks[%].name: % is named twice', v_i, x->>'name' USING ERRCODE = '22023';
            END IF;
            CONTINUE;
        END IF;
        INSERT INTO {{schema}}.workflow_tasks AS t (workflow_id, name, queue, kind, payload, priority, max_attempts,
                                                   tenant, entity, metadata, is_callback)
        VALUES (p_workflow, x->>'name', x->>'queue', x->>'kind', v_payload, v_priority, v_max,
                x->>'tenant', x->>'entity', v_meta, coalesce((x->>'callback')::boolean, false))
        RETURNING t.id INTO v_task;
        v_waiting := 0;
        v_failed := 0;
        FOR v_dep IN SELECT jsonb_array_elements_text(coalesce(x->'depends_on', '[]')) LOOP
            SELECT t.id, t.state INTO p FROM {{schema}}.workflow_tasks AS t
            WHERE t.workflow_id = p_workflow AND t.name = v_dep AND t.id <> v_task;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'skiplock: tasks[%].depends_on: % names no earlier task of the workflow', v_i, v_dep
                    USING ERRCODE = '22023';
            END IF;
            INSERT INTO {{schema}}.workflow_deps (parent_id, task_id) VALUES (p.id, v_task) ON CONFLICT DO NOTHING;
            IF NOT FOUND THEN
                CONTINUE;
            END IF;
            IF p.state IN ('pending', 'enqueued') THEN
                v_waiting := v_waiting + 1;
            ELSIF p.state <> 'completed' THEN
                v_failed := v_failed + 1;
            END IF;
        END LOOP;
        v_added := v_added || v_task;
        v_total := v_total + 1;
        IF v_failed > 0 AND w.on_failure = 'cancel' THEN
            UPDATE {{schema}}.workflow_tasks SET state = 'cancelled', finished_at = now(),
                error = 'a task it depends on failed' WHERE id = v_task;
            v_cancelled := v_cancelled + 1;
            CONTINUE;
        END IF;
        v_open := v_open + 1;
        IF v_waiting > 0 OR v_failed > 0 THEN
            UPDATE {{schema}}.workflow_tasks SET waiting = v_waiting, parents_failed = v_failed WHERE id = v_task;
        END IF;
        IF v_waiting = 0 THEN
            PERFORM {{schema}}.enqueue_task(v_task);
        END IF;
    END LOOP;
    -- One update of the workflow's row for the whole call (a batch adds
    -- thousands of tasks).
    UPDATE {{schema}}.workflows
    SET tasks_total = tasks_total + v_total, tasks_open = tasks_open + v_open,
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

-- Sends a signal, from any language, psql or a trigger:
--   SELECT skiplock.signal(name => 'payment_received', workflow_id => 42, payload => '{"amount": 1200}');
-- Exactly one of workflow_id and job_id names the target: a running
-- workflow (any of its tasks that waits for the name receives it) or a job
-- in flight. The signal is kept until a wait consumes it, so one sent before
-- the wait begins is never lost. The target's jobs are locked and, if they
-- sleep in a wait, made due now: WaitSignal locks its own job before it looks
-- for a signal and goes to sleep in that same transaction, so a signal is
-- either seen by the wait or wakes the job it sent to sleep (docs/workflows.md).
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
    FOR q IN
        UPDATE {{schema}}.jobs AS j
        SET run_at = CASE WHEN j.state = 'ready' AND j.run_at > now() THEN now() ELSE j.run_at END
        WHERE j.id IN (SELECT signal.job_id WHERE signal.job_id IS NOT NULL
                       UNION ALL
                       SELECT t.job_id FROM {{schema}}.workflow_tasks AS t
                       WHERE t.workflow_id = signal.workflow_id AND t.state = 'enqueued')
        RETURNING j.queue, j.state
    LOOP
        IF q.state = 'ready' THEN
            PERFORM pg_notify({{schema_lit}} || '.jobs', q.queue);
        END IF;
    END LOOP;
    RETURN v_id;
END
$$;
