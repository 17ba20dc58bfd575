-- Fair-share weights of tenants (migration 013), read by claim_capped
-- (claim_capped.sql, claim_capped_after.sql) for queues that have any.

-- name: tenant_weight_set
-- Sets tenant $2's weight in queue $1 to $3; weight 1 (the default) removes
-- its row, so a queue whose weights are all 1 again has none to read.
--   $1 queue  $2 tenant  $3 weight (1..100)
WITH gone AS (
    DELETE FROM {{schema}}.tenant_weights AS w
    WHERE $3::int = 1 AND w.queue = $1 AND w.tenant = $2
)
INSERT INTO {{schema}}.tenant_weights AS w (queue, tenant, weight)
SELECT $1, $2, $3::int WHERE $3::int <> 1
ON CONFLICT (queue, tenant) DO UPDATE SET weight = EXCLUDED.weight, updated_at = now();

-- name: tenant_weight_list
-- The weights set in queue $1 (NULL: every queue), by queue and tenant.
SELECT w.queue, w.tenant, w.weight, w.updated_at FROM {{schema}}.tenant_weights AS w
WHERE $1::text IS NULL OR w.queue = $1
ORDER BY w.queue, w.tenant;
