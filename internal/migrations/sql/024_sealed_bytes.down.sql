-- Back to version 23: every sealed payload whole again in payload (as
-- envelope() rebuilds it), no sealed columns, no envelope(), and the bodies
-- version 24 changed as version 23 had them: enqueue_job (the body
-- version 24 moved to enqueue_one, which goes), enqueue_unique,
-- cancel_workflow, retry_job and grant_role.
UPDATE {{schema}}.jobs SET payload = {{schema}}.envelope(payload, sealed), sealed = NULL WHERE sealed IS NOT NULL;
UPDATE {{schema}}.jobs_done SET payload = {{schema}}.envelope(payload, sealed), sealed = NULL WHERE sealed IS NOT NULL;
UPDATE {{schema}}.jobs_dead SET payload = {{schema}}.envelope(payload, sealed), sealed = NULL WHERE sealed IS NOT NULL;
ALTER TABLE {{schema}}.jobs DROP COLUMN sealed;
ALTER TABLE {{schema}}.jobs_done DROP COLUMN sealed;
ALTER TABLE {{schema}}.jobs_dead DROP COLUMN sealed;
DROP FUNCTION {{schema}}.envelope(jsonb, bytea);
DROP FUNCTION {{schema}}.enqueue_one(text, text, jsonb, integer, timestamptz, integer, text, text, text, boolean,
    jsonb, integer, text, text[], interval, text, interval, bytea);

-- functions/enqueue_job.sql of version 23.
-- Enqueues one job, after validating it as the Go API does (validate_job,
-- validate_metadata, validate_limit_weight), and wakes its queue when it is
-- due. A plain job goes to the ring's current generation (ring_gen(),
-- docs/generations.md); a unique one to jobs_keyed directly (its unique index
-- is the ON CONFLICT arbiter, and only a partition carries it): the job in
-- flight with that key is returned instead (inserted false), its run_at
-- brought forward when p_bump; an entity one to jobs_keyed by gen. Called by
-- enqueue (the SQL API) and internal/store/sql/enqueue.sql.
-- Uniqueness by args or by period, and the modes supersede, debounce and
-- throttle (p_unique_by .. p_mode_window, migration 019) are decided by
-- enqueue_unique, which a job asking for any of them is handed to.
DROP FUNCTION IF EXISTS {{schema}}.enqueue_job(text, text, jsonb, integer, timestamptz, integer, text, text, text,
    boolean, jsonb, integer);
