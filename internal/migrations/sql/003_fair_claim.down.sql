DROP INDEX IF EXISTS {{schema}}.jobs_ready_no_tenant;
