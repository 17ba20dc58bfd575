-- Back to version 26: jobs_ready in claim order for every ready job, and
-- jobs_ready_no_tenant beside it for the jobs without a tenant (each
-- partition's copy named after it); wait_p99 and unhandled_kinds() read
-- jobs_ready in one range, as version 26 had them.
DROP INDEX {{schema}}.jobs_ready;
CREATE INDEX jobs_ready ON {{schema}}.jobs (queue, priority DESC, run_at, id)
    WHERE state = 'ready';
CREATE INDEX jobs_ready_no_tenant ON {{schema}}.jobs (queue, priority DESC, run_at, id)
    WHERE state = 'ready' AND tenant IS NULL;
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT ci.relname AS child, pi.relname AS parent, substr(pc.relname, 6) AS part
        FROM pg_inherits AS h
        JOIN pg_class AS ci ON ci.oid = h.inhrelid
        JOIN pg_class AS pi ON pi.oid = h.inhparent
        JOIN pg_index AS x ON x.indexrelid = ci.oid
        JOIN pg_class AS pc ON pc.oid = x.indrelid
        WHERE h.inhparent IN ('{{schema}}.jobs_ready'::regclass, '{{schema}}.jobs_ready_no_tenant'::regclass)
    LOOP
        EXECUTE format('ALTER INDEX %I.%I RENAME TO %I', {{schema_lit}}, r.child, r.parent || '_' || r.part);
    END LOOP;
END
$$;

CREATE OR REPLACE VIEW {{schema}}.wait_p99 AS
WITH RECURSIVE ready_queues (queue) AS (
    (SELECT j.queue FROM {{schema}}.jobs AS j WHERE j.state = 'ready' ORDER BY j.queue LIMIT 1)
  UNION ALL
    SELECT (SELECT j.queue FROM {{schema}}.jobs AS j
            WHERE j.state = 'ready' AND j.queue > r.queue ORDER BY j.queue LIMIT 1)
    FROM ready_queues AS r
    WHERE r.queue IS NOT NULL
)
SELECT r.queue, s.sampled, s.wait_p50_seconds, s.wait_p99_seconds
FROM ready_queues AS r
CROSS JOIN LATERAL (
    SELECT count(*) AS sampled,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY x.wait)::float8  AS wait_p50_seconds,
           percentile_cont(0.99) WITHIN GROUP (ORDER BY x.wait)::float8 AS wait_p99_seconds
    FROM (
        SELECT extract(epoch FROM now() - j.run_at)::float8 AS wait
        FROM {{schema}}.jobs AS j
        WHERE j.state = 'ready' AND j.queue = r.queue AND j.run_at <= now()
        ORDER BY j.priority DESC, j.run_at, j.id
        LIMIT 10000
    ) AS x
) AS s
WHERE r.queue IS NOT NULL AND s.sampled > 0;

-- functions/unhandled_kinds.sql of version 26.
-- Ready jobs (due now) whose queue and kind no live worker serves, per queue
-- and kind. A worker is live while it heartbeats within live_window and has
-- not stopped. Each queue is sampled in claim order, at most 10,000 due jobs
-- (unhandled jobs are never claimed, so they stay at the front): beyond that
-- the count is a lower bound. Reads only the partial ready index and the
-- rows it points at; never jobs_done.
CREATE OR REPLACE FUNCTION {{schema}}.unhandled_kinds(live_window interval DEFAULT interval '1 minute')
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
