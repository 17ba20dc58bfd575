-- The import's own record of a batch in flight, without a table: the id of
-- the skiplock transaction that enqueues a batch is written beside the
-- batch's source (asynq's held tasks) before it commits, and a later run
-- asks PostgreSQL what became of it. Commit status is kept for as long as
-- the transaction id is not frozen away (pg_xact_status returns NULL then).

-- name: xact_id
-- This transaction's id (assigns one).
SELECT pg_current_xact_id()::text;

-- name: xact_status
-- What became of each transaction: committed, aborted, in progress, or NULL
-- when too old to tell.
--   $1 transaction ids as text
SELECT x, pg_xact_status(x::xid8) FROM unnest($1::text[]) AS x;
