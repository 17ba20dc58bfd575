-- River's side of `skiplock import river`. {{schema}} is River's schema
-- (--from-schema, default public), not skiplock's: these statements read and
-- delete rows of River's own tables, as River's migrator made them
-- (riverpgxv5 migration line "main", versions 002-008).

-- name: river_counts
-- Jobs by state and kind under the import's filters: the dry run's figures
-- and the summary's "left behind".
--   $1 kinds (NULL: all)   $2 queues (NULL: all)
SELECT j.state::text, j.kind, count(*)
FROM {{schema}}.river_job AS j
WHERE ($1::text[] IS NULL OR j.kind = ANY($1::text[]))
  AND ($2::text[] IS NULL OR j.queue = ANY($2::text[]))
GROUP BY 1, 2
ORDER BY 1, 2;

-- name: river_live_leaders
-- River clients that hold (or held within their lease) the leadership. Every
-- River client that works jobs takes part in the election, and the leader
-- renews its row every few seconds, so no unexpired row means no River
-- client is working: the proof `--include-running` needs.
SELECT count(*) FROM {{schema}}.river_leader WHERE expires_at > now();

-- name: river_lock_batch
-- The next batch in id order after $4, locked for this transaction. SKIP
-- LOCKED: a row River is fetching right now is left to River (it becomes
-- running, and the summary counts it as left behind); River's own fetch
-- skips the rows locked here the same way, so a job is never in both.
--   $1 states   $2 kinds (NULL: all)   $3 queues (NULL: all)
--   $4 after this id   $5 batch size
SELECT j.id, j.state::text, j.kind, j.queue, j.priority, j.args::text, j.attempt, j.max_attempts,
       j.scheduled_at, j.created_at, j.errors::text[], j.tags::text[], j.metadata::text,
       j.unique_key, j.unique_states::text
FROM {{schema}}.river_job AS j
WHERE j.state::text = ANY($1::text[])
  AND ($2::text[] IS NULL OR j.kind = ANY($2::text[]))
  AND ($3::text[] IS NULL OR j.queue = ANY($3::text[]))
  AND j.id > $4
ORDER BY j.id
LIMIT $5
FOR UPDATE OF j SKIP LOCKED;

-- name: river_delete
-- Removes the rows whose jobs this transaction enqueued into skiplock (in
-- the same database: the same transaction, so both happen or neither).
--   $1 ids
DELETE FROM {{schema}}.river_job WHERE id = ANY($1::bigint[]);
