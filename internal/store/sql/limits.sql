-- Concurrency limits (migration 009): stored in the database so every
-- process obeys the same ones; enforced by claim_limited (claim_limited.sql).

-- name: limit_set
-- Creates or replaces the limit $1: a concurrency limit ($5) or a rate
-- limit ($6 starts per $7 microseconds).
--   $1 name  $2 queue  $3 kind  $4 partition  $5 concurrency  $6 rate  $7 per
INSERT INTO {{schema}}.limits AS l (name, queue, kind, partition, concurrency, rate, per)
VALUES ($1, $2, $3, $4, $5, $6, $7::bigint * interval '1 microsecond')
ON CONFLICT (name) DO UPDATE
SET queue = EXCLUDED.queue, kind = EXCLUDED.kind, partition = EXCLUDED.partition,
    concurrency = EXCLUDED.concurrency, rate = EXCLUDED.rate, per = EXCLUDED.per, updated_at = now();

-- name: limit_remove
-- Removes the limit $1 and its recorded starts; returns its name when it
-- existed.
WITH starts AS (DELETE FROM {{schema}}.limit_starts WHERE name = $1)
DELETE FROM {{schema}}.limits WHERE name = $1 RETURNING name;

-- name: limit_starts_prune
-- Forgets starts older than their limit's window (or of a removed limit),
-- at most $1 rows a pass.
DELETE FROM {{schema}}.limit_starts AS s
WHERE s.ctid IN (
    SELECT x.ctid FROM {{schema}}.limit_starts AS x
    LEFT JOIN {{schema}}.limits AS l ON l.name = x.name
    WHERE l.name IS NULL OR l.per IS NULL OR x.at < now() - l.per
    LIMIT $1);

-- name: limit_list
-- Every limit with its use now: what it counts (running jobs, or the
-- weights of the starts in its window) in all and in its fullest partition
-- value, and the values at the limit; with $1, also the ready jobs it
-- covers, how long the oldest due one has waited, and how many of them are
-- heavier than a rate limit's rate, with the ids of the first five
-- (limit_weight, migration 014: they can never start under it) (a scan of the covered backlog: for the CLI and
-- doctor, not for every metrics scrape).
SELECT l.name, coalesce(l.queue, ''), coalesce(l.kind, ''), coalesce(l.partition, ''),
       coalesce(l.concurrency, 0), coalesce(l.rate, 0), coalesce(extract(epoch FROM l.per), 0)::float8,
       coalesce(u.max_used, 0)::bigint, coalesce(u.full_values, 0)::bigint, coalesce(u.used, 0)::bigint,
       coalesce(r.ready, 0)::bigint, coalesce(r.oldest_due_age, 0)::float8, l.updated_at,
       coalesce(r.too_heavy, 0)::bigint, coalesce(r.too_heavy_ids, '{}')
FROM {{schema}}.limits AS l
LEFT JOIN LATERAL (
    SELECT max(c.n) AS max_used, count(*) FILTER (WHERE c.n >= coalesce(l.concurrency, l.rate)) AS full_values,
           sum(c.n) AS used
    FROM (SELECT k.key, count(*) AS n
          FROM {{schema}}.jobs AS j
          CROSS JOIN LATERAL (SELECT {{limit_key}} AS key) AS k
          WHERE l.rate IS NULL AND j.state = 'running' AND {{limit_covers}} AND k.key IS NOT NULL
          GROUP BY k.key
        UNION ALL
          SELECT s.key, sum(s.weight)
          FROM {{schema}}.limit_starts AS s
          WHERE l.rate IS NOT NULL AND s.name = l.name AND s.at > now() - l.per
          GROUP BY s.key) AS c
) AS u ON true
LEFT JOIN LATERAL (
    SELECT count(*) AS ready,
           extract(epoch FROM now() - min(j.run_at) FILTER (WHERE j.run_at <= now())) AS oldest_due_age,
           count(*) FILTER (WHERE j.limit_weight > l.rate) AS too_heavy,
           (array_agg(j.id ORDER BY j.id) FILTER (WHERE j.limit_weight > l.rate))[1:5] AS too_heavy_ids
    FROM {{schema}}.jobs AS j
    WHERE $1::boolean AND j.state = 'ready' AND {{limit_covers}}
) AS r ON true
ORDER BY l.name;

