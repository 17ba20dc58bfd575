DROP FUNCTION IF EXISTS {{schema}}.retry_job(bigint);
DROP FUNCTION IF EXISTS {{schema}}.unhandled_kinds(interval);
ALTER TABLE {{schema}}.workers DROP COLUMN IF EXISTS handles;
DROP INDEX IF EXISTS {{schema}}.jobs_done_id;
ALTER TABLE {{schema}}.jobs_done DROP COLUMN IF EXISTS last_error;
ALTER TABLE {{schema}}.jobs_done DROP COLUMN IF EXISTS max_attempts;
