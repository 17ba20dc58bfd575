-- Results and progress (issue 39). A handler's result is kept with the
-- finished job: jobs_done.result, written only by the completion of a run
-- that returned one (complete_archive_result), so a run without a result
-- writes exactly what it wrote before. A running job's progress is a
-- column of its row, jobs.progress, in no index: the coalesced progress
-- write (progress_write, at most one per job per interval) is a HOT update,
-- like the heartbeat. A run's last progress goes to jobs_done.progress with
-- its completion. A failed job's result is its last error (jobs_dead).
ALTER TABLE {{schema}}.jobs ADD COLUMN progress jsonb;
ALTER TABLE {{schema}}.jobs_done ADD COLUMN result jsonb, ADD COLUMN progress jsonb;
