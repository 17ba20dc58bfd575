-- `skiplock job explain`: why a ready job is not running. Each reason is
-- tested with the claim's own fragments (claim.sql: claim_due,
-- entity_running, queue_paused; claim_limited.sql: limit_covers, limit_key,
-- limit_use), so a change to what the claim requires changes what explain
-- reports; TestExplainAgreesWithTheClaim holds a job by each reason and
-- checks that the claim leaves it and explain names it, and that the claim
-- takes it once the reason is gone.

-- name: job_explain
-- One row per reason that holds the ready job $1, and one 'position' row
-- (always, when the job is ready): how many due jobs come before it in its
-- queue's claim order (n, counted up to 10,000), and, for a job with a
-- tenant, holders = {due jobs of its tenant before it, tenants with due
-- jobs in the queue, the smallest tenant cap of the live pools of its queue
-- (0: none)}, cap = the tenant's weight, key = the tenant. No row: the job is not ready (running, finished, or gone).
-- Reasons (column what):
--   scheduled            not due: at = its run time
--   sleep, signal_wait   not due because a durable step sleeps or waits for
--                        the signal `name` (at = the timeout)
--   queue_paused         its queue is paused
--   entity_busy          holders[1] is the running job that holds its entity
--   concurrency_limit    limit `name` (partition value key) runs n of cap;
--                        holders: running jobs it counts (first 10); at: the
--                        earliest of their leases' expiry
--   rate_limit           limit `name` started n (weights) of cap within its
--                        window; at: when enough of them leave the window for
--                        this job's weight to fit
--   no_worker            no live worker claims from its queue
--   unhandled_kind       live workers claim from its queue, none its kind
-- Read only: nothing is locked (the claim's entity advisory lock is not
-- taken: a job another claimer is taking at this instant is not reported).
--   $1 job id   $2 live window (microseconds: a worker is live while it
--   heartbeats within it and has not stopped, as in unhandled_kinds)
WITH j AS MATERIALIZED (
    SELECT j.id, j.queue, j.kind, j.priority, j.run_at, j.tenant, j.entity, j.payload, j.limit_weight,
           {{claim_due}} AS due
    FROM {{schema}}.jobs AS j
    WHERE j.id = $1 AND j.state = 'ready'
),
names AS (
    -- The limits that cover the job (limit_use reads them).
    SELECT l.name FROM {{schema}}.limits AS l, j WHERE {{limit_covers}}
),
{{limit_use}},
live AS MATERIALIZED (
    SELECT w.handles, w.queues
    FROM {{schema}}.workers AS w
    WHERE w.stopped_at IS NULL AND w.heartbeat_at > now() - $2::bigint * interval '1 microsecond'
),
serves AS (
    -- Whether a live worker claims from the job's queue, and of its kind
    -- (the predicate of the unhandled_kinds function).
    SELECT EXISTS (SELECT 1 FROM live AS l
                   LEFT JOIN LATERAL jsonb_array_elements(l.handles) AS p(pool) ON true
                   WHERE (l.handles IS NULL AND j.queue = ANY (l.queues))
                      OR (p.pool -> 'queues') ? j.queue) AS queue,
           EXISTS (SELECT 1 FROM live AS l
                   LEFT JOIN LATERAL jsonb_array_elements(l.handles) AS p(pool) ON true
                   WHERE (l.handles IS NULL AND j.queue = ANY (l.queues))
                      OR ((p.pool -> 'queues') ? j.queue
                          AND (jsonb_typeof(p.pool -> 'kinds') IS DISTINCT FROM 'array' OR (p.pool -> 'kinds') ? j.kind))) AS kind
    FROM j
)
SELECT 'scheduled' AS what, NULL::text AS name, NULL::text AS key, NULL::bigint AS n, NULL::bigint AS cap,
       j.run_at AS at, NULL::bigint[] AS holders
FROM j WHERE NOT j.due
UNION ALL
-- A durable step's timer (Sleep) or signal wait (WaitSignal) not yet
-- settled: the job sleeps until its run time, or until the signal comes.
SELECT CASE WHEN s.name LIKE 'wait:%' THEN 'signal_wait' ELSE 'sleep' END,
       substr(s.name, strpos(s.name, ':') + 1), NULL, NULL, NULL, (s.output ->> 'wake_at')::timestamptz, NULL
FROM j
JOIN {{schema}}.job_steps AS s ON s.job_id = j.id AND (s.name LIKE 'sleep:%' OR s.name LIKE 'wait:%')
WHERE NOT j.due
  AND (s.output ->> 'wake_at')::timestamptz > now()
  AND NOT EXISTS (SELECT 1 FROM {{schema}}.job_steps AS r
                  WHERE r.job_id = s.job_id AND s.name LIKE 'wait:%' AND r.name = 'signal:' || substr(s.name, 6))
