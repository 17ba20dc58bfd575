-- Version 18: an operator's action on one job is idempotent (issue 37). A
-- double click, a retried script or two operators used to make two copies
-- with `job retry`, and the second retry of a dead job answered "not
-- found". Each retry, cancel and delete of a job now leaves one row here:
-- the state the job was in and, for a retry, the id of its one copy. A
-- second call finds the row and answers what the first did (retry_job, and
-- the cancel and job_delete statements of internal/store); for a retry the
-- row is also the arbiter between two concurrent calls (the primary key:
-- the second waits for the first and returns its copy). The retention
-- pass deletes rows older than a week (prune_job_actions). retry_job's new
-- body is in sql/functions/retry_job.sql.
CREATE TABLE {{schema}}.job_actions (
    id       bigint      NOT NULL,
    action   text        NOT NULL CHECK (action IN ('retry', 'cancel', 'delete')),
    was      text        NOT NULL,
    new_id   bigint,
    acted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (id, action)
);
CREATE INDEX job_actions_acted_at ON {{schema}}.job_actions (acted_at);
COMMENT ON TABLE {{schema}}.job_actions IS
    'skiplock: one row per retry, cancel or delete of a job: what the first call did, which a repeated call answers again (kept a week).';
