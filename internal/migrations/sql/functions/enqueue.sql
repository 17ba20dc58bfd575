-- The public SQL API, callable with named arguments from any language,
-- psql or a trigger:
--   SELECT skiplock.enqueue(queue => 'partner', kind => 'bulk-export', limit_weight => 5);
CREATE OR REPLACE FUNCTION {{schema}}.enqueue(
    queue text, kind text, payload jsonb DEFAULT '{}', priority integer DEFAULT 0,
    run_at timestamptz DEFAULT now(), max_attempts integer DEFAULT NULL,
    unique_key text DEFAULT NULL, tenant text DEFAULT NULL, entity text DEFAULT NULL,
    metadata jsonb DEFAULT NULL, limit_weight integer DEFAULT NULL)
RETURNS bigint
LANGUAGE sql AS $$
    SELECT e.id FROM {{schema}}.enqueue_job($1, $2, $3, $4, $5, $6, $7, $8, $9, false, $10, $11) AS e
$$;

-- Issue 38 §2 (docs/security.md "Roles"): runs as the schema's owner, so
-- a producer role (grant_role) enqueues and signals without any privilege on
-- the tables; the search_path is pinned so that nothing a
-- caller creates can stand in for what the body names. Only the owner and
-- the roles grant_role gives it to may call it.
ALTER FUNCTION {{schema}}.enqueue SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
REVOKE EXECUTE ON FUNCTION {{schema}}.enqueue FROM PUBLIC;
