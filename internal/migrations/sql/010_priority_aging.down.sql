ALTER TABLE {{schema}}.queues
    DROP CONSTRAINT IF EXISTS queues_aging_check,
    DROP COLUMN IF EXISTS age_after,
    DROP COLUMN IF EXISTS age_to;