CREATE OR REPLACE FUNCTION {{schema}}.enqueue_job(
    p_queue text, p_kind text, p_payload jsonb, p_priority integer,
    p_run_at timestamptz, p_max_attempts integer, p_unique_key text,
    p_tenant text, p_entity text, p_bump boolean, p_metadata jsonb DEFAULT NULL,
    p_limit_weight integer DEFAULT NULL,
    p_unique_by text DEFAULT NULL, p_unique_fields text[] DEFAULT NULL, p_unique_period interval DEFAULT NULL,
    p_mode text DEFAULT NULL, p_mode_window interval DEFAULT NULL,
    OUT id bigint, OUT inserted boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_run_at timestamptz := coalesce(p_run_at, now());
    v_payload jsonb := coalesce(p_payload, '{}'::jsonb);
    v_priority integer := coalesce(p_priority, 0);
    -- Weight 1 is stored as NULL (the default).
    v_weight integer := nullif(p_limit_weight, 1);
BEGIN
    PERFORM {{schema}}.validate_job(p_queue, p_kind, v_payload, v_priority, v_run_at,
        p_max_attempts, p_unique_key, p_tenant, p_entity);
    PERFORM {{schema}}.validate_metadata(p_metadata);
    PERFORM {{schema}}.validate_limit_weight(p_limit_weight);

    -- Migration 019: uniqueness by args or period, and the enqueue modes.
    IF p_unique_by IS NOT NULL OR p_unique_fields IS NOT NULL OR p_unique_period IS NOT NULL
       OR p_mode IS NOT NULL OR p_mode_window IS NOT NULL THEN
        SELECT u.id, u.inserted INTO id, inserted
        FROM {{schema}}.enqueue_unique(p_queue, p_kind, v_payload, v_priority, v_run_at, coalesce(p_max_attempts, 20),
                                       p_unique_key, p_tenant, p_entity, coalesce(p_bump, false), p_metadata, v_weight,
                                       p_unique_by, p_unique_fields, p_unique_period, p_mode, p_mode_window) AS u;
        RETURN;
    END IF;

    IF p_unique_key IS NULL THEN
        INSERT INTO {{schema}}.jobs AS j (queue, kind, payload, priority, run_at, max_attempts, tenant, entity, metadata,
                                          limit_weight, gen)
        VALUES (p_queue, p_kind, v_payload, v_priority, v_run_at, coalesce(p_max_attempts, 20), p_tenant, p_entity, p_metadata,
                v_weight, CASE WHEN p_entity IS NULL THEN {{schema}}.ring_gen() ELSE -1 END)
        RETURNING j.id INTO id;
        inserted := true;
    ELSE
        -- Loop only if the conflicting job finishes between our INSERT and SELECT.
        FOR i IN 1..10 LOOP
            INSERT INTO {{schema}}.jobs_keyed AS j (queue, kind, payload, priority, run_at, max_attempts, unique_key, tenant, entity,
                                                    metadata, limit_weight)
            VALUES (p_queue, p_kind, v_payload, v_priority, v_run_at, coalesce(p_max_attempts, 20), p_unique_key, p_tenant, p_entity,
                    p_metadata, v_weight)
            ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
            RETURNING j.id INTO id;
            IF id IS NOT NULL THEN
                inserted := true;
                EXIT;
            END IF;
            inserted := false;
            IF p_bump THEN
                UPDATE {{schema}}.jobs_keyed AS j SET run_at = GREATEST(j.run_at, v_run_at)
                WHERE j.queue = p_queue AND j.unique_key = p_unique_key
                RETURNING j.id INTO id;
            ELSE
                SELECT j.id INTO id FROM {{schema}}.jobs_keyed AS j
                WHERE j.queue = p_queue AND j.unique_key = p_unique_key;
            END IF;
            EXIT WHEN id IS NOT NULL;
        END LOOP;
        IF id IS NULL THEN
            RAISE EXCEPTION 'skiplock: unique_key: the in-flight job kept changing; retry'
                USING ERRCODE = '40001';
        END IF;
    END IF;

    IF inserted AND v_run_at <= now() THEN
        PERFORM pg_notify({{schema_lit}} || '.jobs', p_queue);
    END IF;
END
$$;

-- Issue 38 §2 (docs/security.md "Roles"): runs as the schema's owner, so
-- a producer role (grant_role) enqueues and signals without any privilege on
-- the tables; the search_path is pinned so that nothing a
-- caller creates can stand in for what the body names. Only the owner and
-- the roles grant_role gives it to may call it.
ALTER FUNCTION {{schema}}.enqueue_job SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
REVOKE EXECUTE ON FUNCTION {{schema}}.enqueue_job FROM PUBLIC;

-- functions/enqueue_unique.sql of version 23.
-- Uniqueness beyond a caller's key, and the enqueue modes (migration 019,
-- docs/api.md "Uniqueness and enqueue modes"). enqueue_job hands a job over
-- here when it asks for any of them; this is the one place they are decided,
-- for the Go API, the CLI and plain SQL alike. The job is valid already
-- (enqueue_job ran validate_job); its options are checked here.
--
-- The key: p_unique_key (unique_by 'key', the default), or, with unique_by
-- 'args', 'args:' || md5 of the kind and the payload (or only its top-level
-- fields p_unique_fields; jsonb's text is canonical, so the order of keys
-- does not matter).
--
-- Holding a key: the job in flight with it (jobs_unique_inflight, as for every
-- unique job), and, with a period or a throttle, the row of unique_keys that
-- holds it until held_until, whatever became of its job:
--   unique_period: the key is held until the end of the period bucket the
--     enqueue falls in (buckets aligned on the Unix epoch: "at most one an
--     hour" means one per clock hour), finished or not;
--   throttle: a new run starts no earlier than the window after the last
--     one's run time; enqueues while the run waits fold into it.
-- Modes, when the key's job is in flight:
--   supersede: a waiting job takes the new payload (and priority, metadata,
--     run_at); a running one is cancelled: moved to jobs_dead ('cancelled',
--     "superseded by job N"), its worker told on the cancel channel, and its
--     lease gone with its row, so every late write of the old run is refused
--     by the fence; the new job is inserted in the same transaction.
--   debounce: a waiting job takes the new payload and runs p_mode_window
--     after this enqueue; a running one keeps running without the key, and
--     a new job is inserted to run p_mode_window from now.
--   throttle: a waiting job takes the new payload and keeps its run time; a
--     running one keeps running without the key, and a new job runs a window
--     after the running one's start at the earliest.
-- Racing enqueues are serialized by the key's row lock (the holder's, taken
-- FOR UPDATE), by jobs_unique_inflight (the insert's arbiter) and by the
-- unique_keys primary key: 32 concurrent enqueues of one key leave one job.
CREATE OR REPLACE FUNCTION {{schema}}.enqueue_unique(
    p_queue text, p_kind text, p_payload jsonb, p_priority integer, p_run_at timestamptz,
    p_max_attempts integer, p_unique_key text, p_tenant text, p_entity text, p_bump boolean,
    p_metadata jsonb, p_limit_weight integer, p_unique_by text, p_unique_fields text[],
    p_unique_period interval, p_mode text, p_mode_window interval,
    OUT id bigint, OUT inserted boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_by text := coalesce(p_unique_by, 'key');
    v_key text := p_unique_key;
    v_run_at timestamptz := p_run_at;
    v_held timestamptz;
    v_took boolean;
    v_holder record;
BEGIN
    IF v_by NOT IN ('key', 'args') THEN
        RAISE EXCEPTION 'skiplock: unique_by: must be key or args' USING ERRCODE = '22023';
    END IF;
    IF v_by = 'key' AND v_key IS NULL THEN
        RAISE EXCEPTION 'skiplock: unique_key: must be set (or unique_by args) for a unique period or an enqueue mode'
            USING ERRCODE = '22023';
    END IF;
    IF v_by = 'args' AND v_key IS NOT NULL THEN
        RAISE EXCEPTION 'skiplock: unique_key: must be empty with unique_by args' USING ERRCODE = '22023';
    END IF;
    IF p_unique_fields IS NOT NULL AND v_by <> 'args' THEN
        RAISE EXCEPTION 'skiplock: unique_fields: needs unique_by args' USING ERRCODE = '22023';
    END IF;
    IF p_unique_period IS NOT NULL AND (p_unique_period < interval '1 second' OR p_unique_period > interval '366 days') THEN
        RAISE EXCEPTION 'skiplock: unique_period: must be between 1s and 366 days' USING ERRCODE = '22023';
    END IF;
    IF p_mode IS NOT NULL AND p_mode NOT IN ('supersede', 'debounce', 'throttle') THEN
        RAISE EXCEPTION 'skiplock: mode: must be supersede, debounce or throttle' USING ERRCODE = '22023';
    END IF;
    IF p_mode IN ('debounce', 'throttle')
       AND (p_mode_window IS NULL OR p_mode_window < interval '1 millisecond' OR p_mode_window > interval '366 days') THEN
        RAISE EXCEPTION 'skiplock: %: the window must be between 1ms and 366 days', p_mode USING ERRCODE = '22023';
    END IF;
    IF (p_mode IS NULL OR p_mode = 'supersede') AND p_mode_window IS NOT NULL THEN
        RAISE EXCEPTION 'skiplock: mode_window: only debounce and throttle take a window' USING ERRCODE = '22023';
    END IF;
    IF p_mode IS NOT NULL AND (p_unique_period IS NOT NULL OR p_bump) THEN
        RAISE EXCEPTION 'skiplock: %: cannot be combined with unique_period or bump', p_mode USING ERRCODE = '22023';
    END IF;

    IF v_by = 'args' THEN
        v_key := 'args:' || md5(p_kind || ':' || CASE WHEN p_unique_fields IS NULL THEN p_payload::text
            ELSE coalesce((SELECT jsonb_object_agg(f, p_payload -> f) FROM unnest(p_unique_fields) AS f
                           WHERE p_payload ? f), '{}'::jsonb)::text END);
    END IF;

    -- A period: take the key's hold for this bucket, or return its job.
    IF p_unique_period IS NOT NULL THEN
        -- Held by a committed job: answered by a read, no row lock (a lock
        -- writes WAL, and its commit waits for the flush).
        SELECT u.job_id INTO id FROM {{schema}}.unique_keys AS u
        WHERE u.queue = p_queue AND u.unique_key = v_key AND u.held_until > now() AND u.job_id IS NOT NULL;
        IF id IS NOT NULL THEN
            inserted := false;
            RETURN;
        END IF;
        v_held := to_timestamp((floor(extract(epoch FROM now()) / extract(epoch FROM p_unique_period)) + 1)
                               * extract(epoch FROM p_unique_period));
        INSERT INTO {{schema}}.unique_keys AS u (queue, unique_key, held_until)
        VALUES (p_queue, v_key, v_held)
        ON CONFLICT (queue, unique_key) DO UPDATE SET held_until = excluded.held_until, job_id = NULL
            WHERE u.held_until <= now()
        RETURNING true INTO v_took;
        IF v_took IS NULL THEN
            -- Held: by a job enqueued in this bucket (committed, since the
            -- hold's row lock waited for its transaction).
            SELECT u.job_id INTO id FROM {{schema}}.unique_keys AS u
            WHERE u.queue = p_queue AND u.unique_key = v_key;
            inserted := false;
            RETURN;
        END IF;
    END IF;

    IF p_mode IS NULL THEN
        -- Uniqueness without a mode: as enqueue_job's, with the derived key.
        FOR i IN 1..10 LOOP
            INSERT INTO {{schema}}.jobs_keyed AS j (queue, kind, payload, priority, run_at, max_attempts, unique_key,
                                                    tenant, entity, metadata, limit_weight)
            VALUES (p_queue, p_kind, p_payload, p_priority, v_run_at, p_max_attempts, v_key, p_tenant, p_entity,
                    p_metadata, p_limit_weight)
            ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
            RETURNING j.id INTO id;
            IF id IS NOT NULL THEN
                inserted := true;
                EXIT;
            END IF;
            inserted := false;
            IF p_bump THEN
                UPDATE {{schema}}.jobs_keyed AS j SET run_at = greatest(j.run_at, v_run_at)
                WHERE j.queue = p_queue AND j.unique_key = v_key
                RETURNING j.id INTO id;
            ELSE
                SELECT j.id INTO id FROM {{schema}}.jobs_keyed AS j WHERE j.queue = p_queue AND j.unique_key = v_key;
            END IF;
            EXIT WHEN id IS NOT NULL;
        END LOOP;
    ELSE
        IF p_mode = 'debounce' THEN
            v_run_at := greatest(v_run_at, now() + p_mode_window);
        END IF;
        FOR i IN 1..10 LOOP
            SELECT j.id, j.state, j.attempted_at INTO v_holder FROM {{schema}}.jobs_keyed AS j
            WHERE j.queue = p_queue AND j.unique_key = v_key
            FOR UPDATE;
            IF FOUND AND v_holder.state = 'ready' THEN
                -- A waiting job takes the newest payload.
                UPDATE {{schema}}.jobs_keyed AS j
                SET payload = p_payload, priority = p_priority, metadata = coalesce(p_metadata, j.metadata),
                    run_at = CASE p_mode WHEN 'throttle' THEN j.run_at ELSE v_run_at END
                WHERE j.id = v_holder.id;
                id := v_holder.id;
                inserted := false;
                EXIT;
            ELSIF FOUND AND p_mode = 'supersede' THEN
                -- The running job is cancelled; its row, and so its lease, goes.
                WITH r AS (
                    DELETE FROM {{schema}}.jobs_keyed AS j WHERE j.id = v_holder.id RETURNING j.*
                )
                INSERT INTO {{schema}}.jobs_dead (id, priority, attempts, max_attempts, run_at, created_at, queue, kind,
                                                  reason, locked_by, unique_key, tenant, entity, last_error, payload,
                                                  metadata, limit_weight)
                SELECT r.id, r.priority, r.attempts, r.max_attempts, r.run_at, r.created_at, r.queue, r.kind,
                       'cancelled', r.locked_by, r.unique_key, r.tenant, r.entity, 'superseded', r.payload,
                       r.metadata, r.limit_weight
                FROM r;
                PERFORM pg_notify({{schema_lit}} || '.cancel', v_holder.id::text);
            ELSIF FOUND THEN
                -- Debounce or throttle: the running job keeps running, without the key.
                UPDATE {{schema}}.jobs_keyed AS j SET unique_key = NULL WHERE j.id = v_holder.id;
                IF p_mode = 'throttle' THEN
                    v_run_at := greatest(v_run_at, v_holder.attempted_at + p_mode_window);
                END IF;
            END IF;
            IF p_mode = 'throttle' THEN
                SELECT u.held_until INTO v_held FROM {{schema}}.unique_keys AS u
                WHERE u.queue = p_queue AND u.unique_key = v_key;
                v_run_at := greatest(v_run_at, v_held);
            END IF;
            INSERT INTO {{schema}}.jobs_keyed AS j (queue, kind, payload, priority, run_at, max_attempts, unique_key,
                                                    tenant, entity, metadata, limit_weight)
            VALUES (p_queue, p_kind, p_payload, p_priority, v_run_at, p_max_attempts, v_key, p_tenant, p_entity,
                    p_metadata, p_limit_weight)
            ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
            RETURNING j.id INTO id;
            IF id IS NOT NULL THEN
                inserted := true;
                EXIT;
            END IF;
            -- Another enqueue inserted the key meanwhile: look again.
        END LOOP;
    END IF;
    IF id IS NULL THEN
        RAISE EXCEPTION 'skiplock: unique_key: the in-flight job kept changing; retry' USING ERRCODE = '40001';
    END IF;

    IF p_unique_period IS NOT NULL THEN
        UPDATE {{schema}}.unique_keys AS u SET job_id = id WHERE u.queue = p_queue AND u.unique_key = v_key;
    ELSIF p_mode = 'throttle' AND inserted THEN
        INSERT INTO {{schema}}.unique_keys AS u (queue, unique_key, held_until, job_id)
        VALUES (p_queue, v_key, v_run_at + p_mode_window, id)
        ON CONFLICT (queue, unique_key) DO UPDATE SET held_until = excluded.held_until, job_id = excluded.job_id;
    END IF;
    IF inserted AND v_run_at <= now() THEN
        PERFORM pg_notify({{schema_lit}} || '.jobs', p_queue);
    END IF;
END
$$;

-- functions/cancel_workflow.sql of version 23.
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
                                          limit_weight)
        SELECT x.id, x.priority, x.attempts, x.max_attempts, x.run_at, x.created_at, x.queue, x.kind,
               'cancelled', x.locked_by, x.unique_key, x.tenant, x.entity, 'workflow cancelled', x.payload, x.metadata,
               x.limit_weight
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

-- functions/retry_job.sql of version 23.
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
                                                metadata, limit_weight)
        VALUES (d.queue, d.kind, d.payload, d.priority, now(), d.max_attempts, d.unique_key, d.tenant, d.entity, d.metadata,
                d.limit_weight)
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
    SELECT x.queue, x.kind, x.payload, x.priority, x.max_attempts, x.tenant, x.entity, x.metadata, x.limit_weight INTO f
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
        INSERT INTO {{schema}}.jobs AS j (queue, kind, payload, priority, run_at, max_attempts, tenant, entity, metadata, limit_weight)
        VALUES (f.queue, f.kind, f.payload, f.priority, now(), coalesce(f.max_attempts, 20), f.tenant, f.entity, f.metadata,
                f.limit_weight)
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

-- functions/grant_role.sql of version 23.
-- Gives a role what one component of skiplock needs and no more (issue 38
-- §2, docs/security.md "Roles"). `skiplock roles grant KIND ROLE` runs it:
--   SELECT * FROM skiplock.grant_role(kind => 'producer', grantee => 'checkout');
-- Every kind gets USAGE on the schema and SELECT on settings (the limits).
--   producer: EXECUTE on enqueue, enqueue_job and signal, which run as the
--             owner (SECURITY DEFINER) and validate everything; no privilege
--             on any table, so no write past validation.
--   worker:   SELECT, INSERT, UPDATE, DELETE on the tables, the sequences,
--             EXECUTE on every function (the maintenance that needs the
--             owner runs through SECURITY DEFINER functions); never settings,
--             schema_migrations or schema_functions.
--   reader:   SELECT on every table and view but the payload and output
--             columns (job arguments, step and task outputs): the
--             dashboard's read-only mode and stats. GRANT SELECT (payload)
--             ON skiplock.jobs TO it to let it see them.
--   admin:    the worker's privileges and TRUNCATE: every CLI and dashboard
--             action; still not settings (only the owner changes limits),
--             no DDL.
-- Run it as the schema's owner, and again after an upgrade that adds a
-- table. Returns the statements it ran, in order.
CREATE OR REPLACE FUNCTION {{schema}}.grant_role(kind text, grantee name)
RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
    s constant text := {{schema_lit}};
    stmts text[] := ARRAY[format('GRANT USAGE ON SCHEMA %I TO %I', s, grantee),
                          format('GRANT SELECT ON %I.settings TO %I', s, grantee)];
    r record;
    stmt text;
BEGIN
    IF grantee IS NULL OR NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles AS o WHERE o.rolname = grantee) THEN
        RAISE EXCEPTION 'skiplock: grantee: no role %', grantee USING ERRCODE = '22023';
    END IF;
    CASE kind
    WHEN 'producer' THEN
        stmts := stmts || format('GRANT EXECUTE ON FUNCTION %1$I.enqueue, %1$I.enqueue_job, %1$I.signal TO %2$I', s, grantee);
    WHEN 'worker', 'admin' THEN
        stmts := stmts
            || format('GRANT SELECT, INSERT, UPDATE, DELETE%s ON ALL TABLES IN SCHEMA %I TO %I',
                      CASE WHEN kind = 'admin' THEN ', TRUNCATE' ELSE '' END, s, grantee)
            || format('REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON %1$I.settings, %1$I.schema_migrations, %1$I.schema_functions FROM %2$I',
                      s, grantee)
            || format('GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA %I TO %I', s, grantee)
            || format('GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA %I TO %I', s, grantee);
    WHEN 'reader' THEN
        FOR r IN
            SELECT c.relname,
                   bool_or(a.attname IN ('payload', 'output')) AS hides,
                   string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum)
                       FILTER (WHERE a.attname NOT IN ('payload', 'output')) AS cols
            FROM pg_catalog.pg_class AS c
            JOIN pg_catalog.pg_attribute AS a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
            WHERE c.relnamespace = s::regnamespace AND c.relkind IN ('r', 'p', 'v')
            GROUP BY c.relname
            ORDER BY c.relname
        LOOP
            stmts := stmts || CASE WHEN r.hides
                                   THEN format('GRANT SELECT (%s) ON %I.%I TO %I', r.cols, s, r.relname, grantee)
                                   ELSE format('GRANT SELECT ON %I.%I TO %I', s, r.relname, grantee) END;
        END LOOP;
    ELSE
        RAISE EXCEPTION 'skiplock: kind: must be producer, worker, reader or admin, got %', kind USING ERRCODE = '22023';
    END CASE;
    FOREACH stmt IN ARRAY stmts LOOP
        EXECUTE stmt;
        RETURN NEXT stmt;
    END LOOP;
END
$$;

