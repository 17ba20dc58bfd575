-- The plain-SQL reference (bench.RunReference): a job's life cycle as the
-- server runs it with nothing in between, the yardstick issue 40 measures
-- the drain against (../shared/reference/pgbench: schema.sql and
-- job_3tx_bN.sql, statement for statement). Its table lives in a schema of
-- its own, created for one reference run and dropped after it (the
-- harness's dropSchema, as its --repeat schemas are).

-- name: reference_schema
CREATE SCHEMA {{schema}};

-- name: reference_table
-- A minimal queue-like table: what a job needs, and one fetch index, as a
-- real queue needs for its claim.
CREATE TABLE {{schema}}.q_job (
  id           bigserial PRIMARY KEY,
  queue        text        NOT NULL DEFAULT 'default',
  state        smallint    NOT NULL DEFAULT 0,
  attempt      int         NOT NULL DEFAULT 0,
  args         jsonb       NOT NULL,
  scheduled_at timestamptz NOT NULL DEFAULT now(),
  created_at   timestamptz NOT NULL DEFAULT now()
);

-- name: reference_index
CREATE INDEX q_job_fetch ON {{schema}}.q_job (queue, state, scheduled_at, id);

-- name: reference_enqueue
-- $1 jobs, enqueued in one statement; their ids.
WITH ins AS (
    INSERT INTO {{schema}}.q_job (args)
    SELECT '{"n":1,"s":"small payload"}' FROM generate_series(1, $1::integer)
    RETURNING id)
SELECT array_agg(id) FROM ins;

-- name: reference_claim
-- The jobs $1 claimed in one statement.
UPDATE {{schema}}.q_job SET state = 1, attempt = attempt + 1 WHERE id = ANY ($1::bigint[]);

-- name: reference_complete
-- The jobs $1 completed (deleted) in one statement.
DELETE FROM {{schema}}.q_job WHERE id = ANY ($1::bigint[]);
