-- Back to version 21: finished jobs without results, jobs without progress.
-- 022 changed no function body.
ALTER TABLE {{schema}}.jobs_done DROP COLUMN result, DROP COLUMN progress;
ALTER TABLE {{schema}}.jobs DROP COLUMN progress;
