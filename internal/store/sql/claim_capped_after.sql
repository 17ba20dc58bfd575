-- The tenant-capped claim after per-tenant bounds (strategy
-- ClaimCappedAfter), for a pool whose claims from the front got expensive
-- under a pinned horizon (internal/worker/keyset.go).

-- fragment: known_bound
-- kb: the pr.ki-th tenant (in name order) that the capped claim has a bound
-- for in the queue of bq (bounds), with that bound; all NULL past the last
-- one, or without bounds. pr.ki is carried by the visit (tenants): the first
-- known tenant after the one it is at, so finding it costs no search.
SELECT bq.tenants[pr.ki] AS tenant, bq.priorities[pr.ki] AS priority, bq.run_ats[pr.ki] AS run_at,
       bq.ids[pr.ki] AS id

-- fragment: known_next
-- After tenant_probe found p: the visit's next ki (past kb when p is kb,
-- the same one when p is a tenant before it) and p's bound (kb's when p is
-- kb: b_priority, b_run_at, b_id; NULL otherwise).
CASE WHEN p.tenant = kb.tenant THEN pr.ki + 1 ELSE pr.ki END AS ki,
CASE WHEN p.tenant = kb.tenant THEN kb.priority END AS b_priority,
CASE WHEN p.tenant = kb.tenant THEN kb.run_at END AS b_run_at,
CASE WHEN p.tenant = kb.tenant THEN kb.id END AS b_id

-- fragment: tenant_probe
-- The capped claim's probe: the first ready job, in the tenant index's order,
-- of the first tenant after pr.after in queue pr.q (columns tenant, id,
-- priority, run_at, entity, kind). When the claimer has a bound for a tenant
-- after pr.after (kb, known_bound), the tenants before kb are read from their
-- front (tenants this claimer has taken no job of), then kb's jobs after its
-- bound; kb with no ready job after its bound comes back as a row with a NULL
-- id (an empty tenant: the visit goes on after it). Without bounds it is one
-- probe, the first entry after pr.after.
SELECT x.* FROM (
    (SELECT j.tenant, j.id, j.priority, j.run_at, j.entity, j.kind
     FROM {{schema}}.jobs AS j
     WHERE kb.tenant IS NULL
       AND j.state = 'ready' AND j.tenant IS NOT NULL AND j.queue = pr.q AND j.tenant > pr.after
     ORDER BY j.tenant, j.priority DESC, j.run_at, j.id LIMIT 1)
  UNION ALL
    (SELECT j.tenant, j.id, j.priority, j.run_at, j.entity, j.kind
     FROM {{schema}}.jobs AS j
     WHERE kb.tenant IS NOT NULL
       AND j.state = 'ready' AND j.tenant IS NOT NULL AND j.queue = pr.q
       AND j.tenant > pr.after AND j.tenant < kb.tenant
     ORDER BY j.tenant, j.priority DESC, j.run_at, j.id LIMIT 1)
  UNION ALL
    (SELECT j.tenant, j.id, j.priority, j.run_at, j.entity, j.kind
     FROM {{schema}}.jobs AS j
     WHERE j.state = 'ready' AND j.tenant IS NOT NULL AND j.queue = pr.q AND j.tenant = kb.tenant
       AND j.priority = kb.priority AND (j.run_at, j.id) > (kb.run_at, kb.id)
     ORDER BY j.tenant, j.priority DESC, j.run_at, j.id LIMIT 1)
  UNION ALL
    (SELECT j.tenant, j.id, j.priority, j.run_at, j.entity, j.kind
     FROM {{schema}}.jobs AS j
     WHERE j.state = 'ready' AND j.tenant IS NOT NULL AND j.queue = pr.q AND j.tenant = kb.tenant
       AND j.priority < kb.priority
     ORDER BY j.tenant, j.priority DESC, j.run_at, j.id LIMIT 1)
  UNION ALL
    SELECT kb.tenant, NULL::bigint, NULL::int, NULL::timestamptz, NULL::text, NULL::text
    WHERE kb.tenant IS NOT NULL
) AS x LIMIT 1

