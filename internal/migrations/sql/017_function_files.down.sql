-- Back to version 16: no ring_size() or ring_evict(); ring_gen and
-- rotate_ring as migration 016 wrote them, cancel_workflow as 007 did.
-- Version 17 is the function files of the binary released at 17 (the
-- down files of 018 and later restore them); these are the bodies 017's
-- files changed.

DROP FUNCTION {{schema}}.ring_evict(smallint);

CREATE OR REPLACE FUNCTION {{schema}}.ring_gen() RETURNS smallint
LANGUAGE sql VOLATILE AS $$
    SELECT (floor(extract(epoch FROM clock_timestamp()) / {{schema}}.ring_period())::bigint % 3)::smallint
$$;

DROP FUNCTION {{schema}}.ring_size();

CREATE OR REPLACE FUNCTION {{schema}}.rotate_ring(p_lock_timeout_ms integer, OUT moved bigint, OUT truncated smallint)
LANGUAGE plpgsql AS $$
DECLARE
    v_slot bigint := floor(extract(epoch FROM clock_timestamp()) / {{schema}}.ring_period())::bigint;
    v_old smallint := ((v_slot + 1) % 3)::smallint;
    v_part text := format('%I.%I', {{schema_lit}}, 'jobs_g' || v_old);
    v_left boolean;
BEGIN
    moved := 0;
    IF NOT pg_try_advisory_xact_lock(hashtext({{schema_lit}} || '.rotate_ring')) THEN
        RETURN;
    END IF;
    IF pg_relation_size(v_part::regclass) = 0 THEN
        RETURN; -- emptied already this period
    END IF;
    -- Stragglers move only while something holds the horizon back (a
    -- transaction or snapshot older than a period, a prepared transaction,
    -- a replication slot's xmin): otherwise vacuum keeps the generation as it
    -- kept the table, and moving a backlog would only cost (a 100,000-job
    -- bulk load drained in 12 s moved half of it: 1,246-1,338 bytes of WAL
    -- per job against 1,134, and 88-92 % of the ideal rate against 95-96 %).
    -- A role that cannot see other sessions' xmin (pg_read_all_stats) sees
    -- no pin, and the table grows under one as it did before 016.
    IF NOT EXISTS (SELECT 1 FROM pg_stat_activity AS a
                   WHERE a.pid <> pg_backend_pid() AND a.backend_type <> 'autovacuum worker'
                     AND (a.backend_xid IS NOT NULL OR a.backend_xmin IS NOT NULL)
                     AND a.xact_start < clock_timestamp() - {{schema}}.ring_period() * interval '1 second')
       AND NOT EXISTS (SELECT 1 FROM pg_prepared_xacts AS p
                       WHERE p.prepared < clock_timestamp() - {{schema}}.ring_period() * interval '1 second')
       AND NOT EXISTS (SELECT 1 FROM pg_replication_slots AS s WHERE s.xmin IS NOT NULL) THEN
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s)', v_part) INTO v_left;
        IF v_left THEN
            RETURN; -- no pin: vacuum keeps what is left; truncate once it is empty
        END IF;
    END IF;
    EXECUTE format($q$
        WITH m AS (DELETE FROM %s AS j WHERE j.state = 'ready' RETURNING j.*)
        INSERT INTO %I.jobs (id, priority, attempts, max_attempts, run_at, created_at, lease_token, lease_expires_at,
                             attempted_at, cancel_requested, state, queue, kind, locked_by, unique_key, tenant, entity,
                             last_error, payload, metadata, task_id, limit_weight, gen)
        SELECT m.id, m.priority, m.attempts, m.max_attempts, m.run_at, m.created_at, m.lease_token, m.lease_expires_at,
               m.attempted_at, m.cancel_requested, m.state, m.queue, m.kind, m.locked_by, m.unique_key, m.tenant, m.entity,
               m.last_error, m.payload, m.metadata, m.task_id, m.limit_weight,
               -1
        FROM m$q$, v_part, {{schema_lit}});
    GET DIAGNOSTICS moved = ROW_COUNT;
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s)', v_part) INTO v_left;
    IF v_left THEN
        RETURN; -- a running job (or a row being moved by someone else)
    END IF;
    PERFORM set_config('lock_timeout', p_lock_timeout_ms || 'ms', true);
    BEGIN
        EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', v_part);
    EXCEPTION WHEN lock_not_available THEN
        RETURN;
    END;
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s)', v_part) INTO v_left;
    IF NOT v_left THEN
        EXECUTE format('TRUNCATE %s', v_part);
        truncated := v_old;
    END IF;
END
$$;

-- cancel_workflow as migration 007 wrote it (without limit_weight).
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
