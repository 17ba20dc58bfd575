-- The tenant-capped claim from the front (strategy ClaimCapped): round-robin
-- fair share over a pool's tenants, and the fragments it shares with
-- claim_capped_after.sql.

-- name: claim_capped_settings
-- Second in the tenant-capped claim's pipeline, after claim_settings, which
-- forces every claim's generic plan, built once per connection, instead of
-- a custom plan per claim (for the capped claim first: planning the capped
-- claim (a recursive CTE and three probes of the claimable fragment) took
-- 1.8 ms and more, at times far more (the planner reads the tenant index's
-- ends for the cursor's selectivity, through every dead entry there), for a
-- claim that runs in about 3 ms); the generic plan's shape is the custom
-- one's (index probes under LIMITs), checked by TestClaimPlansUsePartialIndex.
-- What this statement adds are the planner settings that generic plan needs:
-- No bitmap scans: the generic plan is made from statistics that count the
-- few ready rows of a healthy queue, and with them a bitmap scan of the
-- queue's whole ready index and a sort of the one row it expects looked
-- cheaper than a probe of the tenant index in order. While a pin kept
-- 21,000 dead entries in that index, each of a claim's 49 probes read all
-- of them (a bitmap scan never stops at the first live entry, nor skips a
-- bound): 3.6 ms a probe, 290 ms a claim, and a 2,000 jobs/s load down to
-- 115/s six seconds into the pin (auto_explain, 2026-11-27). A claim reads
-- indexes in order under a LIMIT, which only an index scan does.
-- No sort where an index gives the order: with bitmap scans off, the same
-- statistics made the plan read a probe's tenants through jobs_ready (a
-- plain index scan, the tenant as a filter) and sort the row it expected:
-- 9 ms a probe, 474 ms a claim ten seconds into a pin. With sorts costed
-- out, an ordered scan of the tenant index wins; the sorts that have no
-- alternative (the shares' rounds, the batch's order) stay.
-- set_config as in claim_settings.
SELECT set_config('enable_bitmapscan', 'off', true), set_config('enable_sort', 'off', true);