-- name: limits_covering
-- The limits that cover work a claimer of the queues $1 and kinds $2 (NULL:
-- any kind) may take: its queues' limits and the limits of its kinds (a kind
-- may be enqueued into any queue), each with whether it is a rate limit.
SELECT l.name, l.rate IS NOT NULL FROM {{schema}}.limits AS l
WHERE l.queue = ANY ($1::text[])
   OR (l.kind IS NOT NULL AND ($2::text[] IS NULL OR l.kind = ANY ($2::text[])))
ORDER BY l.name;

-- name: limit_next_start
-- How long, in seconds by the database clock, until the first of the rate
-- limits $1 that holds jobs back in some partition value has room there
-- again, and NULL when none does (what held a claim back, if anything, was
-- not a rate window). A value holds back a job of weight 1 when its window
-- is full (the weights started within it reach the rate), and a due ready
-- job of weight w (jobs.limit_weight, migration 014; the lightest such job
-- of the value, read from the small jobs_ready_weighted index) when the
-- room left is below w. Room for the lighter of the two comes back when the
-- window's starts leave it, oldest first, until what is left is at most the
-- rate minus that weight. A claimer whose limited claim came back short
-- sleeps this long instead of polling.
-- (greatest() ignores a NULL argument: without the CASE, "none" came back
-- as 0, "claim again now", and an idle rate-limited pool claimed every
-- millisecond.)
--   $1 limit names text[]
WITH lim AS (
    SELECT l.name, l.queue, l.kind, l.partition, l.rate, l.per
    FROM {{schema}}.limits AS l
    WHERE l.name = ANY ($1::text[]) AND l.rate IS NOT NULL
),
windows AS (
    SELECT l.name, s.key, s.at, l.per, l.rate,
           sum(s.weight) OVER (PARTITION BY l.name, s.key) AS total,
           -- What has left the window once this start has.
           sum(s.weight) OVER (PARTITION BY l.name, s.key ORDER BY s.at
                               ROWS UNBOUNDED PRECEDING) AS gone
    FROM lim AS l
    JOIN {{schema}}.limit_starts AS s ON s.name = l.name AND s.at > clock_timestamp() - l.per
),
lightest_need AS (
    -- Per value, the lightest due weighted job waiting under the limit
    -- (one heavier than the rate never starts: left out).
    SELECT l.name, k.key, min(j.limit_weight) AS w
    FROM lim AS l
    JOIN {{schema}}.jobs AS j ON j.state = 'ready' AND j.limit_weight IS NOT NULL AND {{limit_covers}}
    CROSS JOIN LATERAL (SELECT {{limit_key}} AS key) AS k
    WHERE j.run_at <= now() AND j.limit_weight <= l.rate AND k.key IS NOT NULL
    GROUP BY l.name, k.key
),
needs AS (
    -- The weight a value must make room for: 1 when its window is full,
    -- else its lightest waiting weighted job's (none: nothing held back).
    SELECT w.at, w.per, w.rate, w.total, w.gone,
           CASE WHEN w.total >= w.rate THEN 1 ELSE n.w END AS need
    FROM windows AS w
    LEFT JOIN lightest_need AS n ON n.name = w.name AND n.key = w.key
)
SELECT CASE WHEN min(x.at + x.per) IS NOT NULL
            THEN greatest(extract(epoch FROM min(x.at + x.per) - clock_timestamp()), 0)::float8 END
FROM needs AS x
WHERE x.total + x.need > x.rate AND x.total - x.gone + x.need <= x.rate;
