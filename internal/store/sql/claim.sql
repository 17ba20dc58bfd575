-- The plain claim (Store.Claim, strategy ClaimPlain) and what every claim
-- shares: the claimable condition, the pick of one job per entity, the update
-- that makes a job running, and the settings first in every claim's pipeline.
-- The other strategies have a file each: claim_limited.sql, claim_capped.sql,
-- claim_capped_after.sql (fragments are shared across files).

-- fragment: claimable
-- What makes the ready job j claimable, in every claim variant alike: due,
-- of a kind the claimer handles, and not of an entity that has a job running
-- (nor one another claimer is taking in this instant: the transaction-scoped
-- advisory lock; the unique running index is the final guard). Expanded
-- wherever {{claimable}} appears; $2 is the kinds filter (NULL = any).
-- Its parts claim_due, entity_running and queue_paused are fragments of
-- their own so that `job explain` (explain.sql) tests each with the very
-- text the claim uses.
(j.state = 'ready'
AND {{claim_due}}
AND ($2::text[] IS NULL OR j.kind = ANY ($2::text[]))
AND (j.entity IS NULL OR (
      -- A scalar subquery, not NOT EXISTS: the planner may turn NOT EXISTS
      -- into a hashed subplan that scans every running row.
      (SELECT 1 FROM {{schema}}.jobs AS r
       WHERE {{entity_running}}
       LIMIT 1) IS NULL
      AND pg_try_advisory_xact_lock(hashtextextended({{schema_lit}} || '.entity.' || j.entity, 0)))))

-- fragment: claim_due
-- The ready job j is due: its run time has come.
j.run_at <= now()

-- fragment: entity_running
-- The running job r holds the entity of job j (by the jobs_running index's
-- expression; j.entity is not NULL where this is used).
r.state = 'running'
         AND COALESCE('e:' || r.entity, r.id::text) = 'e:' || j.entity

-- fragment: queue_paused
-- The queue q.name is paused: no claim takes its jobs.
EXISTS (SELECT 1 FROM {{schema}}.queues AS p WHERE p.name = q.name AND p.paused)

