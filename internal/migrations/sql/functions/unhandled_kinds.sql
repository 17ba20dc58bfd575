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
        -- The jobs without a tenant and those with one are two ranges of
        -- jobs_ready in claim order (migration 027): the first 10,000 of
        -- each, merged.
        SELECT m.kind, m.run_at
        FROM (VALUES (false), (true)) AS t(tenanted)
        CROSS JOIN LATERAL (
            SELECT j.kind, j.priority, j.run_at, j.id FROM {{schema}}.jobs AS j
            WHERE j.state = 'ready' AND j.queue = r.queue AND (j.tenant IS NOT NULL) = t.tenanted
              AND j.run_at <= now()
            ORDER BY j.priority DESC, j.run_at, j.id
            LIMIT 10000
        ) AS m
        ORDER BY m.priority DESC, m.run_at, m.id
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
