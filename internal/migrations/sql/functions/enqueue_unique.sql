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
                SET payload = p_payload, sealed = NULL, priority = p_priority, metadata = coalesce(p_metadata, j.metadata),
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
                                                  metadata, limit_weight, sealed)
                SELECT r.id, r.priority, r.attempts, r.max_attempts, r.run_at, r.created_at, r.queue, r.kind,
                       'cancelled', r.locked_by, r.unique_key, r.tenant, r.entity, 'superseded', r.payload,
                       r.metadata, r.limit_weight, r.sealed
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