-- fragment: step_weight
-- The weight w of the tenant nx a capped visit's step (from t) reached: its
-- tenant_weights row in a weighted queue, else 1; 0 for a tenant without a
-- job (claim_capped_after's empty tenants), which adds nothing to the
-- visit's weights.
SELECT CASE WHEN nx.id IS NULL THEN 0
            WHEN t.weighted THEN coalesce((SELECT tw.weight FROM {{schema}}.tenant_weights AS tw
                                           WHERE tw.queue = t.queue AND tw.tenant = nx.tenant), 1)
            ELSE 1 END AS w

-- fragment: capped_queues
-- The capped claims' first CTE, open_queues: the queues of $1 that are not
-- paused, with their cursors ($7) and whether they have tenant weights
-- (weighted: migration 013; read per visited tenant only then).
    SELECT q.name, q.cursor,
           EXISTS (SELECT 1 FROM {{schema}}.tenant_weights AS tw WHERE tw.queue = q.name) AS weighted
    FROM unnest($1::text[], $7::text[]) AS q(name, cursor)
    WHERE NOT {{queue_paused}}

-- fragment: capped_visit
-- The capped claims' CTEs after the visit (tenants): visited, the last tenant
-- visited per queue (the next claim's cursor), and visit, how many tenants
-- with jobs the visit reached and their weights.
visited AS (
    -- Per queue, the last tenant visited: the next claim's cursor; cut when
    -- the visit stopped at its step limit before its weights reached $3
    -- (claim_capped_after's empty tenants weigh nothing), so tenants after
    -- the cursor were not visited.
    SELECT DISTINCT ON (t.queue) t.queue, t.tenant, t.n >= 4 * $3 AND t.wsum < $3 AS cut
    FROM tenants AS t ORDER BY t.queue, t.n DESC
),
visit AS (
    -- How many tenants with jobs the visit reached (claim_capped_after's
    -- visit also passes empty ones), and their weights.
    SELECT count(t.id) AS tenants, coalesce(sum(t.w), 0) AS weights FROM tenants AS t
)

-- fragment: capped_tail
-- The capped claims' CTEs after their candidates: the best $3 (shares in
-- rounds, then spare capacity), locked and claimed, each row with its
-- queue's new cursor and whether its visit was cut short (visited). A
-- queue whose visit claimed nothing gets a row with its new cursor and no
-- job (a NULL id): its cursor moves all the same. A visit of
-- claim_capped_after steps through empty tenants (4 × $3 at most), and a
-- cursor left where it was made each claim visit the same empty ones again
-- while the jobs waited further on (a pinned 1,000-tenant queue fed
-- round-robin: claims that found nothing for 100 ms, then jobs 330 ms old).
firsts AS (
    -- Whether the batch is the visit's first jobs as they stand: every
    -- visited tenant with a job had its first one claimable (ok: due, of a
    -- kind taken, no entity), none weighs more than 1, there are $3 of them
    -- or more, and no job without a tenant is among the shares. The rounds
    -- below then give those first jobs in visit order and nothing else
    -- (each tenant's first round is its first job; the shares of later
    -- rounds and spare capacity are not read), so best takes them so,
    -- without the shares' window and sorts: the many small tenants of a
    -- SaaS queue, 1.5-2 ms of a capped claim of 250 that took 10-15 alone,
    -- and the capped drain 7 % faster at the median of ten rounds (20,000
    -- tenants × 5 jobs, cap 5; issue 40).
    SELECT coalesce(bool_and(t.ok OR t.id IS NULL) AND bool_and(t.w <= 1)
                    AND count(*) FILTER (WHERE t.ok) >= $3, false)
           AND NOT EXISTS (SELECT 1 FROM shares AS s WHERE s.n = 0) AS yes
    FROM tenants AS t
),
best AS (
    SELECT f.id FROM (
        SELECT t.id FROM tenants AS t
        WHERE t.ok
        ORDER BY t.n, t.priority DESC, t.run_at, t.id
        LIMIT $3
    ) AS f
    WHERE (SELECT x.yes FROM firsts AS x)
  UNION ALL
    -- Shares in rounds: every visited tenant's first job (in visit order),
    -- then every one's second, and so on, so each visited tenant has a
    -- job in the batch while there are at most $3 of them, whatever the
    -- priorities across tenants (priority orders a tenant's own jobs); then
    -- spare capacity in claim order. A job listed both as a share and as
    -- spare keeps its share; one job per entity per batch (the unique
    -- running index is the guard).
    (SELECT d.id FROM (
        SELECT c.id, c.rank, c.ord, c.n, c.priority, c.run_at,
               row_number() OVER (PARTITION BY COALESCE(c.entity, c.id::text)
                                  ORDER BY c.rank, c.ord, c.n, c.priority DESC, c.run_at, c.id) AS rn
        FROM candidates AS c
    ) AS d
    WHERE d.rn = 1 AND NOT (SELECT x.yes FROM firsts AS x)
    ORDER BY d.rank, d.ord, d.n, d.priority DESC, d.run_at, d.id
    LIMIT $3)
),
picked AS (
    -- Locked, and read from the newest row version (re-checked: still ready),
    -- by primary key. The generic plan, made from statistics that count a
    -- healthy queue's few ready rows, read them through jobs_ready instead:
    -- as IN (SELECT ...) a join of best to a scan of every ready row, as
    -- = ANY a scan of all of jobs_ready with the ids as a filter, through
    -- every dead entry a pin left there (105 and 30 ms a claim under a pin,
    -- auto_explain 2026-11-27). coalesce() keeps the condition from
    -- matching the partial indexes' predicate, so only the key reaches them.
    SELECT j.id, j.priority, j.run_at, j.entity FROM {{schema}}.jobs AS j
    WHERE j.id = ANY (ARRAY(SELECT b.id FROM best AS b)) AND coalesce(j.state, '') = 'ready'
    FOR NO KEY UPDATE SKIP LOCKED
),
one_per_entity AS (
    -- What claim_update makes running: every row picked. best took at most
    -- one job per entity and $3 in all, and picked is a subset of best, so
    -- claim_pick's window and sort over these rows (the other claims' last
    -- CTE) changed nothing here and cost about 0.5 ms of a 10.8 ms claim
    -- of 250 jobs (auto_explain, issue 40).
    SELECT p.id FROM picked AS p
),
claimed AS (
{{claim_update}}
)
SELECT c.*, v.tenant, v.cut FROM claimed AS c LEFT JOIN visited AS v ON v.queue = c.queue
UNION ALL
SELECT NULL, v.queue, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, v.tenant, v.cut
FROM visited AS v
WHERE NOT EXISTS (SELECT 1 FROM claimed AS c WHERE c.queue = v.queue)

-- name: claim_capped
-- Tenant-capped claim with round-robin fair share: no tenant takes more than
-- $6 jobs of one batch while others have work, and every tenant with ready
-- jobs gets its share within ceil(tenants / batch) claims. Each claim
-- visits the next $3 tenants in name order after the claimer's cursor ($7,
-- per queue: the last tenant its previous claim visited), wrapping around,
-- through the per-tenant ready index: one ordered read of the next 8 × $3
-- ready jobs there, which finds every tenant among them (all $3 when each
-- has a few jobs), then a skip scan from the last one found (one probe per
-- tenant, however deep one tenant's burst is), so the claim's cost does not
-- grow with the number of ready tenants nor with a tenant's backlog. Each
-- visited tenant contributes its first $6 jobs in claim order, and jobs
-- without a tenant form one more group (read from their own partial index).
-- Those shares rank first, taken in rounds (every visited tenant's first
-- job, then every one's second, ...), so each visited tenant gets a job
-- while a batch has room for one each; the queue's next jobs in plain
-- claim order rank after them as spare capacity, so a batch the shares do not fill still goes
-- to whoever has work (a lone tenant is not throttled to $6 per claim). The
-- best $3, shares first, are then locked with SKIP LOCKED (re-checked
-- against the newest row version) and claimed. Each row returned carries its
-- queue's new cursor (the last tenant visited) and whether the visit was cut
-- short; a queue that claimed nothing returns one row without a job.
--   $1..$5 as claim, $6 cap per tenant, $7 cursor text[] (one per queue in
--   $1's order; NULL: from the first tenant)
WITH RECURSIVE open_queues AS (
{{capped_queues}}
),
tenants (queue, tenant, n, cursor, wrapped, weighted, w, wsum, id, priority, run_at, entity, ok, last) AS (
    -- The tenants after the cursor, in one read of the tenant index: the
    -- first job (in claim order, the index's order within a tenant) of
    -- each tenant among the queue's next 8 × $3 ready jobs, up to $3
    -- tenants; else, when no tenant follows the cursor, wrapping, the first
    -- tenant of all. w each one's weight, wsum the weights visited so far,
    -- kept while the weights before each are under $3. ok when that first
    -- job is claimable as it stands (due, of a kind taken, no entity),
    -- which makes it the tenant's first share without a second read of the
    -- tenant's jobs (candidates). Tenants with few jobs each (the many small
    -- tenants of a SaaS queue) are all visited by this read: a probe per
    -- tenant (the steps below) cost 10-12 us each, 2.2 ms for 150 tenants
    -- of five jobs, the read 0.4 ms. Deeper tenants leave fewer found; the
    -- steps probe on from the last one (last). Tenants are never ''
    -- (enqueue_job), so '' is "before all": a plain range, an index
    -- condition (an OR would be a filter).
    SELECT o.name, f.tenant, f.n, o.cursor, f.wrapped, o.weighted, f.w, f.wsum,
           f.id, f.priority, f.run_at, f.entity, f.ok, f.last
    FROM open_queues AS o
    CROSS JOIN LATERAL (
        SELECT r.*, row_number() OVER v AS n, sum(r.w) OVER v AS wsum,
               row_number() OVER v = count(*) OVER () AS last
        FROM (
            SELECT d.tenant, d.wrapped, d.id, d.priority, d.run_at, d.entity,
                   CASE WHEN o.weighted THEN coalesce((SELECT tw.weight FROM {{schema}}.tenant_weights AS tw
                                                       WHERE tw.queue = o.name AND tw.tenant = d.tenant), 1)
                        ELSE 1 END AS w,
                   (d.entity IS NULL AND d.run_at <= now() AND ($2::text[] IS NULL OR d.kind = ANY ($2::text[]))) AS ok
            FROM (
                (SELECT DISTINCT ON (s.tenant) s.*, false AS wrapped FROM (
                     SELECT j.tenant, j.id, j.priority, j.run_at, j.entity, j.kind
                     FROM {{schema}}.jobs AS j
                     WHERE j.state = 'ready' AND j.tenant IS NOT NULL AND j.queue = o.name
                       AND j.tenant > coalesce(o.cursor, '')
                     ORDER BY j.tenant, j.priority DESC, j.run_at, j.id
                     LIMIT 8 * $3
                 ) AS s
                 ORDER BY s.tenant, s.priority DESC, s.run_at, s.id
                 LIMIT $3)
              UNION ALL
                (SELECT j.tenant, j.id, j.priority, j.run_at, j.entity, j.kind, true
                 FROM {{schema}}.jobs AS j
                 WHERE o.cursor IS NOT NULL AND j.state = 'ready' AND j.tenant IS NOT NULL AND j.queue = o.name
                   AND j.tenant <= o.cursor
                   AND NOT EXISTS (SELECT 1 FROM {{schema}}.jobs AS a
                                   WHERE a.state = 'ready' AND a.tenant IS NOT NULL AND a.queue = o.name
                                     AND a.tenant > o.cursor)
                 ORDER BY j.tenant, j.priority DESC, j.run_at, j.id LIMIT 1)
            ) AS d
        ) AS r
        -- The two reads exclude each other: one of them gives rows.
        WINDOW v AS (ORDER BY r.tenant)
    ) AS f
    WHERE f.wsum - f.w < $3
  UNION ALL
    -- The next one, wrapping once, up to the cursor, until the weights
    -- visited reach $3 (without weights: $3 tenants).
    SELECT t.queue, nx.tenant, t.n + 1, t.cursor, nx.wrapped, t.weighted, nw.w, t.wsum + nw.w,
           nx.id, nx.priority, nx.run_at, nx.entity,
           (nx.entity IS NULL AND nx.run_at <= now() AND ($2::text[] IS NULL OR nx.kind = ANY ($2::text[]))), true
    FROM tenants AS t
    CROSS JOIN LATERAL (
        SELECT x.* FROM (
            -- The probe, then the stop past the cursor once wrapped (as a
            -- filter inside the probe it would read every tenant after it).
            (SELECT p.tenant, t.wrapped AS wrapped, p.id, p.priority, p.run_at, p.entity, p.kind FROM (
                 SELECT j.tenant, j.id, j.priority, j.run_at, j.entity, j.kind FROM {{schema}}.jobs AS j
                 WHERE j.state = 'ready' AND j.tenant IS NOT NULL AND j.queue = t.queue AND j.tenant > t.tenant
                 ORDER BY j.tenant, j.priority DESC, j.run_at, j.id LIMIT 1) AS p
             WHERE NOT t.wrapped OR p.tenant <= t.cursor)
          UNION ALL
            (SELECT j.tenant, true, j.id, j.priority, j.run_at, j.entity, j.kind FROM {{schema}}.jobs AS j
             WHERE NOT t.wrapped AND t.cursor IS NOT NULL
               AND j.state = 'ready' AND j.tenant IS NOT NULL AND j.queue = t.queue AND j.tenant <= t.cursor
             ORDER BY j.tenant, j.priority DESC, j.run_at, j.id LIMIT 1)
        ) AS x LIMIT 1
    ) AS nx
    CROSS JOIN LATERAL ({{step_weight}}) AS nw
    WHERE t.wsum < $3 AND t.last
),
{{capped_visit}},
shares AS (
    -- Shares: each visited tenant's first $6 × w jobs in claim order, with
    -- the tenant's turn (n: its place in the visit; jobs without a tenant go
    -- first) and the round each job falls in (ord: a tenant of weight w
    -- has w jobs in each round). A tenant whose first job the visit found
    -- claimable has that job as its first share, and its jobs are read
    -- again only when it is to have more than one: a weight above 1, or
    -- fewer weights visited than the batch holds, unless it was the only
    -- tenant to visit (below). A job listed twice is one candidate (best).
    SELECT 0 AS rank, 1 AS ord, t.n, t.id, t.priority, t.run_at, t.entity
    FROM tenants AS t
    WHERE t.ok
  UNION ALL
    SELECT 0, (c.ord + t.w - 1) / t.w, t.n, c.id, c.priority, c.run_at, c.entity
    FROM tenants AS t
    CROSS JOIN visit AS v
    CROSS JOIN LATERAL (
        SELECT j.id, j.priority, j.run_at, j.entity,
               row_number() OVER (ORDER BY j.priority DESC, j.run_at, j.id) AS ord
        FROM {{schema}}.jobs AS j
        WHERE j.queue = t.queue AND j.tenant = t.tenant
          AND {{claimable}}
        ORDER BY j.priority DESC, j.run_at, j.id
        -- Weights of $3 visited or more: their first rounds fill the batch.
        LIMIT CASE WHEN v.weights >= $3 THEN t.w ELSE $6 * t.w END
    ) AS c
    -- The only tenant with ready jobs (one visited, and the visit ran out
    -- of tenants before the batch's weights) leaves its jobs after the
    -- first to spare capacity, which reads them in the same order: a second
    -- read of the same jobs made a tenant draining alone cost two claims.
    WHERE NOT t.ok
       OR ((t.w > 1 OR v.weights < $3) AND NOT (v.tenants = 1 AND v.weights < $3))
  UNION ALL
    SELECT 0, c.ord, 0, c.id, c.priority, c.run_at, c.entity
    FROM open_queues AS o
    CROSS JOIN LATERAL (
        SELECT j.id, j.priority, j.run_at, j.entity,
               row_number() OVER (ORDER BY j.priority DESC, j.run_at, j.id) AS ord
        FROM {{schema}}.jobs AS j
        WHERE j.queue = o.name AND (j.tenant IS NOT NULL) IS FALSE
          AND {{claimable}}
        ORDER BY j.priority DESC, j.run_at, j.id
        LIMIT $6
    ) AS c
),
candidates AS (
    SELECT * FROM shares
  UNION ALL
    -- Spare capacity: the queue's next jobs in claim order, any tenant.
    -- Read only when the shares cannot fill the batch (best ranks spare
    -- after every share, so it would take none of them): with a batch's
    -- worth of tenants visited, this read was as long as a plain claim's.
    SELECT 1, 0, 0, c.id, c.priority, c.run_at, c.entity
    FROM open_queues AS o
    CROSS JOIN LATERAL (
        -- The jobs without a tenant and those with one: two ranges of
        -- jobs_ready in claim order (migration 027), merged.
        SELECT m.* FROM (VALUES (false), (true)) AS r(tenanted)
        CROSS JOIN LATERAL (
            SELECT j.id, j.priority, j.run_at, j.entity
            FROM {{schema}}.jobs AS j
            WHERE j.queue = o.name AND (j.tenant IS NOT NULL) = r.tenanted
              AND {{claimable}}
            ORDER BY j.priority DESC, j.run_at, j.id
            LIMIT $3
        ) AS m
        ORDER BY m.priority DESC, m.run_at, m.id
        LIMIT $3
    ) AS c
    WHERE (SELECT count(DISTINCT COALESCE(s.entity, s.id::text)) FROM shares AS s) < $3
),
{{capped_tail}};
