-- Back to finished jobs without results and jobs without progress.
ALTER TABLE {{schema}}.jobs_done DROP COLUMN IF EXISTS result, DROP COLUMN IF EXISTS progress;
ALTER TABLE {{schema}}.jobs DROP COLUMN IF EXISTS progress;
