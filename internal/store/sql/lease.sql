-- Every statement here is fenced by (id, lease_token, locked_by): only the
-- current lease holder's writes land. A job missing from RETURNING has lost
-- its lease; its worker writes nothing more for it.
--
-- The fence does not repeat state = 'running': jobs_lease_check makes a
-- non-null lease_token imply it, and leaving it out is what keeps these
-- writes on the primary key. With it, the partial index jobs_running (whose
-- predicate it is) became a candidate, and the planner, estimating a handful
-- of running rows, read the whole of jobs_running and joined on id: while a
-- long transaction pins the xmin horizon that index keeps an entry for every
-- job claimed since the pin, so each completion batch paid for all of them
-- (issue 15: 1,715 buffers per 50-job DELETE 20,000 jobs into a pin, 3 with
-- the primary key). Now jobs_pkey is the only index whose predicate holds;
-- TestFencedWritePlansUsePrimaryKey and the doctor's fenced_writes check
-- hold every statement here to it.
--
-- The batched writes reach each lease's row by `j.id = ANY (ARRAY[l.id])`,
-- a probe of the primary key per lease, in the one partition the lease's
-- token names (fragment lease_gen, claim.sql), and run after write_settings: a
-- statement's plan is cached per connection and made again only when the
-- table's statistics change, and jobs is partitioned (migration 016), so a
-- plan is often made while a generation of the ring is empty (every TRUNCATE
-- makes each connection plan again). Two shapes went wrong that way:
--   - plain `j.id = l.id`: joined the leases to a scan of the whole table or
--     primary key, found by a join filter (before 016: 180 ms a completion
--     batch until the next ANALYZE, a no-op drain at 3,141 jobs/s instead of
--     31,000; TestHotPathPlansReachRowsByKey);
--   - `j.id = ANY ($1) AND j.id = l.id` (the fix for that, until 016): the
--     probe per lease carried the whole array as its index condition, so a
--     batch of n leases walked n arrays of n ids in each partition: 30-56 ms
--     for a 200-job completion (auto_explain), and as the writes slowed their
--     batches grew (a no-op drain at 15,000-19,000 jobs/s instead of 30,000
--     in three runs of five).
-- A one-element array of the lease's id is an index condition of its own
-- with an equality's estimate, but neither hashable nor mergeable, so no
-- plan can join the leases to a whole scan: a nested loop probing the key
-- per lease is the plan, whatever the statistics.

-- name: write_settings
-- First in the pipeline of every batched fenced write (one implicit
-- transaction): no sequential scan of jobs, whatever the cached plan's
-- statistics said (see above). set_config(..., true) as in claim_settings.
-- And no Materialize: jobs is partitioned (migration 016), and a plan made
-- while a generation of the ring was empty (after each TRUNCATE every
-- connection plans again) joined the leases to a materialized scan of the
-- keys with a join filter, a comparison of every lease with every row:
-- 4 ms for a 200-job completion on 40,000 running jobs, and as the writes
-- slowed their batches grew, a no-op drain falling from ~30,000 to ~18,000
-- jobs/s. Without it the planner joins by hash (1.4 ms) or by key.
SELECT {{write_planner}};

-- fragment: write_planner
-- write_settings' settings, shared with write_batch_settings.
set_config('enable_seqscan', 'off', true), set_config('enable_material', 'off', true)

-- name: write_batch_settings
-- write_settings for the completer's batches (Store.WriteBatch), which run
-- in an implicit transaction of their own, and the generic plan, made once
-- per connection, as claim_settings has the claim's: an idle worker
-- completing one job at a time planned its completion for every call
-- (pg_stat_statements: 2,023 plans in 2,020 calls, 0.5 ms of planning
-- beside 0.13 ms of execution). Both plans are held to the primary key by
-- TestFencedWritePlansUsePrimaryKey. Not in write_settings: that one also
-- runs in a caller's transaction (StepTx), whose own statements after it
-- must plan as before.
SELECT {{write_planner}}, set_config('plan_cache_mode', 'force_generic_plan', true);

