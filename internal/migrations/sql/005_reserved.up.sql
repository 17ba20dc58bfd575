-- Placeholder for migration 005, which the lookup branch owns (job lookups,
-- finished-job history). It exists only so that this branch's migration 006
-- has a contiguous predecessor; delete this pair when 005 is merged (the
-- loader refuses two different files for one version).
SELECT 1;
