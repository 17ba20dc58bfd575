DROP FUNCTION IF EXISTS {{schema}}.enqueue(text, text, jsonb, integer, timestamptz, integer, text, text, text);
DROP FUNCTION IF EXISTS {{schema}}.enqueue_job(text, text, jsonb, integer, timestamptz, integer, text, text, text, boolean);
DROP FUNCTION IF EXISTS {{schema}}.validate_job(text, text, jsonb, integer, timestamptz, integer, text, text, text);
DROP TABLE IF EXISTS {{schema}}.schedules;
DROP TABLE IF EXISTS {{schema}}.workers;
DROP TABLE IF EXISTS {{schema}}.queues;
DROP TABLE IF EXISTS {{schema}}.jobs_done;
DROP TABLE IF EXISTS {{schema}}.jobs_dead;
DROP TABLE IF EXISTS {{schema}}.jobs;