-- name: write_settings_save
-- write_settings inside the caller's own transaction (CompleteTx): the
-- caller's values are kept in skiplock.enable_seqscan and
-- skiplock.enable_material for write_settings_restore, which puts them back
-- after the write, so the statements the caller runs next in its
-- transaction plan as before.
SELECT set_config('skiplock.enable_seqscan', current_setting('enable_seqscan'), true),
       set_config('skiplock.enable_material', current_setting('enable_material'), true),
       set_config('enable_seqscan', 'off', true), set_config('enable_material', 'off', true);

-- name: write_settings_restore
SELECT set_config('enable_seqscan', current_setting('skiplock.enable_seqscan'), true),
       set_config('enable_material', current_setting('skiplock.enable_material'), true);

-- name: heartbeat
-- Extends the leases of all of one worker's running jobs in one statement.
-- lease_expires_at is in no index, so this is a HOT update.
-- The leases in $5/$6 are those a handler's own transaction ended
-- (CompleteTx, a signal wait's sleep): that transaction deleted or moved
-- the row and holds it locked until it ends, which may be long after (the
-- handler decides when it commits). Their rows are locked with SKIP LOCKED
-- before they are extended: a row that transaction still holds is left
-- out of the answer, as a row gone is, and the heartbeat does not wait for
-- it. Waiting for it, the heartbeat of every other lease of the process
-- waited too, timed out at every interval, and the other jobs' leases
-- expired (TestCompleteTxHeldOpenDoesNotStallTheOtherLeases). A row there
-- and not held (the transaction rolled back) is extended as any other.
-- The two lists do not overlap: no row is updated twice.
--   $1 ids  $2 tokens  $3 lease (microseconds)  $4 worker id
--   $5 ids  $6 tokens (leases a handler's transaction ended)
WITH waited AS (
    UPDATE {{schema}}.jobs AS j
    SET lease_expires_at = now() + $3::bigint * interval '1 microsecond'
    FROM unnest($1::bigint[], $2::bigint[]) AS l(id, token)
    WHERE j.id = ANY (ARRAY[l.id]) AND {{lease_gen}} AND j.lease_token = l.token AND j.locked_by = $4
    RETURNING j.id, j.cancel_requested
),
free AS (
    SELECT j.id FROM {{schema}}.jobs AS j, unnest($5::bigint[], $6::bigint[]) AS l(id, token)
    WHERE j.id = ANY (ARRAY[l.id]) AND {{lease_gen}} AND j.lease_token = l.token AND j.locked_by = $4
    FOR NO KEY UPDATE OF j SKIP LOCKED
),
unwaited AS (
    UPDATE {{schema}}.jobs AS j
    SET lease_expires_at = now() + $3::bigint * interval '1 microsecond'
    FROM unnest($5::bigint[], $6::bigint[]) AS l(id, token)
    WHERE j.id = ANY (ARRAY(SELECT f.id FROM free AS f)) AND j.id = l.id
      AND {{lease_gen}} AND j.lease_token = l.token AND j.locked_by = $4
    RETURNING j.id, j.cancel_requested
)
SELECT w.id, w.cancel_requested FROM waited AS w
UNION ALL
SELECT u.id, u.cancel_requested FROM unwaited AS u;

-- name: complete_delete
-- Success without history (Config.DeleteCompleted): the row is deleted
-- (least write amplification).
--   $1 ids  $2 tokens  $3 worker id
DELETE FROM {{schema}}.jobs AS j
USING unnest($1::bigint[], $2::bigint[]) AS l(id, token)
WHERE j.id = ANY (ARRAY[l.id]) AND {{lease_gen}} AND j.lease_token = l.token AND j.locked_by = $3
RETURNING j.id;

-- name: complete_archive
-- Success, keeping history (the default): the row moves to the partitioned
-- history table, with its attempts and the last failed attempt's error, so
-- the job can be looked up until its day's partition is dropped. With $4,
-- waiters (Client.Wait) are told which jobs this statement completed and
-- when, on commit: ids comma-separated, then "c@" and the finish time in
-- microseconds since the epoch, at most 350 ids a payload (PostgreSQL's
-- limit is 8,000 bytes). Only what the fence let through is told, and
-- these runs left no result (those take complete_archive_result), so a
-- waiter needs no look-up for them (wait.go, heardDone).
--   $1 ids  $2 tokens  $3 worker id  $4 announce
WITH done AS (
    DELETE FROM {{schema}}.jobs AS j
    USING unnest($1::bigint[], $2::bigint[]) AS l(id, token)
    WHERE j.id = ANY (ARRAY[l.id]) AND {{lease_gen}} AND j.lease_token = l.token AND j.locked_by = $3
    RETURNING j.*
),
ins AS (
    INSERT INTO {{schema}}.jobs_done (id, priority, attempts, max_attempts, run_at, created_at, attempted_at,
                                      finished_at, queue, kind, locked_by, tenant, entity, last_error, payload, sealed, metadata,
                                      limit_weight)
    SELECT d.id, d.priority, d.attempts, d.max_attempts, d.run_at, d.created_at, d.attempted_at,
           now(), d.queue, d.kind, d.locked_by, d.tenant, d.entity, d.last_error, d.payload, d.sealed, d.metadata,
           d.limit_weight
    FROM done AS d
    RETURNING id
),
told AS (
    SELECT pg_notify({{schema_lit}} || '.done',
                     string_agg(c.id::text, ',') || ',c@' || (extract(epoch FROM now()) * 1000000)::bigint)
    FROM (SELECT i.id, (row_number() OVER ()) / 350 AS chunk FROM ins AS i WHERE $4::boolean) AS c
    GROUP BY c.chunk
)
-- The count makes told run (a CTE no one reads is not evaluated).
SELECT i.id FROM ins AS i CROSS JOIN (SELECT count(*) FROM told) AS t;

-- name: complete_archive_result
-- Success of runs that returned a result or reported progress (issue 39):
-- as complete_archive, with each job's result (NULL: none) and its last
-- progress (NULL keeps the row's last coalesced write). Only these runs
-- take this statement, so a run with neither writes exactly what
-- complete_archive writes. Results are JSON, at most MaxResultBytes
-- (validate.go), checked before they get here. With $6, waiters are told
-- on commit which jobs this statement completed, when, and with what
-- result, as a JSON object {"at": microseconds since the epoch, "ended":
-- {"id": result or null, ...}, "look": [id, ...]}: a result of more than
-- 1,500 bytes (as jsonb prints it) is not sent, its id is in "look" for
-- the waiter to look up; at most about 7,500 bytes a payload.
--   $1 ids  $2 tokens  $3 worker id  $4 results  $5 progress  $6 announce
WITH done AS (
    DELETE FROM {{schema}}.jobs AS j
    USING unnest($1::bigint[], $2::bigint[], $4::jsonb[], $5::jsonb[]) AS l(id, token, result, progress)
    WHERE j.id = ANY (ARRAY[l.id]) AND {{lease_gen}} AND j.lease_token = l.token AND j.locked_by = $3
    RETURNING j.*, l.result AS run_result, l.progress AS run_progress
),
ins AS (
    INSERT INTO {{schema}}.jobs_done (id, priority, attempts, max_attempts, run_at, created_at, attempted_at,
                                      finished_at, queue, kind, locked_by, tenant, entity, last_error, payload, sealed, metadata,
                                      limit_weight, result, progress)
    SELECT d.id, d.priority, d.attempts, d.max_attempts, d.run_at, d.created_at, d.attempted_at,
           now(), d.queue, d.kind, d.locked_by, d.tenant, d.entity, d.last_error, d.payload, d.sealed, d.metadata,
           d.limit_weight, d.run_result, COALESCE(d.run_progress, d.progress)
    FROM done AS d
    RETURNING id, result
),
told AS (
    SELECT pg_notify({{schema_lit}} || '.done',
                     json_build_object('at', (extract(epoch FROM now()) * 1000000)::bigint,
                                       'ended', json_object_agg(c.id, c.result) FILTER (WHERE c.sent),
                                       'look', json_agg(c.id) FILTER (WHERE NOT c.sent))::text)
    FROM (SELECT s.id, s.result, s.sent,
                 sum(CASE WHEN s.sent THEN coalesce(octet_length(s.result::text), 4) ELSE 0 END + 24)
                     OVER (ORDER BY s.id) / 6000 AS chunk
          FROM (SELECT i.id, i.result, coalesce(octet_length(i.result::text), 0) <= 1500 AS sent
                FROM ins AS i WHERE $6::boolean) AS s) AS c
    GROUP BY c.chunk
)
SELECT i.id FROM ins AS i CROSS JOIN (SELECT count(*) FROM told) AS t;

-- name: progress_write
-- The coalesced progress of running jobs (issue 39): one statement per
-- interval for all of a process's jobs that reported progress since the
-- last, fenced as the heartbeat is. progress is in no index, so this is a
-- HOT update. Returns the ids still held.
--   $1 ids  $2 tokens  $3 progress (JSON)  $4 worker id
UPDATE {{schema}}.jobs AS j
SET progress = l.progress
FROM unnest($1::bigint[], $2::bigint[], $3::jsonb[]) AS l(id, token, progress)
WHERE j.id = ANY (ARRAY[l.id]) AND {{lease_gen}} AND j.lease_token = l.token AND j.locked_by = $4
RETURNING j.id;

-- name: notify_done
-- Wakes the processes waiting for jobs (Client.Wait): the ids of a batch's
-- completions and dead letters, comma-separated, in payloads under
-- PostgreSQL's 8,000-byte limit. Last in the batch's pipeline, so it is
-- delivered when the batch commits; an id whose lease was lost is a false
-- alarm the waiter's lookup sees through. A hint only: waiters poll too.
--   $1 payloads
SELECT pg_notify({{schema_lit}} || '.done', p) FROM unnest($1::text[]) AS p;

-- name: reschedule
-- Back to ready: a retry after a failure (refund 0, with an error and a
-- backoff delay), a snooze (refund 1: no attempt spent), or a job handed back
-- at shutdown (refund 1 if it never started).
--   $1 ids  $2 tokens  $3 delays (microseconds)  $4 refunds  $5 errors (NULL keeps the last)  $6 worker id
--   $7 the handler's attempt caps (0: none; a lower one becomes max_attempts,
--      so the stored budget is the one that decides)
--   $8 ended: the handler's own transaction ended the lease (CompleteTx),
--      and this is the fallback for a transaction that did not commit
-- An ended lease's row is locked with SKIP LOCKED first and left as it is
-- while held: its handler returned before that transaction ended (it
-- commits it elsewhere, or leaked it), and waiting for it held up every
-- outcome of the process behind it, for as long as the transaction stayed
-- open (TestCompleteTxReturnedBeforeCommitDoesNotStallOutcomes). A held
-- row is gone once the transaction commits; if it rolls back, the lease
-- runs out and the reaper (SKIP LOCKED too) returns the job. A row held in
-- that instant by a statement of its own process (a heartbeat, for a
-- transaction that rolled back before its handler returned) is left the
-- same way: the job is counted completed (Settle) and runs again once its
-- lease runs out; nothing is lost. The OR evaluates free only for ended
-- rows: other batches never run it.
WITH free AS (
    SELECT j.id FROM {{schema}}.jobs AS j, unnest($1::bigint[], $2::bigint[], $8::bool[]) AS l(id, token, ended)
    WHERE l.ended AND j.id = ANY (ARRAY[l.id]) AND {{lease_gen}} AND j.lease_token = l.token AND j.locked_by = $6
    FOR NO KEY UPDATE OF j SKIP LOCKED
)
UPDATE {{schema}}.jobs AS j
SET state            = 'ready',
    attempts         = j.attempts - l.refund,
    max_attempts     = LEAST(j.max_attempts, NULLIF(l.max_attempts, 0)),
    run_at           = now() + l.delay_us * interval '1 microsecond',
    last_error       = COALESCE(l.err, j.last_error),
    locked_by        = NULL,
    lease_token      = NULL,
    lease_expires_at = NULL,
    cancel_requested = false
FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::int[], $5::text[], $7::int[], $8::bool[])
    AS l(id, token, delay_us, refund, err, max_attempts, ended)
WHERE j.id = ANY (ARRAY[l.id]) AND {{lease_gen}} AND j.lease_token = l.token AND j.locked_by = $6
  AND (NOT l.ended OR j.id = ANY (ARRAY(SELECT f.id FROM free AS f)))
RETURNING j.id;

-- name: dead_letter
-- Final failure: the row leaves the hot table for jobs_dead in one statement,
-- so the failure context is never lost and never duplicated.
--   $1 ids  $2 tokens  $3 reasons  $4 errors  $5 worker id  $6 the handler's
--   attempt caps (as reschedule's $7)  $7 ended (as reschedule's $8: an
--   ended lease's row held by its transaction is left as it is)
WITH free AS (
    SELECT j.id FROM {{schema}}.jobs AS j, unnest($1::bigint[], $2::bigint[], $7::bool[]) AS l(id, token, ended)
    WHERE l.ended AND j.id = ANY (ARRAY[l.id]) AND {{lease_gen}} AND j.lease_token = l.token AND j.locked_by = $5
    FOR NO KEY UPDATE OF j SKIP LOCKED
),
d AS (
    DELETE FROM {{schema}}.jobs AS j
    USING unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $6::int[], $7::bool[]) AS l(id, token, reason, err, cap, ended)
    WHERE j.id = ANY (ARRAY[l.id]) AND {{lease_gen}} AND j.lease_token = l.token AND j.locked_by = $5
      AND (NOT l.ended OR j.id = ANY (ARRAY(SELECT f.id FROM free AS f)))
    RETURNING j.*, l.reason AS dead_reason, l.err AS dead_error, l.cap AS dead_cap
)
INSERT INTO {{schema}}.jobs_dead (id, priority, attempts, max_attempts, run_at, created_at, queue, kind,
                                  reason, locked_by, unique_key, tenant, entity, last_error, payload, sealed, metadata, limit_weight)
SELECT d.id, d.priority, d.attempts, LEAST(d.max_attempts, NULLIF(d.dead_cap, 0)), d.run_at, d.created_at, d.queue, d.kind,
       d.dead_reason, d.locked_by, d.unique_key, d.tenant, d.entity, COALESCE(d.dead_error, d.last_error), d.payload, d.sealed, d.metadata, d.limit_weight
FROM d
RETURNING id;

-- name: reap_turn
-- Takes the reaper's turn (migration 015) when it is due: one row back to
-- the process that will reap now, none when another process reaped less
-- than $1 ago or a slow reap put the next one off. Recreates the row if it
-- is missing.
--   $1 gap (microseconds)  $2 worker id
INSERT INTO {{schema}}.reaper_turn AS t (id, reaped_at, not_before, holder)
VALUES (1, now(), '-infinity', $2)
ON CONFLICT (id) DO UPDATE SET reaped_at = excluded.reaped_at, holder = excluded.holder
WHERE t.reaped_at <= now() - $1::bigint * interval '1 microsecond' AND t.not_before <= now()
RETURNING t.holder;

-- name: reap_defer
-- After a slow reap (a pinned horizon leaves the running set full of dead
-- entries): no process reaps again before $1 from now.
--   $1 delay (microseconds)
UPDATE {{schema}}.reaper_turn AS t
SET not_before = greatest(t.not_before, now() + $1::bigint * interval '1 microsecond')
WHERE t.id = 1;

-- name: rotate_ring
-- One turn of the ring of generations (migration 016, rotate_ring): the
-- generation that took inserts two periods ago gives its ready rows to
-- jobs_keyed and is truncated once empty, waiting at most $1 for its lock.
-- Every process calls it about once a second; one at a time does the work.
--   $1 lock timeout (milliseconds)
SELECT r.moved, coalesce(r.truncated, -1)::int FROM {{schema}}.rotate_ring($1::integer) AS r;

-- name: reap
-- Returns jobs whose lease expired (by the database clock) to ready, or to
-- the dead-letter table once their attempts are spent. A heartbeat that
-- commits first moves lease_expires_at forward; the row lock plus the
-- re-check of lease_expires_at on the newest row version means a job whose
-- heartbeat is alive is never touched. Safe in every process at once.
--   $1 batch size
WITH expired AS (
    SELECT j.id FROM {{schema}}.jobs AS j
    WHERE j.state = 'running' AND j.lease_expires_at < now()
    ORDER BY j.id
    LIMIT $1
    FOR NO KEY UPDATE SKIP LOCKED
),
back AS (
    UPDATE {{schema}}.jobs AS j
    SET state = 'ready', locked_by = NULL, lease_token = NULL, lease_expires_at = NULL,
        cancel_requested = false, run_at = now(),
        last_error = 'lease expired: worker ' || j.locked_by || ' stopped heartbeating'
    FROM expired AS e
    WHERE j.id = e.id AND j.attempts < j.max_attempts AND NOT j.cancel_requested
      AND j.lease_expires_at < now()
    RETURNING j.id
),
dead AS (
    DELETE FROM {{schema}}.jobs AS j
    USING expired AS e
    WHERE j.id = e.id AND (j.attempts >= j.max_attempts OR j.cancel_requested)
      AND j.lease_expires_at < now()
    RETURNING j.*
),
buried AS (
    INSERT INTO {{schema}}.jobs_dead (id, priority, attempts, max_attempts, run_at, created_at, queue, kind,
                                      reason, locked_by, unique_key, tenant, entity, last_error, payload, sealed, metadata, limit_weight)
    SELECT d.id, d.priority, d.attempts, d.max_attempts, d.run_at, d.created_at, d.queue, d.kind,
           CASE WHEN d.cancel_requested THEN 'cancelled' ELSE 'lease_expired' END,
           d.locked_by, d.unique_key, d.tenant, d.entity,
           'lease expired: worker ' || d.locked_by || ' stopped heartbeating', d.payload, d.sealed, d.metadata, d.limit_weight
    FROM dead AS d
    RETURNING id
)
SELECT (SELECT count(*) FROM back)::int, (SELECT count(*) FROM buried)::int;

-- name: cancel
-- Cancels a job by id. A ready job goes straight to the dead-letter table
-- with reason 'cancelled'; a running job is flagged and its worker is told
-- (NOTIFY on the cancel channel, and again by its next heartbeat), cancels
-- the handler's context and dead-letters it. Returns the job's state before,
-- as job list shows it ('scheduled' for a ready job not yet due), and
-- records it in job_actions (migration 018), where a repeated cancel finds
-- it (job_action).
--   $1 id
WITH r AS (
    DELETE FROM {{schema}}.jobs AS j WHERE j.id = $1 AND j.state = 'ready' RETURNING j.*
),
buried AS (
    INSERT INTO {{schema}}.jobs_dead (id, priority, attempts, max_attempts, run_at, created_at, queue, kind,
                                      reason, locked_by, unique_key, tenant, entity, last_error, payload, sealed, metadata, limit_weight)
    SELECT r.id, r.priority, r.attempts, r.max_attempts, r.run_at, r.created_at, r.queue, r.kind,
           'cancelled', r.locked_by, r.unique_key, r.tenant, r.entity, r.last_error, r.payload, r.sealed, r.metadata, r.limit_weight
    FROM r
    RETURNING id
),
flagged AS (
    UPDATE {{schema}}.jobs AS j SET cancel_requested = true
    WHERE j.id = $1 AND j.state = 'running'
    RETURNING j.id, pg_notify({{schema_lit}} || '.cancel', j.id::text)
),
was AS (
    SELECT CASE WHEN EXISTS (SELECT 1 FROM r WHERE r.run_at > now()) THEN 'scheduled'
                WHEN EXISTS (SELECT 1 FROM buried) THEN 'ready'
                WHEN EXISTS (SELECT 1 FROM flagged) THEN 'running'
                ELSE '' END AS state
),
recorded AS (
    INSERT INTO {{schema}}.job_actions (id, action, was)
    SELECT $1, 'cancel', was.state FROM was WHERE was.state <> ''
    ON CONFLICT (id, action) DO NOTHING
)
SELECT was.state FROM was;

-- name: worker_beat
-- One row per worker process, refreshed with every heartbeat.
--   $1 id $2 hostname $3 pid $4 queues $5 concurrency $6 running
--   $7 claimed $8 completed $9 failed $10 claim p99 ms $11 stopped
--   $12 handles (JSON: [{"queues": [...], "kinds": [...] | null}], one per pool)
INSERT INTO {{schema}}.workers AS w (id, hostname, pid, queues, concurrency, running,
                                     claimed_total, completed_total, failed_total, claim_p99_ms, stopped_at,
                                     handles)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, CASE WHEN $11::boolean THEN now() END, $12::jsonb)
