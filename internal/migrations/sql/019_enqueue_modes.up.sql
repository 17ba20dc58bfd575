-- Version 19: uniqueness by args and by period, and the enqueue modes
-- supersede, debounce and throttle (enqueue_unique, called by enqueue_job;
-- new last arguments of enqueue and enqueue_job, with defaults). A key held
-- beyond its job's flight (a unique period's bucket, a throttle's window)
-- is one row of unique_keys until held_until; the retention pass deletes
-- the rows whose hold has ended.
CREATE TABLE {{schema}}.unique_keys (
    queue text NOT NULL,
    unique_key text NOT NULL,
    held_until timestamptz NOT NULL,
    job_id bigint,
    PRIMARY KEY (queue, unique_key)
);
CREATE INDEX unique_keys_held_until ON {{schema}}.unique_keys (held_until);
