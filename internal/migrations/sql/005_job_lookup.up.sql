-- Jobs you can look up, and kinds no live worker handles.
--
-- Finished jobs are kept in jobs_done by default (for CompletedRetention, 24
-- hours unless configured), so "did job 4711 run, when, after how many
-- attempts, with what last error" has an answer. The history needs the
-- attempt budget and the last failed attempt's error, and a way to find one
-- id without reading a whole day's partition.

ALTER TABLE {{schema}}.jobs_done ADD COLUMN max_attempts integer;
ALTER TABLE {{schema}}.jobs_done ADD COLUMN last_error text;
COMMENT ON COLUMN {{schema}}.jobs_done.last_error IS
    'skiplock: the error of the last failed attempt before the job succeeded (NULL: it succeeded at once).';

-- Lookup by id. Ids grow with enqueue order and rows land in completion
-- order, so each block range holds a narrow band of ids: a BRIN index finds
-- an id by reading a few ranges, and costs almost nothing per completion
-- (a btree would add an index entry, and its WAL, to every finished job).
CREATE INDEX jobs_done_id ON {{schema}}.jobs_done USING brin (id) WITH (pages_per_range = 16, autosummarize = on);

-- What each worker process serves, refreshed with its heartbeat: one element
-- per pool, {"queues": [...], "kinds": [...]}, kinds null when the pool takes
-- any kind (a fallback handler). NULL for processes older than this column:
-- they are assumed to handle every kind of the queues they list.
ALTER TABLE {{schema}}.workers ADD COLUMN handles jsonb;
COMMENT ON COLUMN {{schema}}.workers.handles IS
    'skiplock: the pools of this process, [{"queues": [...], "kinds": [...] | null}]; null kinds = any kind.';

-- Ready jobs (due now) whose queue and kind no live worker serves, per queue
-- and kind. A worker is live while it heartbeats within live_window and has
-- not stopped. Each queue is sampled in claim order, at most 10,000 due jobs
-- (unhandled jobs are never claimed, so they stay at the front): beyond that
-- the count is a lower bound. Reads only the partial ready index and the
-- rows it points at; never jobs_done.
CREATE FUNCTION {{schema}}.unhandled_kinds(live_window interval DEFAULT interval '1 minute')
RETURNS TABLE (queue text, kind text, ready bigint, oldest_ready_age_seconds float8)
LANGUAGE sql STABLE AS $$
WITH RECURSIVE ready_queues (queue) AS (
    (SELECT j.queue FROM {{schema}}.jobs AS j WHERE j.state = 'ready' ORDER BY j.queue LIMIT 1)
  UNION ALL
    SELECT (SELECT j.queue FROM {{schema}}.jobs AS j
            WHERE j.state = 'ready' AND j.queue > r.queue ORDER BY j.queue LIMIT 1)
    FROM ready_queues AS r
    WHERE r.queue IS NOT NULL
),
live AS MATERIALIZED (
    SELECT w.handles, w.queues
    FROM {{schema}}.workers AS w
    WHERE w.stopped_at IS NULL AND w.heartbeat_at > now() - live_window
),
sampled AS (
    SELECT r.queue, s.kind, count(*) AS ready, min(s.run_at) AS oldest
    FROM ready_queues AS r
    CROSS JOIN LATERAL (
        SELECT j.kind, j.run_at
        FROM {{schema}}.jobs AS j
        WHERE j.state = 'ready' AND j.queue = r.queue AND j.run_at <= now()
        ORDER BY j.priority DESC, j.run_at, j.id
        LIMIT 10000
    ) AS s
    WHERE r.queue IS NOT NULL
    GROUP BY r.queue, s.kind
)
SELECT s.queue, s.kind, s.ready, extract(epoch FROM now() - s.oldest)::float8
FROM sampled AS s
WHERE NOT EXISTS (
    SELECT 1
    FROM live AS l
    LEFT JOIN LATERAL jsonb_array_elements(l.handles) AS p(pool) ON true
    WHERE (l.handles IS NULL AND s.queue = ANY (l.queues))
       OR ((p.pool -> 'queues') ? s.queue
           AND (jsonb_typeof(p.pool -> 'kinds') IS DISTINCT FROM 'array' OR (p.pool -> 'kinds') ? s.kind))
)
ORDER BY s.ready DESC, s.queue, s.kind
$$;
COMMENT ON FUNCTION {{schema}}.unhandled_kinds(interval) IS
    'skiplock: due ready jobs per queue and kind that no live worker (heartbeat within live_window) serves: a mistyped kind or a handler not deployed. Sampled at most 10,000 per queue in claim order.';

-- Retries one dead or finished job: exactly one new ready job (a new id, due
-- now, attempts 0) with the old job's queue, kind, payload, priority, attempt
-- budget, tenant and entity. A dead job leaves jobs_dead in the same
-- statement, so racing retries of it create one job between them; a
-- finished job's history row stays (history is only ever retired by dropping
-- partitions). A dead job whose unique key is in flight again is refused
-- (55000) and stays dead. For any other id new_id is NULL and state says
-- where the job is (ready, scheduled, running) or is NULL (no such job).
CREATE FUNCTION {{schema}}.retry_job(p_id bigint, OUT new_id bigint, OUT state text)
LANGUAGE plpgsql AS $$
DECLARE
    d {{schema}}.jobs_dead%ROWTYPE;
    f record;
