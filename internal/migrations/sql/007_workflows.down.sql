-- Drops workflows, their tasks, steps and signals, and the jobs' task_id
-- column. Jobs of unfinished tasks stay in the hot table as plain jobs.
DROP TRIGGER IF EXISTS jobs_task_left ON {{schema}}.jobs;
DROP FUNCTION IF EXISTS {{schema}}.signal(text, bigint, bigint, jsonb);
DROP FUNCTION IF EXISTS {{schema}}.delete_workflow(bigint);
DROP FUNCTION IF EXISTS {{schema}}.retry_workflow(bigint);
DROP FUNCTION IF EXISTS {{schema}}.cancel_workflow(bigint);
DROP FUNCTION IF EXISTS {{schema}}.create_workflow(text, text, jsonb, jsonb, boolean);
DROP FUNCTION IF EXISTS {{schema}}.add_tasks(bigint, jsonb);
DROP FUNCTION IF EXISTS {{schema}}.job_left();
DROP FUNCTION IF EXISTS {{schema}}.enqueue_task(bigint);
DROP FUNCTION IF EXISTS {{schema}}.validate_step_name(text, text);
DROP TABLE IF EXISTS {{schema}}.signals;
DROP TABLE IF EXISTS {{schema}}.job_steps;
DROP TABLE IF EXISTS {{schema}}.workflow_deps;
DROP TABLE IF EXISTS {{schema}}.workflow_tasks;
DROP TABLE IF EXISTS {{schema}}.workflows;
ALTER TABLE {{schema}}.jobs DROP COLUMN IF EXISTS task_id;
