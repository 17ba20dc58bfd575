ALTER TABLE {{schema}}.workers DROP COLUMN IF EXISTS claim_p99_baseline_ms;