ON CONFLICT (id) DO UPDATE
SET heartbeat_at = now(), running = EXCLUDED.running, concurrency = EXCLUDED.concurrency,
    queues = EXCLUDED.queues, handles = EXCLUDED.handles, claimed_total = EXCLUDED.claimed_total,
    completed_total = EXCLUDED.completed_total, failed_total = EXCLUDED.failed_total,
    claim_p99_ms = EXCLUDED.claim_p99_ms, stopped_at = EXCLUDED.stopped_at,
    -- The claim's baseline (migration 008): a moving average of claim p99
    -- over the beats taken while nothing pins the xmin horizon for 30 s (a
    -- transaction of this database holding a snapshot or an xid, an xid in
    -- any database, a prepared transaction, a slot's xmin), so doctor can
    -- compare the claim's p99 during a pin with its normal one.
    claim_p99_baseline_ms = CASE
        WHEN EXCLUDED.claim_p99_ms IS NULL THEN w.claim_p99_baseline_ms
        WHEN EXISTS (SELECT 1 FROM pg_stat_activity AS a
                     WHERE a.pid <> pg_backend_pid() AND a.xact_start < now() - interval '30 seconds'
                       AND (a.backend_xid IS NOT NULL
                            OR (a.backend_xmin IS NOT NULL AND a.datname = current_database()))
                       AND a.backend_type <> 'autovacuum worker')
          OR EXISTS (SELECT 1 FROM pg_prepared_xacts AS p WHERE p.prepared < now() - interval '30 seconds')
          OR EXISTS (SELECT 1 FROM pg_replication_slots AS s WHERE s.xmin IS NOT NULL)
        THEN w.claim_p99_baseline_ms
        WHEN w.claim_p99_baseline_ms IS NULL THEN EXCLUDED.claim_p99_ms
        ELSE 0.9 * w.claim_p99_baseline_ms + 0.1 * EXCLUDED.claim_p99_ms
    END;

-- name: complete_one_delete
-- Success inside the handler's own transaction (CompleteTx). Scalars only, so
-- it runs through any driver.
--   $1 id  $2 token  $3 worker id
DELETE FROM {{schema}}.jobs AS j
WHERE j.id = $1 AND j.lease_token = $2 AND j.locked_by = $3
RETURNING j.id;

-- name: complete_one_archive
WITH done AS (
    DELETE FROM {{schema}}.jobs AS j
    WHERE j.id = $1 AND j.lease_token = $2 AND j.locked_by = $3
    RETURNING j.*
)
INSERT INTO {{schema}}.jobs_done (id, priority, attempts, max_attempts, run_at, created_at, attempted_at,
                                  finished_at, queue, kind, locked_by, tenant, entity, last_error, payload, sealed, metadata, limit_weight,
                                  progress)
SELECT d.id, d.priority, d.attempts, d.max_attempts, d.run_at, d.created_at, d.attempted_at,
       now(), d.queue, d.kind, d.locked_by, d.tenant, d.entity, d.last_error, d.payload, d.sealed, d.metadata, d.limit_weight,
       d.progress
FROM done AS d
RETURNING id;

-- name: pause_queue
--   $1 queue $2 paused
INSERT INTO {{schema}}.queues AS q (name, paused) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE SET paused = EXCLUDED.paused, updated_at = now();

-- name: advance_lease_tokens
-- After a failover: move the lease-token sequence past every token the old
-- primary may have handed out in commits the new primary never received (an
-- asynchronous standby's lost tail; the sequence would hand those tokens out
-- again, and a lost lease would pass the fence). The target is the current
-- time in microseconds: far above any count of claims, and higher at every
-- later failover. It is at least a million above a value this statement
-- takes from the sequence itself, so claims racing it (which take values
-- between the two) never end up above it, whatever the clocks say: setval
-- cannot be compared-and-set against nextval, and reading last_value
-- instead could move the sequence back below a token a claim just took
-- when the new primary's clock is behind the old one's. Returns the new
-- value.
SELECT setval('{{schema}}.lease_tokens'::regclass, greatest(
    nextval('{{schema}}.lease_tokens'::regclass) + 1000000,
    (extract(epoch FROM clock_timestamp()) * 1000000)::bigint));
