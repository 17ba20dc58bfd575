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
CREATE OR REPLACE FUNCTION {{schema}}.signal(name text, workflow_id bigint DEFAULT NULL, job_id bigint DEFAULT NULL,
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

-- Issue 38 §2 (docs/security.md "Roles"): runs as the schema's owner, so
-- a producer role (grant_role) enqueues and signals without any privilege on
-- the tables; the search_path is pinned so that nothing a
-- caller creates can stand in for what the body names. Only the owner and
-- the roles grant_role gives it to may call it.
ALTER FUNCTION {{schema}}.signal SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
REVOKE EXECUTE ON FUNCTION {{schema}}.signal FROM PUBLIC;
