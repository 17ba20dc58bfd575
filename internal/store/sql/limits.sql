-- Concurrency limits (migration 009): stored in the database so every
-- process obeys the same ones; enforced by claim_limited (claim.sql).

-- name: limit_set
-- Creates or replaces the limit $1.
--   $1 name  $2 queue  $3 kind  $4 partition  $5 concurrency
INSERT INTO {{schema}}.limits AS l (name, queue, kind, partition, concurrency)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (name) DO UPDATE
SET queue = EXCLUDED.queue, kind = EXCLUDED.kind, partition = EXCLUDED.partition,
    concurrency = EXCLUDED.concurrency, updated_at = now();

-- name: limit_remove
-- Removes the limit $1; returns its name when it existed.
DELETE FROM {{schema}}.limits WHERE name = $1 RETURNING name;

-- name: limit_list
-- Every limit with its use now: running jobs it counts, those of its
-- fullest partition value, the values at the limit; with $1, also the ready
-- jobs it covers and how long the oldest due one has waited (a scan of the
-- covered backlog: for the CLI and doctor, not for every metrics scrape).
SELECT l.name, coalesce(l.queue, ''), coalesce(l.kind, ''), coalesce(l.partition, ''), l.concurrency,
       coalesce(u.max_used, 0)::bigint, coalesce(u.full_values, 0)::bigint, coalesce(u.running, 0)::bigint,
       coalesce(r.ready, 0)::bigint, coalesce(r.oldest_due_age, 0)::float8, l.updated_at
FROM {{schema}}.limits AS l
LEFT JOIN LATERAL (
    SELECT max(c.n) AS max_used, count(*) FILTER (WHERE c.n >= l.concurrency) AS full_values, sum(c.n) AS running
    FROM (SELECT k.key, count(*) AS n
          FROM {{schema}}.jobs AS j
          CROSS JOIN LATERAL (SELECT {{limit_key}} AS key) AS k
          WHERE j.state = 'running' AND {{limit_covers}} AND k.key IS NOT NULL
          GROUP BY k.key) AS c
) AS u ON true
LEFT JOIN LATERAL (
    SELECT count(*) AS ready,
           extract(epoch FROM now() - min(j.run_at) FILTER (WHERE j.run_at <= now())) AS oldest_due_age
    FROM {{schema}}.jobs AS j
    WHERE $1::boolean AND j.state = 'ready' AND {{limit_covers}}
) AS r ON true
ORDER BY l.name;

-- name: limits_covering
-- The limits that cover work a claimer of the queues $1 and kinds $2 (NULL:
-- any kind) may take: its queues' limits and the limits of its kinds (a kind
-- may be enqueued into any queue).
SELECT l.name FROM {{schema}}.limits AS l
WHERE l.queue = ANY ($1::text[])
   OR (l.kind IS NOT NULL AND ($2::text[] IS NULL OR l.kind = ANY ($2::text[])))
ORDER BY l.name;
