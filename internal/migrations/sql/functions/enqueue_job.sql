-- enqueue_one without p_sealed: what enqueue (the SQL API) calls, and what
-- a producer may call. Its body was enqueue_one's until version 24, which
-- moved it there to add p_sealed without changing this signature: a
-- function dropped and created again fails once the calls racing the
-- upgrade (docs/migrations.md).
DROP FUNCTION IF EXISTS {{schema}}.enqueue_job(text, text, jsonb, integer, timestamptz, integer, text, text, text,
    boolean, jsonb, integer);
CREATE OR REPLACE FUNCTION {{schema}}.enqueue_job(
    p_queue text, p_kind text, p_payload jsonb, p_priority integer,
    p_run_at timestamptz, p_max_attempts integer, p_unique_key text,
    p_tenant text, p_entity text, p_bump boolean, p_metadata jsonb DEFAULT NULL,
    p_limit_weight integer DEFAULT NULL,
    p_unique_by text DEFAULT NULL, p_unique_fields text[] DEFAULT NULL, p_unique_period interval DEFAULT NULL,
    p_mode text DEFAULT NULL, p_mode_window interval DEFAULT NULL,
    OUT id bigint, OUT inserted boolean)
LANGUAGE plpgsql AS $$
BEGIN
    SELECT e.id, e.inserted INTO id, inserted
    FROM {{schema}}.enqueue_one(p_queue, p_kind, p_payload, p_priority, p_run_at, p_max_attempts, p_unique_key,
                                p_tenant, p_entity, p_bump, p_metadata, p_limit_weight, p_unique_by, p_unique_fields,
                                p_unique_period, p_mode, p_mode_window, NULL) AS e;
END
$$;

-- As enqueue_one (issue 38 §2): runs as the schema's owner, search_path
-- pinned; only the owner and the roles grant_role gives it to may call it.
ALTER FUNCTION {{schema}}.enqueue_job SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
REVOKE EXECUTE ON FUNCTION {{schema}}.enqueue_job FROM PUBLIC;
