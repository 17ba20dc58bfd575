-- skiplock core schema.
--
-- {{schema}} is replaced by the quoted schema identifier and {{schema_lit}} by
-- the schema name as a SQL string literal (used in channel names and
-- advisory-lock keys, so two installations in one database never interfere).

-- The hot table holds only jobs that are ready (possibly scheduled in the
-- future) or running. Finished jobs leave it: deleted on success (default),
-- archived into jobs_done, or moved to jobs_dead.
CREATE TABLE {{schema}}.jobs (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    priority         integer     NOT NULL DEFAULT 0,      -- larger = earlier
    attempts         integer     NOT NULL DEFAULT 0,      -- counted at claim time
    max_attempts     integer     NOT NULL DEFAULT 20,
    run_at           timestamptz NOT NULL DEFAULT now(),
    created_at       timestamptz NOT NULL DEFAULT now(),
    -- Lease bookkeeping: churns on every claim/heartbeat, deliberately in no
    -- index key so heartbeats stay HOT.
    lease_token      bigint,
    lease_expires_at timestamptz,
    attempted_at     timestamptz,
    cancel_requested boolean     NOT NULL DEFAULT false,
    state            text        NOT NULL DEFAULT 'ready',
    queue            text        NOT NULL,
    kind             text        NOT NULL,
    locked_by        text,
    unique_key       text,
    tenant           text,
    entity           text,
    last_error       text,
    payload          jsonb       NOT NULL DEFAULT '{}',
    CONSTRAINT jobs_state_check CHECK (state IN ('ready', 'running')),
    CONSTRAINT jobs_lease_check CHECK (
        (state = 'ready' AND locked_by IS NULL AND lease_token IS NULL)
        OR (state = 'running' AND locked_by IS NOT NULL AND lease_token IS NOT NULL
            AND lease_expires_at IS NOT NULL))
) WITH (
    fillfactor = 80,                       -- room on each page for HOT updates
    autovacuum_vacuum_scale_factor = 0.02, -- vacuum a high-churn table early
    autovacuum_vacuum_cost_delay = 0       -- and never throttle it
);

-- The claim path's only index: ready rows in claim order, per queue. It stays
-- proportional to the backlog, not to the table.
CREATE INDEX jobs_ready ON {{schema}}.jobs (queue, priority DESC, run_at, id)
    WHERE state = 'ready';

-- Ready rows that carry a tenant, per tenant: lets a tenant-capped claim visit
-- every tenant with work (a skip scan) instead of walking one tenant's burst.
-- Jobs without a tenant pay nothing for it.
CREATE INDEX jobs_ready_tenant ON {{schema}}.jobs (queue, tenant, priority DESC, run_at, id)
    WHERE state = 'ready' AND tenant IS NOT NULL;

-- Running rows. The key is the entity for entity-serialized jobs, which makes
-- "at most one running job per entity" a database guarantee; other jobs use
-- their id, which is unique anyway. The reaper and the long-runner views scan
-- this small index instead of the table.
CREATE UNIQUE INDEX jobs_running ON {{schema}}.jobs ((COALESCE('e:' || entity, id::text)))
    WHERE state = 'running';

-- At most one job in flight (ready or running) per queue and unique key.
-- Finished jobs are not in this table, so this is the in-flight set.
CREATE UNIQUE INDEX jobs_unique_inflight ON {{schema}}.jobs (queue, unique_key)
    WHERE unique_key IS NOT NULL;

-- Dead letters live outside the hot table.
CREATE TABLE {{schema}}.jobs_dead (
    id           bigint      PRIMARY KEY,              -- the job's original id
    priority     integer     NOT NULL,
    attempts     integer     NOT NULL,
    max_attempts integer     NOT NULL,
    run_at       timestamptz NOT NULL,
    created_at   timestamptz NOT NULL,
    dead_at      timestamptz NOT NULL DEFAULT now(),
    queue        text        NOT NULL,
    kind         text        NOT NULL,
    reason       text        NOT NULL,
    locked_by    text,
    unique_key   text,
    tenant       text,
    entity       text,
    last_error   text,
    payload      jsonb       NOT NULL,
    CONSTRAINT jobs_dead_reason_check CHECK (reason IN
        ('error', 'panic', 'timeout', 'lease_expired', 'discarded', 'cancelled', 'unknown_kind'))
);
CREATE INDEX jobs_dead_dead_at ON {{schema}}.jobs_dead (dead_at);
CREATE INDEX jobs_dead_kind ON {{schema}}.jobs_dead (kind, dead_at);

-- History of finished jobs in archive mode, range-partitioned by completion
-- time (daily). Retention drops whole partitions; nothing deletes rows here.
CREATE TABLE {{schema}}.jobs_done (
    id           bigint      NOT NULL,
    priority     integer     NOT NULL,
    attempts     integer     NOT NULL,
    run_at       timestamptz NOT NULL,
    created_at   timestamptz NOT NULL,
    attempted_at timestamptz,
    finished_at  timestamptz NOT NULL,
    queue        text        NOT NULL,
    kind         text        NOT NULL,
    locked_by    text,
    tenant       text,
    entity       text,
    payload      jsonb       NOT NULL
) PARTITION BY RANGE (finished_at);

