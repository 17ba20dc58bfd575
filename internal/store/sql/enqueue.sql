-- name: enqueue
-- One job, one round trip, through the same function plain-SQL callers use.
-- A delay is added to the database clock, never the client's.
--   $1 queue $2 kind $3 payload $4 priority $5 run_at (NULL = now + $11)
--   $6 max_attempts $7 unique_key $8 tenant $9 entity $10 bump $11 delay (microseconds)
--   $12 metadata (NULL: none)   $13 limit_weight (NULL: 1)
--   $14 unique_by  $15 unique_fields  $16 unique_period (microseconds)
--   $17 mode  $18 mode window (microseconds): enqueue_unique's, NULL when unused
--   $19 sealed: a sealed payload's bytes, $3 then its key id (migration 24)
SELECT e.id, e.inserted
FROM {{schema}}.enqueue_one($1, $2, $3::jsonb, $4,
                            COALESCE($5::timestamptz, now() + $11::bigint * interval '1 microsecond'),
                            $6, $7, $8, $9, $10, $12::jsonb, $13::integer,
                            $14::text, $15::text[], $16::bigint * interval '1 microsecond',
                            $17::text, $18::bigint * interval '1 microsecond', $19::bytea) AS e;

-- name: handoff_quiet
-- First in the hand-off's pipeline (Store.EnqueueClaimed), never in a
-- caller's transaction: enqueue_one sends no wake-up for the job the
-- pipeline's claim_enqueued then claims for its own process's pool. Local
-- to the pipeline's implicit transaction.
SELECT set_config('skiplock.handoff', 'on', true);

-- name: notify_queues
-- Wake-up for a bulk load, sent inside its transaction (delivered on commit).
--   $1 queues
SELECT pg_notify({{schema_lit}} || '.jobs', q) FROM unnest($1::text[]) AS q;