UNION ALL
SELECT 'queue_paused', j.queue, NULL, NULL, NULL, NULL, NULL
FROM j CROSS JOIN LATERAL (SELECT j.queue AS name) AS q
WHERE {{queue_paused}}
UNION ALL
SELECT 'entity_busy', j.entity, NULL, NULL, NULL, NULL, ARRAY[h.id]
FROM j
CROSS JOIN LATERAL (SELECT r.id FROM {{schema}}.jobs AS r WHERE {{entity_running}} LIMIT 1) AS h
WHERE j.entity IS NOT NULL
UNION ALL
-- A limit without room for the job: as claim_limited counts it (a running
-- job counts 1 in a concurrency limit; a start its weight in a rate limit).
SELECT CASE WHEN l.rate IS NULL THEN 'concurrency_limit' ELSE 'rate_limit' END, l.name, k.key,
       coalesce(u.n, 0)::bigint, l.cap::bigint,
       CASE WHEN l.rate IS NULL THEN
           (SELECT min(j.lease_expires_at) FROM {{schema}}.jobs AS j
            WHERE j.state = 'running' AND {{limit_covers}} AND {{limit_key}} = k.key)
       ELSE
           -- The oldest starts leave the window first: the one whose
           -- leaving brings the weights down to cap - weight.
           (SELECT min(x.at) + l.per FROM (
                SELECT s.at, sum(s.weight) OVER (ORDER BY s.at ROWS UNBOUNDED PRECEDING) AS gone
                FROM {{schema}}.limit_starts AS s CROSS JOIN clock AS t
                WHERE s.name = l.name AND s.key = k.key AND s.at > t.at - l.per) AS x
            WHERE x.gone >= coalesce(u.n, 0) + coalesce(j.limit_weight, 1) - l.cap)
       END,
       CASE WHEN l.rate IS NULL THEN
           ARRAY(SELECT j.id FROM {{schema}}.jobs AS j
                 WHERE j.state = 'running' AND {{limit_covers}} AND {{limit_key}} = k.key
                 ORDER BY j.id LIMIT 10)
       END
FROM lim AS l
CROSS JOIN j
CROSS JOIN LATERAL (SELECT {{limit_key}} AS key) AS k
LEFT JOIN used AS u ON u.name = l.name AND u.key = k.key
WHERE k.key IS NOT NULL
  AND coalesce(u.n, 0) + CASE WHEN l.rate IS NULL THEN 1 ELSE coalesce(j.limit_weight, 1) END > l.cap
UNION ALL
SELECT CASE WHEN NOT v.queue THEN 'no_worker' ELSE 'unhandled_kind' END, j.kind, j.queue, NULL, NULL, NULL, NULL
FROM j CROSS JOIN serves AS v
WHERE NOT v.kind
UNION ALL
SELECT 'position', j.tenant, j.tenant,
       (SELECT count(*) FROM (
            SELECT 1 FROM {{schema}}.jobs AS a
            WHERE a.state = 'ready' AND a.queue = j.queue AND a.run_at <= now()
              AND (a.priority > j.priority OR (a.priority = j.priority AND (a.run_at, a.id) < (j.run_at, j.id)))
            LIMIT 10000) AS x),
       CASE WHEN j.tenant IS NOT NULL THEN
           coalesce((SELECT tw.weight FROM {{schema}}.tenant_weights AS tw
                     WHERE tw.queue = j.queue AND tw.tenant = j.tenant), 1)
       END,
       NULL,
       CASE WHEN j.tenant IS NOT NULL THEN ARRAY[
           (SELECT count(*) FROM (
                SELECT 1 FROM {{schema}}.jobs AS a
                WHERE a.state = 'ready' AND a.queue = j.queue AND a.tenant = j.tenant AND a.run_at <= now()
                  AND (a.priority > j.priority OR (a.priority = j.priority AND (a.run_at, a.id) < (j.run_at, j.id)))
                LIMIT 10000) AS x),
           (SELECT count(DISTINCT a.tenant) FROM {{schema}}.jobs AS a
            WHERE a.state = 'ready' AND a.queue = j.queue AND a.tenant IS NOT NULL AND a.run_at <= now()),
           -- The smallest tenant cap of the live pools that claim from the
           -- queue (0: none caps it).
           coalesce((SELECT min((p.pool ->> 'tenant_cap')::bigint) FROM live AS l
                     CROSS JOIN LATERAL jsonb_array_elements(l.handles) AS p(pool)
                     WHERE (p.pool -> 'queues') ? j.queue AND (p.pool ->> 'tenant_cap')::bigint > 0), 0)]
       END
FROM j;

-- name: task_explain
-- A workflow task, for `job explain --task`: its state, its job once
-- enqueued, and the parents it waits for (pending: its job is enqueued
-- when the last of them finishes; a batch's callback waits for every
-- member). Parents in claim order of their ids.
--   $1 task id
SELECT t.workflow_id, t.name, t.state, t.job_id, t.queue, t.kind,
       ARRAY(SELECT p.id FROM {{schema}}.workflow_deps AS d
             JOIN {{schema}}.workflow_tasks AS p ON p.id = d.parent_id
             WHERE d.task_id = t.id AND p.state IN ('pending', 'enqueued') ORDER BY p.id),
       ARRAY(SELECT p.name FROM {{schema}}.workflow_deps AS d
             JOIN {{schema}}.workflow_tasks AS p ON p.id = d.parent_id
             WHERE d.task_id = t.id AND p.state IN ('pending', 'enqueued') ORDER BY p.id)
FROM {{schema}}.workflow_tasks AS t
WHERE t.id = $1;