-- fragment: tenant_jobs
-- Tenant g.tenant's first g.lim claimable jobs in queue g.q in claim order,
-- after its bound tb (its bound the visit found: tenants; NULL: from the front), with their place
-- (ord). Two index ranges, as in claim: the bound's priority after (run_at,
-- id), then every lower priority.
SELECT u.*, row_number() OVER (ORDER BY u.priority DESC, u.run_at, u.id) AS ord FROM (
    (SELECT j.id, j.priority, j.run_at, j.entity
     FROM {{schema}}.jobs AS j
     WHERE tb.priority IS NOT NULL
       AND j.queue = g.q AND j.tenant IS NOT NULL AND j.tenant = g.tenant
       AND j.priority = tb.priority AND (j.run_at, j.id) > (tb.run_at, tb.id)
       AND {{claimable}}
     ORDER BY j.tenant, j.priority DESC, j.run_at, j.id LIMIT g.lim)
  UNION ALL
    (SELECT j.id, j.priority, j.run_at, j.entity
     FROM {{schema}}.jobs AS j
     WHERE j.queue = g.q AND j.tenant IS NOT NULL AND j.tenant = g.tenant
       AND j.priority <= coalesce(tb.priority::bigint - 1, 2147483647)
       AND {{claimable}}
     ORDER BY j.tenant, j.priority DESC, j.run_at, j.id LIMIT g.lim)
) AS u
ORDER BY u.priority DESC, u.run_at, u.id LIMIT g.lim

-- fragment: untenanted_jobs
-- tenant_jobs for the jobs of queue g.q without a tenant (their range of
-- jobs_ready, migration 027).
SELECT u.*, row_number() OVER (ORDER BY u.priority DESC, u.run_at, u.id) AS ord FROM (
    (SELECT j.id, j.priority, j.run_at, j.entity
     FROM {{schema}}.jobs AS j
     WHERE tb.priority IS NOT NULL
       AND j.queue = g.q AND (j.tenant IS NOT NULL) IS FALSE
       AND j.priority = tb.priority AND (j.run_at, j.id) > (tb.run_at, tb.id)
       AND {{claimable}}
     ORDER BY j.priority DESC, j.run_at, j.id LIMIT g.lim)
  UNION ALL
    (SELECT j.id, j.priority, j.run_at, j.entity
     FROM {{schema}}.jobs AS j
     WHERE j.queue = g.q AND (j.tenant IS NOT NULL) IS FALSE
       AND j.priority <= coalesce(tb.priority::bigint - 1, 2147483647)
       AND {{claimable}}
     ORDER BY j.priority DESC, j.run_at, j.id LIMIT g.lim)
) AS u
ORDER BY u.priority DESC, u.run_at, u.id LIMIT g.lim

