-- The public SQL API, callable with named arguments from any language,
-- psql or a trigger:
--   SELECT skiplock.enqueue(queue => 'partner', kind => 'bulk-export', limit_weight => 5);
--   SELECT skiplock.enqueue(queue => 'docs', kind => 'render', payload => '{"doc": 7}',
--                           unique_key => 'doc-7', supersede => true);
-- The arguments after limit_weight (migration 019) are enqueue_unique's:
-- unique_by 'key' or 'args', unique_fields (with 'args': the payload's
-- fields the key is made of), unique_period (the key is held for the period
-- bucket, finished or not), and at most one mode: supersede, debounce
-- (a window), throttle (a window).
DROP FUNCTION IF EXISTS {{schema}}.enqueue(text, text, jsonb, integer, timestamptz, integer, text, text, text, jsonb,
    integer);
CREATE OR REPLACE FUNCTION {{schema}}.enqueue(
    queue text, kind text, payload jsonb DEFAULT '{}', priority integer DEFAULT 0,
    run_at timestamptz DEFAULT now(), max_attempts integer DEFAULT NULL,
    unique_key text DEFAULT NULL, tenant text DEFAULT NULL, entity text DEFAULT NULL,
    metadata jsonb DEFAULT NULL, limit_weight integer DEFAULT NULL,
    unique_by text DEFAULT NULL, unique_fields text[] DEFAULT NULL, unique_period interval DEFAULT NULL,
    supersede boolean DEFAULT false, debounce interval DEFAULT NULL, throttle interval DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_modes integer := (CASE WHEN supersede THEN 1 ELSE 0 END) + (CASE WHEN debounce IS NOT NULL THEN 1 ELSE 0 END)
                       + (CASE WHEN throttle IS NOT NULL THEN 1 ELSE 0 END);
BEGIN
    IF v_modes > 1 THEN
        RAISE EXCEPTION 'skiplock: mode: at most one of supersede, debounce and throttle' USING ERRCODE = '22023';
    END IF;
    RETURN (SELECT e.id FROM {{schema}}.enqueue_job($1, $2, $3, $4, $5, $6, $7, $8, $9, false, $10, $11, $12, $13, $14,
        CASE WHEN supersede THEN 'supersede' WHEN debounce IS NOT NULL THEN 'debounce'
             WHEN throttle IS NOT NULL THEN 'throttle' END,
        coalesce(debounce, throttle)) AS e);
END
$$;

-- Issue 38 §2 (docs/security.md "Roles"): runs as the schema's owner, so
-- a producer role (grant_role) enqueues and signals without any privilege on
-- the tables; the search_path is pinned so that nothing a
-- caller creates can stand in for what the body names. Only the owner and
-- the roles grant_role gives it to may call it.
ALTER FUNCTION {{schema}}.enqueue SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
REVOKE EXECUTE ON FUNCTION {{schema}}.enqueue FROM PUBLIC;
