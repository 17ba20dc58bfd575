-- Priority aging (migration 010).

-- name: queue_aging_set
-- Sets (or, with NULLs, clears) the aging of queue $1: due for longer than
-- $2 microseconds, a ready job is promoted to priority $3.
INSERT INTO {{schema}}.queues AS q (name, age_after, age_to)
VALUES ($1, $2::bigint * interval '1 microsecond', $3)
ON CONFLICT (name) DO UPDATE
SET age_after = EXCLUDED.age_after, age_to = EXCLUDED.age_to, updated_at = now();

-- name: age_ready
-- One aging pass: in every queue with aging, the ready jobs due for longer
-- than its age_after and below its age_to are promoted to age_to, the
-- longest-waiting first, at most $1 per queue. Rows a claimer holds are
-- skipped (SKIP LOCKED: they are being claimed anyway), so passes in many
-- processes at once are safe. The scan reads the queue's entries of the
-- ready index (its two ranges, migration 027: a job's tenant does not
-- matter here), checking priority and run_at on the index entries. Returns
-- the promoted count.
WITH aging AS (
    SELECT q.name, q.age_after, q.age_to FROM {{schema}}.queues AS q
    WHERE q.age_after IS NOT NULL
),
old AS (
    SELECT o.id, a.age_to
    FROM aging AS a
    CROSS JOIN LATERAL (
        SELECT j.id FROM {{schema}}.jobs AS j
        WHERE j.state = 'ready' AND j.queue = a.name AND j.priority < a.age_to
          AND j.run_at <= now() - a.age_after
        ORDER BY j.run_at, j.id
        LIMIT $1
        FOR NO KEY UPDATE SKIP LOCKED
    ) AS o
),
promoted AS (
    UPDATE {{schema}}.jobs AS j
    SET priority = o.age_to
    FROM old AS o
    WHERE j.id = o.id AND j.state = 'ready' AND j.priority < o.age_to
    RETURNING j.id
)
SELECT count(*) FROM promoted;
