-- Per queue: ready (run_at <= now), scheduled (run_at > now), running, dead,
-- the age of the oldest ready job (queue lag) and whether it is paused.
-- One pass over each source, each through an index: ready rows through the
-- partial ready index, running rows through the partial running index, dead
-- letters through the narrow jobs_dead (queue) index (index-only once
-- autovacuum has set the visibility map). jobs_done is never read, and
-- sequential scans are switched off for this function: under vacuum debt the
-- hot table's heap is mostly dead tuples, and a dashboard refreshing every
-- few seconds must not read all of it. The cost follows the backlog and the
-- dead-letter count, never the history or the bloat.
CREATE OR REPLACE FUNCTION {{schema}}.queue_stats_rows()
RETURNS TABLE (queue text, ready bigint, scheduled bigint, running bigint, dead bigint,
               oldest_ready_age_seconds float8, paused boolean)
LANGUAGE sql STABLE
SET enable_seqscan = off
AS $$
WITH ready AS (
    SELECT j.queue,
           count(*) FILTER (WHERE j.run_at <= now()) AS ready,
           count(*) FILTER (WHERE j.run_at > now())  AS scheduled,
           min(j.run_at) FILTER (WHERE j.run_at <= now()) AS oldest
    FROM {{schema}}.jobs AS j
    WHERE j.state = 'ready'
    GROUP BY j.queue
),
running AS (
    SELECT j.queue, count(*) AS running
    FROM {{schema}}.jobs AS j
    WHERE j.state = 'running'
    GROUP BY j.queue
),
dead AS (
    SELECT d.queue, count(*) AS dead
    FROM {{schema}}.jobs_dead AS d
    GROUP BY d.queue
),
all_queues AS (
    SELECT r.queue FROM ready AS r
    UNION SELECT n.queue FROM running AS n
    UNION SELECT d.queue FROM dead AS d
    UNION SELECT q.name FROM {{schema}}.queues AS q
)
SELECT a.queue,
       coalesce(r.ready, 0)::bigint,
       coalesce(r.scheduled, 0)::bigint,
       coalesce(n.running, 0)::bigint,
       coalesce(d.dead, 0)::bigint,
       coalesce(extract(epoch FROM now() - r.oldest), 0)::float8,
       coalesce(p.paused, false)
FROM all_queues AS a
LEFT JOIN ready AS r ON r.queue = a.queue
LEFT JOIN running AS n ON n.queue = a.queue
LEFT JOIN dead AS d ON d.queue = a.queue
LEFT JOIN {{schema}}.queues AS p ON p.name = a.queue
ORDER BY a.queue
$$;

COMMENT ON FUNCTION {{schema}}.queue_stats_rows() IS
    'skiplock: the rows of the queue_stats view (a function so that it can plan with enable_seqscan = off).';
