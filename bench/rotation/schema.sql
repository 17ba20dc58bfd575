-- The rotating-partition experiment of docs/performance.md (issue 15): the
-- plain-SQL reference table of shared/reference/pgbench split by generation
-- into G LIST partitions (psql -v g=G; 3 by default); rotate.sh (with the
-- same ROT_G) moves inserts to the next generation every 5 s and truncates
-- the oldest once it is empty.
\if :{?g}
\else
\set g 3
\endif
DROP TABLE IF EXISTS q_rot, rot_cur;
CREATE TABLE rot_cur (gen int NOT NULL);
INSERT INTO rot_cur VALUES (0);
CREATE TABLE q_rot (
  id           bigint GENERATED ALWAYS AS IDENTITY,
  gen          int         NOT NULL,
  queue        text        NOT NULL DEFAULT 'default',
  state        smallint    NOT NULL DEFAULT 0,
  attempt      int         NOT NULL DEFAULT 0,
  args         jsonb       NOT NULL,
  scheduled_at timestamptz NOT NULL DEFAULT now(),
  created_at   timestamptz NOT NULL DEFAULT now()
) PARTITION BY LIST (gen);
SELECT format('CREATE TABLE q_rot_%s PARTITION OF q_rot FOR VALUES IN (%s)', g, g) FROM generate_series(0, :g - 1) AS g \gexec
CREATE INDEX ON q_rot (id);
CREATE INDEX ON q_rot (queue, state, scheduled_at, id);
