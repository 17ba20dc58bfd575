-- The claims of a pool that concurrency or rate limits cover (strategies
-- ClaimWithinRoom and ClaimLimited, migration 009): the limits' locks, the
-- check whether they have room for a whole batch (then the plain claim in
-- claim.sql), and claim_limited, which takes only what they allow. limit_key
-- and limit_covers are read by limits.sql too.

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
    -- The jobs without a tenant and those with one: two ranges of
    -- jobs_ready in claim order (migration 027), a batch from each; the
    -- windows below and claim_pick order them together.
    CROSS JOIN (VALUES (false), (true)) AS r(tenanted)
    CROSS JOIN LATERAL (
        SELECT j.id, j.priority, j.run_at, j.entity, j.queue, j.kind, j.tenant, j.payload, j.limit_weight
        FROM {{schema}}.jobs AS j
        WHERE j.queue = q.name
          AND (j.tenant IS NOT NULL) = r.tenanted
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
    WHERE NOT {{queue_paused}}
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
