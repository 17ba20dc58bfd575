-- Placeholder for migration 005 (see 005_reserved.up.sql).
SELECT 1;