BEGIN
    DELETE FROM {{schema}}.jobs_dead AS x WHERE x.id = p_id RETURNING x.* INTO d;
    IF FOUND THEN
        state := 'dead';
        INSERT INTO {{schema}}.jobs AS j (queue, kind, payload, priority, run_at, max_attempts, unique_key, tenant, entity)
        VALUES (d.queue, d.kind, d.payload, d.priority, now(), d.max_attempts, d.unique_key, d.tenant, d.entity)
        ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
        RETURNING j.id INTO new_id;
        IF new_id IS NULL THEN
            RAISE EXCEPTION 'skiplock: id: dead job % has unique key % in flight again; it stays dead', p_id, d.unique_key
                USING ERRCODE = '55000';
        END IF;
        PERFORM pg_notify({{schema_lit}} || '.jobs', d.queue);
        RETURN;
    END IF;
    SELECT x.queue, x.kind, x.payload, x.priority, x.max_attempts, x.tenant, x.entity INTO f
    FROM {{schema}}.jobs_done AS x WHERE x.id = p_id
    ORDER BY x.finished_at DESC LIMIT 1;
    IF FOUND THEN
        state := 'completed';
        INSERT INTO {{schema}}.jobs AS j (queue, kind, payload, priority, run_at, max_attempts, tenant, entity)
        VALUES (f.queue, f.kind, f.payload, f.priority, now(), coalesce(f.max_attempts, 20), f.tenant, f.entity)
        RETURNING j.id INTO new_id;
        PERFORM pg_notify({{schema_lit}} || '.jobs', f.queue);
        RETURN;
    END IF;
    SELECT CASE WHEN j.state = 'ready' AND j.run_at > now() THEN 'scheduled' ELSE j.state END INTO state
    FROM {{schema}}.jobs AS j WHERE j.id = p_id;
END
$$;
COMMENT ON FUNCTION {{schema}}.retry_job(bigint) IS
    'skiplock: retries a dead or finished job as exactly one new ready job; returns its id and the old state (new_id NULL: not retryable, state says why).';

-- History is kept by default now, so completions and the partition pass meet
-- every day: ensure_done_partitions (002) locks jobs_done_default while it
-- moves a day's rows out and attaches that day's partition.
CREATE OR REPLACE FUNCTION {{schema}}.ensure_done_partitions(days_ahead integer DEFAULT 7)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    today   date := (now() AT TIME ZONE 'UTC')::date;
    d       date;
    part    text;
    lo      timestamptz;
    hi      timestamptz;
    created integer := 0;
BEGIN
    IF days_ahead IS NULL OR days_ahead < 0 OR days_ahead > 366 THEN
        RAISE EXCEPTION 'skiplock: days_ahead: must be between 0 and 366, got %', days_ahead
            USING ERRCODE = '22023';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended({{schema_lit}} || '.partitions', 0));
    FOR d IN
        SELECT g::date FROM generate_series(today, today + days_ahead, interval '1 day') AS g
        UNION
        SELECT DISTINCT (x.finished_at AT TIME ZONE 'UTC')::date FROM {{schema}}.jobs_done_default AS x
        ORDER BY 1
    LOOP
        part := 'jobs_done_' || to_char(d, 'YYYYMMDD');
        CONTINUE WHEN to_regclass(format('{{schema}}.%I', part)) IS NOT NULL;
        lo := d::timestamp AT TIME ZONE 'UTC';
        hi := (d + 1)::timestamp AT TIME ZONE 'UTC';
        -- Hold off archiving into jobs_done_default until this transaction
        -- ends: a row for day d landing there between the move below and the
        -- ATTACH would make the ATTACH fail (SQLSTATE 23514). Completions
        -- only write there while a day has no partition, so they rarely wait.
        LOCK TABLE {{schema}}.jobs_done_default IN EXCLUSIVE MODE;
        EXECUTE format('CREATE TABLE {{schema}}.%I (LIKE {{schema}}.jobs_done INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', part);
        EXECUTE format('WITH m AS (DELETE FROM {{schema}}.jobs_done_default WHERE finished_at >= %L AND finished_at < %L RETURNING *) '
                       'INSERT INTO {{schema}}.%I SELECT * FROM m', lo, hi, part);
        EXECUTE format('ALTER TABLE {{schema}}.jobs_done ATTACH PARTITION {{schema}}.%I FOR VALUES FROM (%L) TO (%L)',
                       part, lo, hi);
        EXECUTE format('COMMENT ON TABLE {{schema}}.%I IS %L', part,
                       'skiplock: jobs finished on ' || d || ' (UTC); dropped whole by drop_done_partitions()');
        created := created + 1;
    END LOOP;
    RETURN created;
END
$$;
