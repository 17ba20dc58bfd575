-- fragment: claimable
-- What makes the ready job j claimable, in every claim variant alike: due,
-- of a kind the claimer handles, and not of an entity that has a job running
-- (nor one another claimer is taking in this instant: the transaction-scoped
-- advisory lock; the unique running index is the final guard). Expanded
-- wherever {{claimable}} appears; $2 is the kinds filter (NULL = any).
(j.state = 'ready'
AND j.run_at <= now()
AND ($2::text[] IS NULL OR j.kind = ANY ($2::text[]))
AND (j.entity IS NULL OR (
      -- A scalar subquery, not NOT EXISTS: the planner may turn NOT EXISTS
      -- into a hashed subplan that scans every running row.
      (SELECT 1 FROM {{schema}}.jobs AS r
       WHERE r.state = 'running'
         AND COALESCE('e:' || r.entity, r.id::text) = 'e:' || j.entity
       LIMIT 1) IS NULL
      AND pg_try_advisory_xact_lock(hashtextextended({{schema_lit}} || '.entity.' || j.entity, 0)))))

-- fragment: claim_pick
-- The last CTE of every claim but the capped one: from the candidates in
-- CTE `picked` (id, priority, run_at, entity), at most one per entity and $3
-- in all, in claim order.
one_per_entity AS (
    -- Two ready jobs of one entity in a batch: keep the first in claim order.
    SELECT p.id FROM (
        SELECT c.id, c.priority, c.run_at,
               row_number() OVER (PARTITION BY COALESCE(c.entity, c.id::text)
                                  ORDER BY c.priority DESC, c.run_at, c.id) AS rn
        FROM picked AS c
    ) AS p
    WHERE p.rn = 1
    ORDER BY p.priority DESC, p.run_at, p.id
    LIMIT $3
)

-- fragment: claim_update
-- What claim_pick chose becomes running: the attempt counted, the lease and
-- a fresh fencing token set. The RETURNING order is what store.scanClaimed
-- reads.
UPDATE {{schema}}.jobs AS j
SET state            = 'running',
    attempts         = j.attempts + 1,
    locked_by        = $4,
    lease_token      = nextval('{{schema}}.lease_tokens'::regclass),
    lease_expires_at = now() + $5::bigint * interval '1 microsecond',
    attempted_at     = now()
WHERE j.id = ANY (ARRAY(SELECT o.id FROM one_per_entity AS o))
RETURNING j.id, j.queue, j.kind, j.payload, j.priority, j.attempts, j.max_attempts,
          j.run_at, j.created_at, j.attempted_at, j.lease_token, j.tenant, j.entity, j.unique_key, j.metadata,
          j.task_id IS NOT NULL AS durable

-- fragment: limit_key
-- The partition value under which limit l counts job j ('' when the limit
-- counts everything it covers as one; NULL: j has no value, l does not
-- limit it). See migration 009.
(CASE WHEN l.partition IS NULL THEN ''
      WHEN l.partition = 'tenant' THEN j.tenant
      WHEN l.partition = 'entity' THEN j.entity
      ELSE j.payload ->> substr(l.partition, 5) END)

-- fragment: limit_covers
-- Whether limit l covers job j: its queue or its kind.
(l.queue = j.queue OR l.kind = j.kind)

-- fragment: claim_gate
-- False only in a transaction where limit_room found no room for the batch
-- (the setting is transaction-local: unset, NULL or '', elsewhere): the
-- plain claim then takes nothing. A one-time filter, not a per-row one.
(current_setting('skiplock.limit_room', true) IS DISTINCT FROM 'false')

