-- Version 27: one ready-index entry for a job without a tenant (issue 40).
-- Until now every ready job had two entries: one in jobs_ready, which the
-- plain and the limited claim read in claim order, and one in
-- jobs_ready_no_tenant or jobs_ready_tenant, which the capped claims read.
-- A no-op drain wrote about 140 B a job for the second entry and its page
-- splits (pg_walinspect, 2026-12-02). jobs_ready now carries whether the job
-- has a tenant as its second key, so the jobs without one are a range of it
-- in claim order and serve the capped claims' spare capacity, where
-- jobs_ready_no_tenant served it; a job with a tenant keeps its entry in
-- jobs_ready_tenant for the capped claims' visit of tenants. A reader that
-- wants a queue's whole ready set in claim order reads the two ranges and
-- merges them (the claims, unhandled_kinds(), wait_p99); a reader that
-- counts or tests a queue's ready jobs reads jobs_ready by its queue as
-- before. The entry stays 40 bytes: the flag fills what was padding
-- between the queue and the priority. The key is the expression
-- (tenant IS NOT NULL), and a statement reaches a range with
-- `(j.tenant IS NOT NULL) = r.tenanted`, r.tenanted a value of the
-- statement's own (the merged reads join VALUES (false), (true)), or with
-- `(j.tenant IS NOT NULL) IS FALSE`: PostgreSQL rewrites `= false` written
-- as a constant to `tenant IS NULL`, which no longer matches the key.
-- The rebuild holds jobs under this migration's lock for the time it takes
-- to index the backlog (docs/migrations.md).
DROP INDEX {{schema}}.jobs_ready, {{schema}}.jobs_ready_no_tenant;
CREATE INDEX jobs_ready ON {{schema}}.jobs (queue, (tenant IS NOT NULL), priority DESC, run_at, id)
    WHERE state = 'ready';

-- Each partition's copy named after it, as migration 016 named them.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT ci.relname AS child, substr(pc.relname, 6) AS part
        FROM pg_inherits AS h
        JOIN pg_class AS ci ON ci.oid = h.inhrelid
        JOIN pg_index AS x ON x.indexrelid = ci.oid
        JOIN pg_class AS pc ON pc.oid = x.indrelid
        WHERE h.inhparent = '{{schema}}.jobs_ready'::regclass
    LOOP
        EXECUTE format('ALTER INDEX %I.%I RENAME TO %I', {{schema_lit}}, r.child, 'jobs_ready_' || r.part);
    END LOOP;
END
$$;

-- wait_p99 samples a queue's due jobs in claim order: the two ranges,
-- merged (the view's columns, comment and grants are kept by REPLACE).
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
        SELECT extract(epoch FROM now() - m.run_at)::float8 AS wait
        FROM (VALUES (false), (true)) AS t(tenanted)
        CROSS JOIN LATERAL (
            SELECT j.priority, j.run_at, j.id FROM {{schema}}.jobs AS j
            WHERE j.state = 'ready' AND j.queue = r.queue AND (j.tenant IS NOT NULL) = t.tenanted
              AND j.run_at <= now()
            ORDER BY j.priority DESC, j.run_at, j.id
            LIMIT 10000
        ) AS m
        ORDER BY m.priority DESC, m.run_at, m.id
        LIMIT 10000
    ) AS x
) AS s
WHERE r.queue IS NOT NULL AND s.sampled > 0;