-- fragment: claim_pick
-- The last CTE of the plain and the limited claim: from the candidates in
-- CTE `picked` (id, priority, run_at, entity), at most one per entity and $3
-- in all, in claim order. The capped claims pick one per entity before
-- they lock (capped_tail's best), and name their picked rows
-- one_per_entity themselves.
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
-- What one_per_entity holds becomes running (claim_pick's choice, or a capped
-- claim's picked rows).
UPDATE {{schema}}.jobs AS j
{{claim_set}}
WHERE j.id = ANY (ARRAY(SELECT o.id FROM one_per_entity AS o))
{{claim_returning}}

-- fragment: claim_set
-- How a job j becomes running, in every claim and the hand-off alike: the
-- attempt counted, the lease and a fresh fencing token set ($4 the worker
-- id, $5 the lease in microseconds). The token is the sequence's next value
-- times 16 plus the row's generation plus one (jobs_keyed's -1 is 0, the
-- ring's 0..2 are 1..3): as fresh and as increasing as the sequence, and it
-- tells the fenced writes which partition holds the row (lease_gen below).
-- A running row never changes partition (only ready rows leave a generation:
-- ring_evict), so the generation a token names stays true while it is held.
SET state            = 'running',
    attempts         = j.attempts + 1,
    locked_by        = $4,
    lease_token      = nextval('{{schema}}.lease_tokens'::regclass) * 16 + (j.gen + 1),
    lease_expires_at = now() + $5::bigint * interval '1 microsecond',
    attempted_at     = now()

-- fragment: lease_gen
-- The partition of the row a lease's token l.token was issued for (claim_set
-- wrote it in the token's low four bits), as a condition on the row j: the
-- batched fenced writes (lease.sql) reach each lease's row through a nested
-- loop, and with this condition PostgreSQL prunes the partitions per lease,
-- so a lease probes the one primary key that holds its row instead of every
-- partition's (a no-op drain's completions: 28.0 against 19.6 µs a job of
-- server time, pg_stat_statements, 2026-12-02). A token that names another
-- partition matches nothing, as a token that is not the row's does. Four
-- bits hold jobs_keyed and fifteen generations (ring_size() is 3;
-- TestLeaseTokenNamesThePartition holds the ring to that bound).
j.gen = ((l.token & 15) - 1)::smallint

-- fragment: claim_returning
-- What a claim returns of each job it made running, in the order
-- store.scanClaimed reads.
RETURNING j.id, j.queue, j.kind, j.payload, j.priority, j.attempts, j.max_attempts,
          j.run_at, j.created_at, j.attempted_at, j.lease_token, j.tenant, j.entity, j.unique_key, j.metadata,
          j.task_id IS NOT NULL AS durable, j.sealed

-- fragment: claim_gate
-- False only in a transaction where limit_room found no room for the batch
-- (the setting is transaction-local: unset, NULL or '', elsewhere): the
-- plain claim then takes nothing. A one-time filter, not a per-row one.
(current_setting('skiplock.limit_room', true) IS DISTINCT FROM 'false')

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
    -- The jobs without a tenant, then those with one: two ranges of
    -- jobs_ready, each in claim order (migration 027), up to a batch from
    -- each; claim_pick merges them.
    CROSS JOIN (VALUES (false), (true)) AS r(tenanted)
    CROSS JOIN LATERAL (
        -- The two ranges of the bound are read in order and only as far as
        -- the batch needs (Append under a Limit): the second is not
        -- touched when the first fills the batch. FOR ... SKIP LOCKED is
        -- not allowed on a UNION's branches themselves, hence the
        -- subqueries.
        SELECT a.* FROM (
            SELECT j.id, j.priority, j.run_at, j.entity
            FROM {{schema}}.jobs AS j
            WHERE j.queue = q.name
              AND (j.tenant IS NOT NULL) = r.tenanted
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
              AND (j.tenant IS NOT NULL) = r.tenanted
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
      AND NOT {{queue_paused}}
),
{{claim_pick}}
{{claim_update}};

-- name: claim_enqueued
-- The hand-off (Store.EnqueueClaimed): the job the enqueue before it in the
-- same pipeline inserted (this session's last value of jobs_id_seq, created
-- in this transaction), claimed for the idle worker pool of the process that
-- enqueued it, as the plain claim would claim it: the same claimable
-- condition, set and returning, so it is found only if it is due, of the
-- pool's kinds, of no entity with a job running and of a queue not paused.
-- Invisible to every other claimer until the commit, it needs no pick, no
-- lock before the update and no SKIP LOCKED; the pool gets it without a
-- claim's round trip of its own. currval in a scalar subquery is evaluated
-- once and probes the primary key of each generation.
--   $1 queue text   $2 kinds text[] (NULL = any)   $3 unused (the batch: 1)
--   $4 worker id    $5 lease (microseconds)
UPDATE {{schema}}.jobs AS j
{{claim_set}}
FROM (SELECT $1::text AS name, $3::integer AS batch) AS q
WHERE j.id = (SELECT currval('{{schema}}.jobs_id_seq'::regclass))
  AND j.created_at = now()
  AND j.queue = q.name
  AND {{claimable}}
  AND NOT {{queue_paused}}
{{claim_returning}};

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
-- The generic plan, made once per connection: left to choose (the plan
-- cache's auto mode), a connection planned the claim again for about half
-- of its executions (pg_stat_statements, a 100,000-job no-op drain: 1,146
-- plans in 2,485 calls), and planning the claim (a join to four partitions'
-- ready indexes, two ranges each) cost as much as running it: 4.3 s of
-- planning beside 4.4 s of execution. Whether a connection settled on the
-- generic plan depended on the statistics its first executions saw (a fresh
-- generation, an ANALYZE in between), so runs of one benchmark differed by
-- 2x (issue 40). Forced generic, the same drain planned the claim 4-13 times
-- and ran 1.8x as fast, each execution no slower. The generic plan's shape
-- is held to the custom one's by TestHotPathPlansReachRowsByKey and
-- TestClaimPlansUsePartialIndex, which explain both.
-- set_config(..., true), not SET LOCAL: the pipeline's implicit transaction
-- is not a transaction block, and SET LOCAL there, though it holds until
-- the Sync, logged a WARNING in the server's log for every claim.
SELECT set_config('jit', 'off', true), set_config('enable_seqscan', 'off', true),
       set_config('plan_cache_mode', 'force_generic_plan', true);

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
