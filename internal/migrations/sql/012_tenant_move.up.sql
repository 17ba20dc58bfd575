-- `skiplock tenant move` (skiplock.MoveTenant, docs/scaling.md §4): a
-- tenant's ready and scheduled jobs move to another database in batches, so
-- that a crash at any step loses no job and a re-run runs none twice.
--
-- moved_in, in the target: one row per job moved in, written in the same
-- transaction as the job's insert. The job is inserted held (run_at far in
-- the future, its own run_at kept here) and released only once the source
-- has deleted its copy, so it is never runnable in both databases. A re-run
-- reads here what an interrupted run did, whatever became of the job since
-- (even a job completed and deleted in delete mode stays recorded).
CREATE TABLE {{schema}}.moved_in (
    source    text        NOT NULL, -- the source database: system identifier/database/schema
    source_id bigint      NOT NULL, -- the job's id there
    id        bigint      NOT NULL, -- its id here (merged: the live job here with its unique key)
    run_at    timestamptz NOT NULL, -- its own run_at, restored when it is released
    state     text        NOT NULL DEFAULT 'held',
    moved_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source, source_id),
    CONSTRAINT moved_in_state_check CHECK (state IN ('held', 'released', 'merged', 'discarded'))
);
CREATE INDEX moved_in_held ON {{schema}}.moved_in (source, source_id) WHERE state = 'held';

-- moved_out, in the source: one row per job moved out, written in the same
-- transaction as the delete of the job here. When a re-run finds a held job
-- in the target whose source row is gone, this tells "deleted by the move"
-- (release the held copy) from "claimed here meanwhile" (discard it).
CREATE TABLE {{schema}}.moved_out (
    id       bigint      PRIMARY KEY, -- the job's id here
    target   text        NOT NULL,    -- the target database, as moved_in.source names databases
    moved_at timestamptz NOT NULL DEFAULT now()
);
