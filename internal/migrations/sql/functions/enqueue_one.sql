-- Enqueues one job (version 24: enqueue_job's body, with p_sealed), after validating it as the Go API does (validate_job,
-- validate_metadata, validate_limit_weight), and wakes its queue when it is
-- due (unless the transaction hands it off: skiplock.handoff). A plain job
-- goes to the ring's current generation (ring_gen(), docs/generations.md); a unique one to jobs_keyed directly (its unique index
-- is the ON CONFLICT arbiter, and only a partition carries it): the job in
-- flight with that key is returned instead (inserted false), its run_at
-- brought forward when p_bump; an entity one to jobs_keyed by gen. Called by
-- enqueue_job (what enqueue, the SQL API, calls) and
-- internal/store/sql/enqueue.sql.
-- Uniqueness by args or by period, and the modes supersede, debounce and
-- throttle (p_unique_by .. p_mode_window, migration 019) are decided by
-- enqueue_unique, which a job asking for any of them is handed to.
-- A sealed payload (an envelope, docs/security.md) is stored split
-- (migration 24): its key id in payload, its ciphertext's bytes in sealed;
-- envelope() rebuilds it. Go passes it split (p_sealed, with payload
-- {"skiplock_encrypted": "v1.KEYID"}); a whole envelope a SQL producer
-- passes is split here. enqueue_unique stores its jobs' envelopes whole.
CREATE OR REPLACE FUNCTION {{schema}}.enqueue_one(
    p_queue text, p_kind text, p_payload jsonb, p_priority integer,
    p_run_at timestamptz, p_max_attempts integer, p_unique_key text,
    p_tenant text, p_entity text, p_bump boolean, p_metadata jsonb DEFAULT NULL,
    p_limit_weight integer DEFAULT NULL,
    p_unique_by text DEFAULT NULL, p_unique_fields text[] DEFAULT NULL, p_unique_period interval DEFAULT NULL,
    p_mode text DEFAULT NULL, p_mode_window interval DEFAULT NULL,
    p_sealed bytea DEFAULT NULL,
    OUT id bigint, OUT inserted boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_run_at timestamptz := coalesce(p_run_at, now());
    v_payload jsonb := coalesce(p_payload, '{}'::jsonb);
    v_priority integer := coalesce(p_priority, 0);
    -- Weight 1 is stored as NULL (the default).
    v_weight integer := nullif(p_limit_weight, 1);
    v_sealed bytea := p_sealed;
    v_env text;
    v_data text;
    v_dot integer;
    v_size bigint;
    v_limit bigint;
BEGIN
    PERFORM {{schema}}.validate_job(p_queue, p_kind, v_payload, v_priority, v_run_at,
        p_max_attempts, p_unique_key, p_tenant, p_entity);
    PERFORM {{schema}}.validate_metadata(p_metadata);
    PERFORM {{schema}}.validate_limit_weight(p_limit_weight);
    IF v_sealed IS NOT NULL THEN
        -- Split by the caller: payload names the key, and the limit is the
        -- whole envelope's, as for a SQL producer's.
        v_env := v_payload ->> 'skiplock_encrypted';
        IF v_env IS NULL OR v_env !~ '^v1\.[A-Za-z0-9_-]{1,64}$'
           OR v_payload <> jsonb_build_object('skiplock_encrypted', v_env) THEN
            RAISE EXCEPTION 'skiplock: payload: with sealed bytes, must be {"skiplock_encrypted": "v1.KEYID"}'
                USING ERRCODE = '22023';
        END IF;
        -- The envelope's length: the key id's, a dot, the bytes' base64url.
        v_size := octet_length(v_payload::text) + 1 + (4 * octet_length(v_sealed) + 2) / 3;
        SELECT s.max_payload_bytes INTO v_limit FROM {{schema}}.settings AS s WHERE s.only_row;
        IF v_size > v_limit THEN
            RAISE EXCEPTION 'skiplock: payload: % bytes exceeds the limit of % bytes', v_size, v_limit
                USING ERRCODE = '22023';
        END IF;
    END IF;

    -- Migration 019: uniqueness by args or period, and the enqueue modes.
    IF p_unique_by IS NOT NULL OR p_unique_fields IS NOT NULL OR p_unique_period IS NOT NULL
       OR p_mode IS NOT NULL OR p_mode_window IS NOT NULL THEN
        SELECT u.id, u.inserted INTO id, inserted
        FROM {{schema}}.enqueue_unique(p_queue, p_kind, {{schema}}.envelope(v_payload, v_sealed), v_priority, v_run_at, coalesce(p_max_attempts, 20),
                                       p_unique_key, p_tenant, p_entity, coalesce(p_bump, false), p_metadata, v_weight,
                                       p_unique_by, p_unique_fields, p_unique_period, p_mode, p_mode_window) AS u;
        RETURN;
    END IF;

    -- A whole envelope, {"skiplock_encrypted": "v1.KEYID.DATA"}, is stored
    -- split; DATA that is not base64url leaves it whole.
    IF v_sealed IS NULL AND v_payload ? 'skiplock_encrypted' THEN
        v_env := v_payload ->> 'skiplock_encrypted';
        v_dot := strpos(substr(v_env, 4, 66), '.');
        IF left(v_env, 3) = 'v1.' AND v_dot > 1 AND substr(v_env, 4, v_dot - 1) ~ '^[A-Za-z0-9_-]{1,64}$'
           AND v_payload = jsonb_build_object('skiplock_encrypted', v_env) THEN
            v_data := substr(v_env, 4 + v_dot);
            IF v_data !~ '[^A-Za-z0-9_-]' THEN
                v_sealed := decode(replace(replace(v_data, '-', '+'), '_', '/') || repeat('=', (4 - length(v_data) % 4) % 4),
                                   'base64');
                v_payload := jsonb_build_object('skiplock_encrypted', left(v_env, 2 + v_dot));
            END IF;
        END IF;
    END IF;

    IF p_unique_key IS NULL THEN
        INSERT INTO {{schema}}.jobs AS j (queue, kind, payload, priority, run_at, max_attempts, tenant, entity, metadata,
                                          limit_weight, gen, sealed)
        VALUES (p_queue, p_kind, v_payload, v_priority, v_run_at, coalesce(p_max_attempts, 20), p_tenant, p_entity, p_metadata,
                v_weight, CASE WHEN p_entity IS NULL THEN {{schema}}.ring_gen() ELSE -1 END, v_sealed)
        RETURNING j.id INTO id;
        inserted := true;
    ELSE
        -- Loop only if the conflicting job finishes between our INSERT and SELECT.
        FOR i IN 1..10 LOOP
            INSERT INTO {{schema}}.jobs_keyed AS j (queue, kind, payload, priority, run_at, max_attempts, unique_key, tenant, entity,
                                                    metadata, limit_weight, sealed)
            VALUES (p_queue, p_kind, v_payload, v_priority, v_run_at, coalesce(p_max_attempts, 20), p_unique_key, p_tenant, p_entity,
                    p_metadata, v_weight, v_sealed)
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

    -- Not when the enqueue hands its job to its own process's idle pool
    -- (internal/store/sql/enqueue.sql, handoff_quiet): that pool claims it
    -- in the same transaction, and the wake-up would send every listening
    -- pool to a claim that finds nothing.
    IF inserted AND v_run_at <= now()
       AND current_setting('skiplock.handoff', true) IS DISTINCT FROM 'on' THEN
        PERFORM pg_notify({{schema_lit}} || '.jobs', p_queue);
    END IF;
END
$$;

-- Issue 38 §2 (docs/security.md "Roles"): runs as the schema's owner, so
-- a producer role (grant_role) enqueues and signals without any privilege on
-- the tables; the search_path is pinned so that nothing a
-- caller creates can stand in for what the body names. Only the owner and
-- the roles grant_role gives it to may call it.
--
-- Version 24 moved enqueue_job's body here, adding p_sealed; the roles
-- that may execute enqueue_job (grant_role's producers) may execute this,
-- so an upgrade locks no producer out. enqueue_job keeps its signature (a
-- function dropped while a session calls it fails that call once).
DO $$
DECLARE
    v_role text;
BEGIN
    FOR v_role IN
        SELECT a.grantee::regrole::text
        FROM pg_catalog.pg_proc AS p, aclexplode(p.proacl) AS a
        WHERE p.oid = to_regprocedure('{{schema}}.enqueue_job(text, text, jsonb, integer, timestamptz, integer, '
                  || 'text, text, text, boolean, jsonb, integer, text, text[], interval, text, interval)')
          AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION {{schema}}.enqueue_one TO %s', v_role);
    END LOOP;
END
$$;
ALTER FUNCTION {{schema}}.enqueue_one SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
REVOKE EXECUTE ON FUNCTION {{schema}}.enqueue_one FROM PUBLIC;