-- Queue-level state: pause/resume. A row exists only for queues someone paused
-- or resumed; the claim checks it by primary key.
CREATE TABLE {{schema}}.queues (
    name       text        PRIMARY KEY,
    paused     boolean     NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Worker processes, one row each, refreshed with every heartbeat. Counters are
-- cumulative for the process so throughput is derived without touching jobs.
CREATE TABLE {{schema}}.workers (
    id              text        PRIMARY KEY,
    hostname        text        NOT NULL,
    pid             integer     NOT NULL,
    started_at      timestamptz NOT NULL DEFAULT now(),
    heartbeat_at    timestamptz NOT NULL DEFAULT now(),
    queues          text[]      NOT NULL DEFAULT '{}',
    concurrency     integer     NOT NULL DEFAULT 0,
    running         integer     NOT NULL DEFAULT 0,
    claimed_total   bigint      NOT NULL DEFAULT 0,
    completed_total bigint      NOT NULL DEFAULT 0,
    failed_total    bigint      NOT NULL DEFAULT 0,
    claim_p99_ms    double precision,
    stopped_at      timestamptz
) WITH (fillfactor = 50);

-- Recurring jobs. next_fire_at is advanced with compare-and-set in the same
-- transaction that enqueues the fire, so each fire time is enqueued once.
CREATE TABLE {{schema}}.schedules (
    name         text        PRIMARY KEY,
    cron         text,
    every        interval,
    timezone     text        NOT NULL DEFAULT 'UTC',
    queue        text        NOT NULL,
    kind         text        NOT NULL,
    payload      jsonb       NOT NULL DEFAULT '{}',
    priority     integer     NOT NULL DEFAULT 0,
    max_attempts integer,
    next_fire_at timestamptz,
    last_fire_at timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT schedules_spec_check CHECK ((cron IS NULL) <> (every IS NULL))
);

-- Validation shared by every SQL entry point. Raises 22023
-- (invalid_parameter_value) with a message that names the field; the Go API
-- applies the same rules before it sends anything.
CREATE FUNCTION {{schema}}.validate_job(
    p_queue text, p_kind text, p_payload jsonb, p_priority integer,
    p_run_at timestamptz, p_max_attempts integer, p_unique_key text,
    p_tenant text, p_entity text)
RETURNS void
LANGUAGE plpgsql STABLE AS $$
DECLARE
    name_re constant text := '^[A-Za-z0-9_][A-Za-z0-9_.:-]*$';
    max_payload bigint := coalesce(nullif(current_setting('skiplock.max_payload_bytes', true), '')::bigint, 1048576);
BEGIN
    IF p_queue IS NULL OR p_queue = '' THEN
        RAISE EXCEPTION 'skiplock: queue: must not be empty' USING ERRCODE = '22023';
    ELSIF octet_length(p_queue) > 128 THEN
        RAISE EXCEPTION 'skiplock: queue: longer than 128 bytes' USING ERRCODE = '22023';
    ELSIF p_queue !~ name_re THEN
        RAISE EXCEPTION 'skiplock: queue: must match %', name_re USING ERRCODE = '22023';
    END IF;
    IF p_kind IS NULL OR p_kind = '' THEN
        RAISE EXCEPTION 'skiplock: kind: must not be empty' USING ERRCODE = '22023';
    ELSIF octet_length(p_kind) > 128 THEN
        RAISE EXCEPTION 'skiplock: kind: longer than 128 bytes' USING ERRCODE = '22023';
    ELSIF p_kind !~ name_re THEN
        RAISE EXCEPTION 'skiplock: kind: must match %', name_re USING ERRCODE = '22023';
    END IF;
    IF p_payload IS NULL THEN
        RAISE EXCEPTION 'skiplock: payload: must not be null' USING ERRCODE = '22023';
    ELSIF jsonb_typeof(p_payload) <> 'object' THEN
        RAISE EXCEPTION 'skiplock: payload: must be a JSON object, got %', jsonb_typeof(p_payload) USING ERRCODE = '22023';
    ELSIF octet_length(p_payload::text) > max_payload THEN
        RAISE EXCEPTION 'skiplock: payload: % bytes exceeds the limit of % bytes', octet_length(p_payload::text), max_payload
            USING ERRCODE = '22023';
    END IF;
    IF p_priority IS NULL OR p_priority < -1000 OR p_priority > 1000 THEN
        RAISE EXCEPTION 'skiplock: priority: must be between -1000 and 1000, got %', p_priority USING ERRCODE = '22023';
    END IF;
    IF p_run_at IS NULL OR NOT isfinite(p_run_at) THEN
        RAISE EXCEPTION 'skiplock: run_at: must be a finite time' USING ERRCODE = '22023';
    ELSIF p_run_at < timestamptz '1970-01-01 00:00:00+00' THEN
        RAISE EXCEPTION 'skiplock: run_at: % is before 1970', p_run_at USING ERRCODE = '22023';
    ELSIF p_run_at > now() + interval '5 years' THEN
        RAISE EXCEPTION 'skiplock: run_at: % is more than 5 years ahead', p_run_at USING ERRCODE = '22023';
    END IF;
    IF p_max_attempts IS NOT NULL AND (p_max_attempts < 1 OR p_max_attempts > 1000) THEN
        RAISE EXCEPTION 'skiplock: max_attempts: must be between 1 and 1000, got %', p_max_attempts USING ERRCODE = '22023';
    END IF;
    IF p_unique_key IS NOT NULL AND (p_unique_key = '' OR octet_length(p_unique_key) > 512) THEN
        RAISE EXCEPTION 'skiplock: unique_key: must be 1 to 512 bytes' USING ERRCODE = '22023';
    END IF;
    IF p_tenant IS NOT NULL AND (p_tenant = '' OR octet_length(p_tenant) > 256) THEN
        RAISE EXCEPTION 'skiplock: tenant: must be 1 to 256 bytes' USING ERRCODE = '22023';
    END IF;
    IF p_entity IS NOT NULL AND (p_entity = '' OR octet_length(p_entity) > 256) THEN
        RAISE EXCEPTION 'skiplock: entity: must be 1 to 256 bytes' USING ERRCODE = '22023';
    END IF;
END
$$;

-- The one enqueue implementation. Returns the job id and whether this call
-- inserted it (false: a job with the same queue and unique key is in flight;
-- with p_bump its run_at was pushed to GREATEST(existing, new)).
-- The NOTIFY is issued in the caller's transaction, so it is delivered on
-- commit and never for rolled-back work; PostgreSQL folds identical
-- notifications of one transaction into one, so it is at most one per queue.
CREATE FUNCTION {{schema}}.enqueue_job(
    p_queue text, p_kind text, p_payload jsonb, p_priority integer,
    p_run_at timestamptz, p_max_attempts integer, p_unique_key text,
    p_tenant text, p_entity text, p_bump boolean,
    OUT id bigint, OUT inserted boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_run_at timestamptz := coalesce(p_run_at, now());
    v_payload jsonb := coalesce(p_payload, '{}'::jsonb);
    v_priority integer := coalesce(p_priority, 0);
BEGIN
    PERFORM {{schema}}.validate_job(p_queue, p_kind, v_payload, v_priority, v_run_at,
        p_max_attempts, p_unique_key, p_tenant, p_entity);

    IF p_unique_key IS NULL THEN
        INSERT INTO {{schema}}.jobs AS j (queue, kind, payload, priority, run_at, max_attempts, tenant, entity)
        VALUES (p_queue, p_kind, v_payload, v_priority, v_run_at, coalesce(p_max_attempts, 20), p_tenant, p_entity)
        RETURNING j.id INTO id;
        inserted := true;
    ELSE
        -- Loop only if the conflicting job finishes between our INSERT and SELECT.
        FOR i IN 1..10 LOOP
            INSERT INTO {{schema}}.jobs AS j (queue, kind, payload, priority, run_at, max_attempts, unique_key, tenant, entity)
            VALUES (p_queue, p_kind, v_payload, v_priority, v_run_at, coalesce(p_max_attempts, 20), p_unique_key, p_tenant, p_entity)
            ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
            RETURNING j.id INTO id;
            IF id IS NOT NULL THEN
                inserted := true;
                EXIT;
            END IF;
            inserted := false;
            IF p_bump THEN
                UPDATE {{schema}}.jobs AS j SET run_at = GREATEST(j.run_at, v_run_at)
                WHERE j.queue = p_queue AND j.unique_key = p_unique_key
                RETURNING j.id INTO id;
            ELSE
                SELECT j.id INTO id FROM {{schema}}.jobs AS j
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

-- The public SQL API, callable with named arguments from any language,
-- psql or a trigger:
--   SELECT skiplock.enqueue(queue => 'emails', kind => 'welcome', payload => '{"user": 7}');
CREATE FUNCTION {{schema}}.enqueue(
    queue text, kind text, payload jsonb DEFAULT '{}', priority integer DEFAULT 0,
    run_at timestamptz DEFAULT now(), max_attempts integer DEFAULT NULL,
    unique_key text DEFAULT NULL, tenant text DEFAULT NULL, entity text DEFAULT NULL)
RETURNS bigint
LANGUAGE sql AS $$
    SELECT e.id FROM {{schema}}.enqueue_job($1, $2, $3, $4, $5, $6, $7, $8, $9, false) AS e
$$;