-- fragment: limit_use
-- The CTEs every limit check shares, after a CTE `names` (the limits'
-- names): lim (the limits, with cap: the most running jobs of a concurrency
-- limit, or starts within the window of a rate limit, per partition value),
-- clock (the time of these starts), running (the running set) and used
-- (what each limit counts per partition value now). Read under the limits'
-- locks (limit_locks), so the counts include every job claimed by their
-- previous holder.
lim AS (
    SELECT l.name, l.queue, l.kind, l.partition, l.rate, l.per, coalesce(l.concurrency, l.rate) AS cap
    FROM {{schema}}.limits AS l
    WHERE l.name IN (SELECT n.name FROM names AS n)
),
clock AS MATERIALIZED (
    -- The time of these starts, read after the locks are held (not now(),
    -- which is the transaction's start, before the wait for the locks).
    SELECT clock_timestamp() AS at
),
running AS MATERIALIZED (
    -- The running set, read once through the jobs_running index: it is
    -- small (at most every worker's concurrency). The always-true range on
    -- the index's key makes it an index scan: with a churned (bloated)
    -- jobs_running the planner otherwise prefers to scan every ready job.
    SELECT j.queue, j.kind, j.tenant, j.entity, j.payload
    FROM {{schema}}.jobs AS j
    WHERE j.state = 'running' AND COALESCE('e:' || j.entity, j.id::text) >= ''
),
used AS (
    -- What each limit counts per value: running jobs (concurrency limits),
    -- the weights of the starts within the window (rate limits:
    -- limit_starts, by its index).
    SELECT l.name, k.key, count(*) AS n
    FROM lim AS l
    JOIN running AS j ON l.rate IS NULL AND {{limit_covers}}
    CROSS JOIN LATERAL (SELECT {{limit_key}} AS key) AS k
    WHERE k.key IS NOT NULL
    GROUP BY l.name, k.key
  UNION ALL
    -- A start counts its weight (migration 014; 1 unless the job set one).
    SELECT l.name, s.key, sum(s.weight)
    FROM lim AS l
    CROSS JOIN clock AS t
    JOIN {{schema}}.limit_starts AS s ON s.name = l.name AND s.at > t.at - l.per
    WHERE l.rate IS NOT NULL
    GROUP BY l.name, s.key
)

-- name: claim
-- Batched claim: one statement per batch. Candidates are read per queue from
-- the partial ready index in claim order and locked with FOR NO KEY UPDATE
-- SKIP LOCKED (other claimers skip them; foreign-key checks on jobs.id are not
-- blocked). The attempt is counted here, so a job that kills its worker still
-- spends attempts. Lease expiry uses the database clock.
--
-- Each queue may carry a lower bound, the claim-order key (priority, run_at,
-- id) of the last job this pool claimed from it: the scan then starts after
-- the bound instead of at the front of the index. While a long transaction
-- pins the vacuum horizon, the front is where every job claimed since the pin
-- left an index entry that cannot be removed, so a claim from the front reads
-- all of them; a claim after the bound reads none. The bound is a key in
-- claim order, which sorts priority descending, so "after" is two index
-- ranges: the bound's priority after (run_at, id), then every lower priority.
-- Jobs that arrive behind a bound (a higher priority, a hand-back) are found
-- by the pool's periodic claim without bounds (internal/worker/keyset.go).
-- A NULL bound (or none: the arrays may be NULL) means the whole queue.
-- A pool that limits cover claims with this statement too when limit_room,
-- before it in the same transaction, found room for the whole batch.
--   $1 queues text[]   $2 kinds text[] (NULL = any)   $3 batch int
--   $4 worker id       $5 lease (microseconds)
--   $6 bound priority int[]   $7 bound run_at timestamptz[]   $8 bound id bigint[]
--      (one element per queue, in $1's order; NULL elements or arrays: no bound)
WITH picked AS (
    SELECT c.id, c.priority, c.run_at, c.entity
    FROM unnest($1::text[], $6::int[], $7::timestamptz[], $8::bigint[]) AS q(name, b_priority, b_run_at, b_id)
    CROSS JOIN LATERAL (
        -- The two ranges are read in order and only as far as the batch
        -- needs (Append under a Limit): the second is not touched when the
        -- first fills the batch. FOR ... SKIP LOCKED is not allowed on a
        -- UNION's branches themselves, hence the subqueries.
        SELECT a.* FROM (
            SELECT j.id, j.priority, j.run_at, j.entity
            FROM {{schema}}.jobs AS j
            WHERE j.queue = q.name
              AND j.priority = q.b_priority
              AND (j.run_at, j.id) > (q.b_run_at, q.b_id)
              AND {{claimable}}
            ORDER BY j.priority DESC, j.run_at, j.id
            LIMIT $3
            FOR NO KEY UPDATE SKIP LOCKED
        ) AS a
        UNION ALL
        SELECT b.* FROM (
            SELECT j.id, j.priority, j.run_at, j.entity
            FROM {{schema}}.jobs AS j
            WHERE j.queue = q.name
              -- Below the bound's priority; every priority without a bound.
              AND j.priority <= COALESCE(q.b_priority::bigint - 1, 2147483647)
              AND {{claimable}}
            ORDER BY j.priority DESC, j.run_at, j.id
            LIMIT $3
            FOR NO KEY UPDATE SKIP LOCKED
        ) AS b
        LIMIT $3
    ) AS c
    WHERE {{claim_gate}}
      AND NOT EXISTS (SELECT 1 FROM {{schema}}.queues AS p WHERE p.name = q.name AND p.paused)
),
{{claim_pick}}
{{claim_update}};

-- name: claim_limited
-- The claim of a pool whose work limits cover (migration 009): as claim,
-- from the front, but a job is taken only while every limit that covers it
-- has room: running jobs (a concurrency limit) or starts within the window
-- (a rate limit) of the limit's partition value, plus those this batch takes
-- before it, stay at most the limit's cap; a rate limit's starts are
-- recorded in limit_starts by this statement. Under a rate limit a job
-- counts its weight (jobs.limit_weight, NULL: 1): it is taken only while the
-- weights started within the window, plus those of the jobs this batch
-- takes before it, plus its own stay at most the rate; a job that does not
-- fit is skipped by the index scan (it stays ready, and lighter jobs behind
-- it that fit are taken), and one heavier than the rate is never taken.
-- Concurrency limits count one per running job, whatever its weight.
-- Exactness comes from the caller: it holds each limit's transaction-scoped
-- advisory lock (limit_locks) before this statement, in the same
-- transaction, so this statement's snapshot includes every job the previous
-- holder claimed; the running counts come from the jobs table itself, so a
-- crashed worker's slots come back when its leases are reaped. Partition
-- values already at their limit are skipped by the index scan, so one full
-- tenant's backlog does not hide the others' jobs from the batch.
--   $1..$5 as claim   $6 limit names text[]
WITH names AS (SELECT unnest($6::text[]) AS name),
{{limit_use}},
full_keys AS (
    SELECT u.name, u.key FROM used AS u JOIN lim AS l ON l.name = u.name
    WHERE u.n >= l.cap
),
candidates AS (
    SELECT c.id, c.priority, c.run_at, c.entity, c.queue, c.kind, c.tenant, c.payload, c.limit_weight
    FROM unnest($1::text[]) AS q(name)
    CROSS JOIN LATERAL (
        SELECT j.id, j.priority, j.run_at, j.entity, j.queue, j.kind, j.tenant, j.payload, j.limit_weight
        FROM {{schema}}.jobs AS j
        WHERE j.queue = q.name
          AND {{claimable}}
          AND NOT EXISTS (SELECT 1 FROM lim AS l JOIN full_keys AS f ON f.name = l.name
                          WHERE {{limit_covers}} AND f.key = {{limit_key}})
          -- A weighted job (the rest have weight 1, which the full values
          -- above account for) only where every rate limit covering it has
          -- room for its weight now, so heavy jobs that cannot start do not
          -- fill the batch's candidates ahead of light ones that can.
          AND (j.limit_weight IS NULL OR NOT EXISTS (
                SELECT 1 FROM lim AS l
                CROSS JOIN LATERAL (SELECT {{limit_key}} AS key) AS k
                LEFT JOIN used AS u ON u.name = l.name AND u.key = k.key
                WHERE l.rate IS NOT NULL AND {{limit_covers}} AND k.key IS NOT NULL
                  AND coalesce(u.n, 0) + j.limit_weight > l.cap))
        ORDER BY j.priority DESC, j.run_at, j.id
        LIMIT $3
        FOR NO KEY UPDATE SKIP LOCKED
    ) AS c
    WHERE NOT EXISTS (SELECT 1 FROM {{schema}}.queues AS p WHERE p.name = q.name AND p.paused)
),
over_limit AS (
    -- The candidates of a limit's value up to this one in claim order (their
    -- weights, under a rate limit) count on top of what the limit counts
    -- now; past the limit it stays ready. (A job refused by one limit still
    -- counts in another's order, and in its own limit's after it: the batch
    -- may take fewer than it could, never more than it may.)
    SELECT DISTINCT r.id FROM (
        SELECT j.id, l.cap,
               coalesce(u.n, 0) + sum(CASE WHEN l.rate IS NULL THEN 1 ELSE coalesce(j.limit_weight, 1) END)
                   OVER (PARTITION BY l.name, k.key ORDER BY j.priority DESC, j.run_at, j.id
                         ROWS UNBOUNDED PRECEDING) AS nth
        FROM candidates AS j
        JOIN lim AS l ON {{limit_covers}}
        CROSS JOIN LATERAL (SELECT {{limit_key}} AS key) AS k
        LEFT JOIN used AS u ON u.name = l.name AND u.key = k.key
        WHERE k.key IS NOT NULL
    ) AS r
    WHERE r.nth > r.cap
),
picked AS (
    SELECT c.id, c.priority, c.run_at, c.entity FROM candidates AS c
    WHERE c.id NOT IN (SELECT o.id FROM over_limit AS o)
),
{{claim_pick}},
claimed AS (
{{claim_update}}
),
started AS (
    -- The starts rate limits count, with their weights, written under
    -- their locks.
    INSERT INTO {{schema}}.limit_starts (name, key, at, weight)
    SELECT l.name, k.key, t.at, coalesce(c.limit_weight, 1)
    FROM claimed AS j
    JOIN candidates AS c ON c.id = j.id
    CROSS JOIN clock AS t
    JOIN lim AS l ON l.rate IS NOT NULL AND {{limit_covers}}
    CROSS JOIN LATERAL (SELECT {{limit_key}} AS key) AS k
    WHERE k.key IS NOT NULL
)
SELECT * FROM claimed;

-- name: claim_settings
-- First in every claim's pipeline (one implicit transaction): the planner
-- settings of the claim that follows. Also first before the reaper's and
-- the aging pass's statements (Store.keyedRow), which read the hot table
-- on their own.
-- No JIT: a claim's generic plan is estimated at tens to hundreds of
-- thousands (a LIMIT of a parameter counts as a tenth of the backlog), past
-- jit_above_cost, and compiling it took 0.1–1.3 s here, for a claim that
-- runs in 1–3 ms: a capped drain fell to 549 jobs/s (claim p50 68 ms) once
-- the plan cache switched to the generic plan.
-- No sequential scan: a claim's plan is cached per connection and made
-- again only when the table's statistics change, so a plan made while the
-- jobs table was small (a fresh queue, a quiet hour) is still run when it
-- holds a million rows, or a million dead versions under a pinned horizon.
-- On 20 rows the planner read the jobs to update, and the running job of an
-- entity, by scanning the table: under a pin, 150 ms a claim and a 2,000
-- jobs/s load down to 200/s until the next ANALYZE replanned
-- (TestHotPathPlansReachRowsByKey). Every table a claim reads has the
-- index it needs.
-- set_config(..., true), not SET LOCAL: the pipeline's implicit transaction
-- is not a transaction block, and SET LOCAL there, though it holds until
-- the Sync, logged a WARNING in the server's log for every claim.
SELECT set_config('jit', 'off', true), set_config('enable_seqscan', 'off', true);

-- name: claim_generic_plan
-- Second in the tenant-capped claim's pipeline: its generic plan, built once
-- per connection, instead of a custom plan per claim. Planning the capped
-- claim (a recursive CTE and three probes of the claimable fragment) took
-- 1.8 ms and more, at times far more (the planner reads the tenant index's
-- ends for the cursor's selectivity, through every dead entry there), for a
-- claim that runs in about 3 ms; the generic plan's shape is the custom
-- one's (index probes under LIMITs), checked by TestClaimPlansUsePartialIndex.
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
SELECT set_config('plan_cache_mode', 'force_generic_plan', true), set_config('enable_bitmapscan', 'off', true),
       set_config('enable_sort', 'off', true);

-- name: limit_locks
-- Takes the transaction-scoped advisory locks of the limits $1, in one
-- order (sorted by key) so two claimers never deadlock; claim_limited
-- follows in the same transaction.
SELECT count(pg_advisory_xact_lock(h.key))
FROM (SELECT DISTINCT hashtextextended({{schema_lit}} || '.limit.' || n, 0) AS key
      FROM unnest($1::text[]) AS n ORDER BY 1) AS h;

-- name: limit_room
-- Whether the limits $1, all of them concurrency limits, have room for a
-- whole batch of $2 wherever it lands: in every partition value, what runs
-- now plus $2 stays within the cap (a value with nothing running counts 0,
-- so a cap below $2 has no room). Then no job of the batch can exceed a
-- limit, and the claimer takes it with the plain claim, which costs little
-- more than an unlimited one. Run under the limits' locks (limit_locks),
-- between them and that claim, in one implicit transaction: it records its
-- answer in the transaction-local setting skiplock.limit_room, which the
-- plain claim reads (claim_gate), so no room means the claim takes nothing
-- and the claimer uses claim_limited instead. A rate limit has no room
-- here: only claim_limited records starts.
--   $1 limit names text[]   $2 batch int
WITH names AS (SELECT unnest($1::text[]) AS name),
{{limit_use}}
-- A limit without partitions counts the running jobs it covers (a plain
-- count: grouping the running set by a key that is '' for every row sorted
-- it, most of this statement's time at a thousand running jobs); a
-- partitioned one takes its fullest value from used.
SELECT set_config('skiplock.limit_room', (NOT EXISTS (
    SELECT 1 FROM lim AS l
    WHERE l.rate IS NOT NULL
       OR $2 + CASE WHEN l.partition IS NULL
                    THEN (SELECT count(*) FROM running AS j WHERE {{limit_covers}})
                    ELSE (SELECT coalesce(max(u.n), 0) FROM used AS u WHERE u.name = l.name) END > l.cap))::text, true) = 'true';

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
-- tenant_jobs for the jobs of queue g.q without a tenant (their own index).
SELECT u.*, row_number() OVER (ORDER BY u.priority DESC, u.run_at, u.id) AS ord FROM (
    (SELECT j.id, j.priority, j.run_at, j.entity
     FROM {{schema}}.jobs AS j
     WHERE tb.priority IS NOT NULL
       AND j.queue = g.q AND j.tenant IS NULL
       AND j.priority = tb.priority AND (j.run_at, j.id) > (tb.run_at, tb.id)
       AND {{claimable}}
     ORDER BY j.priority DESC, j.run_at, j.id LIMIT g.lim)
  UNION ALL
    (SELECT j.id, j.priority, j.run_at, j.entity
     FROM {{schema}}.jobs AS j
     WHERE j.queue = g.q AND j.tenant IS NULL
       AND j.priority <= coalesce(tb.priority::bigint - 1, 2147483647)
       AND {{claimable}}
     ORDER BY j.priority DESC, j.run_at, j.id LIMIT g.lim)
) AS u
ORDER BY u.priority DESC, u.run_at, u.id LIMIT g.lim

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
    WHERE NOT EXISTS (SELECT 1 FROM {{schema}}.queues AS p WHERE p.name = q.name AND p.paused)

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
best AS (
    -- Shares in rounds: every visited tenant's first job (in visit order),
    -- then every one's second, and so on, so each visited tenant has a
    -- job in the batch while there are at most $3 of them, whatever the
    -- priorities across tenants (priority orders a tenant's own jobs); then
    -- spare capacity in claim order. A job listed both as a share and as
    -- spare keeps its share; one job per entity per batch (the unique
    -- running index is the guard).
    SELECT d.id FROM (
        SELECT c.id, c.rank, c.ord, c.n, c.priority, c.run_at,
               row_number() OVER (PARTITION BY COALESCE(c.entity, c.id::text)
                                  ORDER BY c.rank, c.ord, c.n, c.priority DESC, c.run_at, c.id) AS rn
        FROM candidates AS c
    ) AS d
    WHERE d.rn = 1
    ORDER BY d.rank, d.ord, d.n, d.priority DESC, d.run_at, d.id
    LIMIT $3
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
{{claim_pick}},
claimed AS (
{{claim_update}}
)
SELECT c.*, v.tenant, v.cut FROM claimed AS c LEFT JOIN visited AS v ON v.queue = c.queue
UNION ALL
SELECT NULL, v.queue, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, v.tenant, v.cut
FROM visited AS v
WHERE NOT EXISTS (SELECT 1 FROM claimed AS c WHERE c.queue = v.queue)

-- name: claim_capped
-- Tenant-capped claim with round-robin fair share: no tenant takes more than
-- $6 jobs of one batch while others have work, and every tenant with ready
-- jobs gets its share within ceil(tenants / batch) claims. Each claim
-- visits the next $3 tenants in name order after the claimer's cursor ($7,
-- per queue: the last tenant its previous claim visited), wrapping around,
-- with a skip scan over the per-tenant ready index: one probe per tenant,
-- however deep one tenant's burst is and however many tenants there are, so
-- the claim's cost does not grow with the number of ready tenants. Each
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
tenants (queue, tenant, n, cursor, wrapped, weighted, w, wsum, id, priority, run_at, entity, ok) AS (
    -- The first tenant after the cursor, else (wrapping) the first of all;
    -- w its weight, wsum the weights visited so far. The probe reads the
    -- tenant's first ready job in claim order (the index's order within a
    -- tenant) with it: ok when that job is claimable as it stands (due, of
    -- a kind taken, no entity), which makes it the tenant's first share
    -- without a second read of the tenant's jobs (candidates).
    SELECT o.name, f.tenant, 1, o.cursor, f.wrapped, o.weighted, f.w, f.w,
           f.id, f.priority, f.run_at, f.entity, f.ok
    FROM open_queues AS o
    CROSS JOIN LATERAL (
        SELECT x.* FROM (
            -- Tenants are never '' (enqueue_job), so '' is "before all":
            -- a plain range, an index condition (an OR would be a filter).
            (SELECT j.tenant, false AS wrapped, j.id, j.priority, j.run_at, j.entity, j.kind
             FROM {{schema}}.jobs AS j
             WHERE j.state = 'ready' AND j.tenant IS NOT NULL AND j.queue = o.name
               AND j.tenant > coalesce(o.cursor, '')
             ORDER BY j.tenant, j.priority DESC, j.run_at, j.id LIMIT 1)
          UNION ALL
            (SELECT j.tenant, true, j.id, j.priority, j.run_at, j.entity, j.kind
             FROM {{schema}}.jobs AS j
             WHERE o.cursor IS NOT NULL AND j.state = 'ready' AND j.tenant IS NOT NULL AND j.queue = o.name
               AND j.tenant <= o.cursor
             ORDER BY j.tenant, j.priority DESC, j.run_at, j.id LIMIT 1)
        ) AS x LIMIT 1
    ) AS f0
    CROSS JOIN LATERAL (
        SELECT f0.tenant, f0.wrapped, CASE WHEN o.weighted THEN coalesce((SELECT tw.weight FROM {{schema}}.tenant_weights AS tw
                                                                   WHERE tw.queue = o.name AND tw.tenant = f0.tenant), 1)
                                          ELSE 1 END AS w,
               f0.id, f0.priority, f0.run_at, f0.entity,
               (f0.entity IS NULL AND f0.run_at <= now() AND ($2::text[] IS NULL OR f0.kind = ANY ($2::text[]))) AS ok
    ) AS f
  UNION ALL
    -- The next one, wrapping once, up to the cursor, until the weights
    -- visited reach $3 (without weights: $3 tenants).
    SELECT t.queue, nx.tenant, t.n + 1, t.cursor, nx.wrapped, t.weighted, nw.w, t.wsum + nw.w,
           nx.id, nx.priority, nx.run_at, nx.entity,
           (nx.entity IS NULL AND nx.run_at <= now() AND ($2::text[] IS NULL OR nx.kind = ANY ($2::text[])))
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
    WHERE t.wsum < $3
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
        WHERE j.queue = o.name AND j.tenant IS NULL
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
        SELECT j.id, j.priority, j.run_at, j.entity
        FROM {{schema}}.jobs AS j
        WHERE j.queue = o.name
          AND {{claimable}}
        ORDER BY j.priority DESC, j.run_at, j.id
        LIMIT $3
    ) AS c
    WHERE (SELECT count(DISTINCT COALESCE(s.entity, s.id::text)) FROM shares AS s) < $3
),
{{capped_tail}};

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

-- name: ready_queues
-- The queues that hold ready jobs (due or scheduled). Client.Drain only: a
-- test helper's convenience, not a hot path.
SELECT COALESCE(array_agg(DISTINCT j.queue ORDER BY j.queue), '{}')
FROM {{schema}}.jobs AS j
WHERE j.state = 'ready';

-- name: make_due
-- Makes scheduled ready jobs (and retries waiting out their backoff) due now,
-- for Client.Drain with IncludeScheduled. Jobs in $3 (snoozed during this
-- drain) keep their schedule, so a handler that always snoozes cannot loop.
--   $1 queues text[]   $2 kinds text[] (NULL = any)   $3 ids to leave alone
UPDATE {{schema}}.jobs AS j
SET run_at = now()
WHERE j.state = 'ready' AND j.run_at > now()
  AND j.queue = ANY ($1::text[])
  AND ($2::text[] IS NULL OR j.kind = ANY ($2::text[]))
  AND j.id <> ALL ($3::bigint[]);