-- name: claim_capped_after
-- claim_capped after per-tenant bounds, for a claimer whose claims from the
-- front got expensive (internal/worker/keyset.go): while a long transaction
-- pins the vacuum horizon, every job claimed since the pin leaves a dead
-- entry at the front of its tenant's range of the tenant index, where
-- claim_capped's probe lands and its shares start reading, so each of its
-- claims reads all of them (claim's comment). The same visit, shares and
-- rounds, but a tenant's probe and shares start after its bound: the
-- claim-order key of the last job of that tenant the claimer took. Tenants
-- without a bound (none taken yet by this claimer) are read from their
-- front. Spare capacity is each visited tenant's (and the untenanted jobs')
-- next jobs after its shares, not the queue's front, so a tenant's jobs are
-- taken in its own order and none is left behind its bound by a later one.
-- Jobs that sort behind a tenant's bound (a higher priority, a hand-back, a
-- busy entity) wait for the claimer's periodic claim_capped. A statement of
-- its own: claim_capped's plan stays as small as it was (each execution
-- initialises every node of its plan, run or not: the bounds' branches made
-- a healthy claim 0.6 ms slower).
--   $1..$7 as claim_capped
--   $8 bound queue text[]   $9 bound tenant text[] ('' = the jobs without a tenant)
--   $10 bound priority int[]   $11 bound run_at timestamptz[]   $12 bound id bigint[]
--      (one element per bound, any order)
WITH RECURSIVE bounds AS (
    -- Per queue, its tenants' bounds in name order (arrays: the visit reads
    -- the next one by its place, ki), and the untenanted jobs' bound (u_*).
    SELECT b.queue,
           array_agg(b.tenant ORDER BY b.tenant) FILTER (WHERE b.tenant <> '') AS tenants,
           array_agg(b.priority ORDER BY b.tenant) FILTER (WHERE b.tenant <> '') AS priorities,
           array_agg(b.run_at ORDER BY b.tenant) FILTER (WHERE b.tenant <> '') AS run_ats,
           array_agg(b.id ORDER BY b.tenant) FILTER (WHERE b.tenant <> '') AS ids,
           max(b.priority) FILTER (WHERE b.tenant = '') AS u_priority,
           max(b.run_at) FILTER (WHERE b.tenant = '') AS u_run_at,
           max(b.id) FILTER (WHERE b.tenant = '') AS u_id
    FROM unnest($8::text[], $9::text[], $10::int[], $11::timestamptz[], $12::bigint[])
        AS b(queue, tenant, priority, run_at, id)
    GROUP BY b.queue
),
open_queues AS (
{{capped_queues}}
),
tenants (queue, tenant, n, cursor, wrapped, weighted, w, wsum, id, priority, run_at, entity, ok,
         ki, b_priority, b_run_at, b_id) AS (
    -- The first tenant after the cursor, else (wrapping) the first of all;
    -- w its weight (0 for an empty tenant: see tenant_probe), wsum the
    -- weights visited so far. The probe reads the tenant's first ready job
    -- in claim order (the index's order within a tenant) with it: ok when
    -- that job is claimable as it stands (due, of a kind taken, no entity),
    -- which makes it the tenant's first share without a second read of the
    -- tenant's jobs (candidates). With bounds, ki is the place of the first
    -- tenant after this one that has a bound (known_bound), and b_* this
    -- tenant's bound (NULL: none, read from its front).
    SELECT o.name, f0.tenant, 1, o.cursor, f0.wrapped, o.weighted, f.w, f.w,
           f0.id, f0.priority, f0.run_at, f0.entity, f.ok, f0.ki, f0.b_priority, f0.b_run_at, f0.b_id
    FROM open_queues AS o
    LEFT JOIN bounds AS bq ON bq.queue = o.name
    CROSS JOIN LATERAL (
        SELECT x.* FROM (
            -- Tenants are never '' (enqueue_job), so '' is "before all".
            (SELECT p.*, false AS wrapped, {{known_next}}
             FROM (SELECT o.name AS q, coalesce(o.cursor, '') AS after,
                          (SELECT min(u.i)::int FROM unnest(bq.tenants) WITH ORDINALITY AS u(tenant, i)
                           WHERE u.tenant > coalesce(o.cursor, '')) AS ki) AS pr
             CROSS JOIN LATERAL ({{known_bound}}) AS kb
             CROSS JOIN LATERAL ({{tenant_probe}}) AS p)
          UNION ALL
            (SELECT p.*, true, {{known_next}}
             FROM (SELECT o.name AS q, '' AS after, 1 AS ki WHERE o.cursor IS NOT NULL) AS pr
             CROSS JOIN LATERAL ({{known_bound}}) AS kb
             CROSS JOIN LATERAL ({{tenant_probe}}) AS p
             WHERE p.tenant <= o.cursor)
        ) AS x LIMIT 1
    ) AS f0
    CROSS JOIN LATERAL (
        SELECT CASE WHEN f0.id IS NULL THEN 0
                    WHEN o.weighted THEN coalesce((SELECT tw.weight FROM {{schema}}.tenant_weights AS tw
                                                   WHERE tw.queue = o.name AND tw.tenant = f0.tenant), 1)
                    ELSE 1 END AS w,
               coalesce(f0.entity IS NULL AND f0.run_at <= now() AND ($2::text[] IS NULL OR f0.kind = ANY ($2::text[])), false) AS ok
    ) AS f
  UNION ALL
    -- The next one, wrapping once, up to the cursor, until the weights
    -- visited reach $3 (without weights: $3 tenants), at most 4 × $3 steps
    -- (empty tenants weigh nothing).
    SELECT t.queue, nx.tenant, t.n + 1, t.cursor, nx.wrapped, t.weighted, nw.w, t.wsum + nw.w,
           nx.id, nx.priority, nx.run_at, nx.entity,
           coalesce(nx.entity IS NULL AND nx.run_at <= now() AND ($2::text[] IS NULL OR nx.kind = ANY ($2::text[])), false),
           nx.ki, nx.b_priority, nx.b_run_at, nx.b_id
    FROM tenants AS t
    LEFT JOIN bounds AS bq ON bq.queue = t.queue
    CROSS JOIN LATERAL (
        SELECT x.* FROM (
            -- The probe, then the stop past the cursor once wrapped (as a
            -- filter inside the probe it would read every tenant after it).
            (SELECT p.*, t.wrapped AS wrapped, {{known_next}}
             FROM (SELECT t.queue AS q, t.tenant AS after, t.ki AS ki) AS pr
             CROSS JOIN LATERAL ({{known_bound}}) AS kb
             CROSS JOIN LATERAL ({{tenant_probe}}) AS p
             WHERE NOT t.wrapped OR p.tenant <= t.cursor)
          UNION ALL
            (SELECT p.*, true, {{known_next}}
             FROM (SELECT t.queue AS q, '' AS after, 1 AS ki WHERE NOT t.wrapped AND t.cursor IS NOT NULL) AS pr
             CROSS JOIN LATERAL ({{known_bound}}) AS kb
             CROSS JOIN LATERAL ({{tenant_probe}}) AS p
             WHERE p.tenant <= t.cursor)
        ) AS x LIMIT 1
    ) AS nx
    CROSS JOIN LATERAL ({{step_weight}}) AS nw
    WHERE t.wsum < $3 AND t.n < 4 * $3
),
{{capped_visit}},
shares AS (
    -- claim_capped's shares, each tenant's jobs read after its bound (tb),
    -- the empty tenants (no id) left out.
    SELECT 0 AS rank, 1 AS ord, t.n, t.id, t.priority, t.run_at, t.entity
    FROM tenants AS t
    WHERE t.ok
  UNION ALL
    SELECT 0, (c.ord + t.w - 1) / t.w, t.n, c.id, c.priority, c.run_at, c.entity
    FROM tenants AS t
    CROSS JOIN visit AS v
    -- Weights of $3 visited or more: their first rounds fill the batch.
    CROSS JOIN LATERAL (SELECT t.queue AS q, t.tenant,
                               CASE WHEN v.weights >= $3 THEN t.w ELSE $6 * t.w END AS lim) AS g
    CROSS JOIN LATERAL (SELECT t.b_priority AS priority, t.b_run_at AS run_at, t.b_id AS id) AS tb
    CROSS JOIN LATERAL ({{tenant_jobs}}) AS c
    -- The only tenant with ready jobs (one visited, and the visit ran out
    -- of tenants before the batch's weights) leaves its jobs after the
    -- first to spare capacity, which reads them in the same order: a second
    -- read of the same jobs made a tenant draining alone cost two claims.
    WHERE t.id IS NOT NULL
      AND (NOT t.ok OR ((t.w > 1 OR v.weights < $3) AND NOT (v.tenants = 1 AND v.weights < $3)))
  UNION ALL
    SELECT 0, c.ord, 0, c.id, c.priority, c.run_at, c.entity
    FROM open_queues AS o
    LEFT JOIN bounds AS bq ON bq.queue = o.name
    CROSS JOIN LATERAL (SELECT o.name AS q, '' AS tenant, $6::int AS lim) AS g
    CROSS JOIN LATERAL (SELECT bq.u_priority AS priority, bq.u_run_at AS run_at, bq.u_id AS id) AS tb
    CROSS JOIN LATERAL ({{untenanted_jobs}}) AS c
),
spare_wanted AS (
    SELECT (SELECT count(DISTINCT COALESCE(s.entity, s.id::text)) FROM shares AS s) < $3 AS yes
),
candidates AS (
    SELECT * FROM shares
  UNION ALL
    -- Spare capacity, read only when the shares cannot fill the batch:
    -- each visited tenant's, and the untenanted jobs', next jobs after its
    -- bound in claim order.
    SELECT 1, 0, 0, c.id, c.priority, c.run_at, c.entity
    FROM tenants AS t
    CROSS JOIN LATERAL (SELECT t.queue AS q, t.tenant, $3::int AS lim) AS g
    CROSS JOIN LATERAL (SELECT t.b_priority AS priority, t.b_run_at AS run_at, t.b_id AS id) AS tb
    CROSS JOIN LATERAL ({{tenant_jobs}}) AS c
    WHERE t.id IS NOT NULL AND (SELECT s.yes FROM spare_wanted AS s)
  UNION ALL
    SELECT 1, 0, 0, c.id, c.priority, c.run_at, c.entity
    FROM open_queues AS o
    LEFT JOIN bounds AS bq ON bq.queue = o.name
    CROSS JOIN LATERAL (SELECT o.name AS q, '' AS tenant, $3::int AS lim) AS g
    CROSS JOIN LATERAL (SELECT bq.u_priority AS priority, bq.u_run_at AS run_at, bq.u_id AS id) AS tb
    CROSS JOIN LATERAL ({{untenanted_jobs}}) AS c
    WHERE (SELECT s.yes FROM spare_wanted AS s)
),
{{capped_tail}};
