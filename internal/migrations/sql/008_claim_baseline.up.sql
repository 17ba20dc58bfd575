-- The claim's baseline latency, so doctor and the dashboard can say what a
-- pinned xmin horizon costs: each worker's beat keeps a moving average of its
-- claim p99 (claim_p99_ms) that moves only while nothing pins the horizon
-- (see worker_beat in internal/store/sql/lease.sql). A nullable column
-- without a default: adding it rewrites nothing.
ALTER TABLE {{schema}}.workers ADD COLUMN claim_p99_baseline_ms double precision;
COMMENT ON COLUMN {{schema}}.workers.claim_p99_baseline_ms IS
    'skiplock: moving average of claim_p99_ms over the beats taken while no transaction pinned the xmin horizon for 30 s or more; the claim''s normal latency.';
