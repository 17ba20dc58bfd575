-- Back to version 19: no settings table, no grant_role; validate_job reads
-- the custom setting again and does not bound nesting; the functions that
-- ran as the owner run as their caller and are executable by PUBLIC again.
DROP FUNCTION {{schema}}.grant_role(text, name);

ALTER FUNCTION {{schema}}.enqueue SECURITY INVOKER RESET search_path;
ALTER FUNCTION {{schema}}.enqueue_job SECURITY INVOKER RESET search_path;
ALTER FUNCTION {{schema}}.signal SECURITY INVOKER RESET search_path;
ALTER FUNCTION {{schema}}.rotate_ring SECURITY INVOKER RESET search_path;
ALTER FUNCTION {{schema}}.ensure_done_partitions SECURITY INVOKER RESET search_path;
ALTER FUNCTION {{schema}}.drop_done_partitions SECURITY INVOKER RESET search_path;
GRANT EXECUTE ON FUNCTION {{schema}}.enqueue, {{schema}}.enqueue_job, {{schema}}.signal,
    {{schema}}.rotate_ring, {{schema}}.ensure_done_partitions, {{schema}}.drop_done_partitions TO PUBLIC;

-- Validation shared by every SQL entry point. Raises 22023
-- (invalid_parameter_value) with a message that names the field; the Go API
-- applies the same rules before it sends anything.
CREATE OR REPLACE FUNCTION {{schema}}.validate_job(
    p_queue text, p_kind text, p_payload jsonb, p_priority integer,
    p_run_at timestamptz, p_max_attempts integer, p_unique_key text,
    p_tenant text, p_entity text)
RETURNS void
LANGUAGE plpgsql STABLE AS $$
DECLARE
    name_re constant text := '^[A-Za-z0-9_][A-Za-z0-9_.:-]*$';
    max_payload bigint := coalesce(nullif(current_setting('skiplock.max_payload_bytes', true), '')::bigint, 1048576);
BEGIN
    IF p_queue IS NULL OR p_queue = '' THEN
        RAISE EXCEPTION 'skiplock: queue: must not be empty' USING ERRCODE = '22023';
    ELSIF octet_length(p_queue) > 128 THEN
        RAISE EXCEPTION 'skiplock: queue: longer than 128 bytes' USING ERRCODE = '22023';
    ELSIF p_queue !~ name_re THEN
        RAISE EXCEPTION 'skiplock: queue: must match %', name_re USING ERRCODE = '22023';
    END IF;
    IF p_kind IS NULL OR p_kind = '' THEN
        RAISE EXCEPTION 'skiplock: kind: must not be empty' USING ERRCODE = '22023';
    ELSIF octet_length(p_kind) > 128 THEN
        RAISE EXCEPTION 'skiplock: kind: longer than 128 bytes' USING ERRCODE = '22023';
    ELSIF p_kind !~ name_re THEN
        RAISE EXCEPTION 'skiplock: kind: must match %', name_re USING ERRCODE = '22023';
    END IF;
    IF p_payload IS NULL THEN
        RAISE EXCEPTION 'skiplock: payload: must not be null' USING ERRCODE = '22023';
    ELSIF jsonb_typeof(p_payload) <> 'object' THEN
        RAISE EXCEPTION 'skiplock: payload: must be a JSON object, got %', jsonb_typeof(p_payload) USING ERRCODE = '22023';
    ELSIF octet_length(p_payload::text) > max_payload THEN
        RAISE EXCEPTION 'skiplock: payload: % bytes exceeds the limit of % bytes', octet_length(p_payload::text), max_payload
            USING ERRCODE = '22023';
    END IF;
    IF p_priority IS NULL OR p_priority < -1000 OR p_priority > 1000 THEN
        RAISE EXCEPTION 'skiplock: priority: must be between -1000 and 1000, got %', p_priority USING ERRCODE = '22023';
    END IF;
    IF p_run_at IS NULL OR NOT isfinite(p_run_at) THEN
        RAISE EXCEPTION 'skiplock: run_at: must be a finite time' USING ERRCODE = '22023';
    ELSIF p_run_at < timestamptz '1970-01-01 00:00:00+00' THEN
        RAISE EXCEPTION 'skiplock: run_at: % is before 1970', p_run_at USING ERRCODE = '22023';
    ELSIF p_run_at > now() + interval '5 years' THEN
        RAISE EXCEPTION 'skiplock: run_at: % is more than 5 years ahead', p_run_at USING ERRCODE = '22023';
    END IF;
    IF p_max_attempts IS NOT NULL AND (p_max_attempts < 1 OR p_max_attempts > 1000) THEN
        RAISE EXCEPTION 'skiplock: max_attempts: must be between 1 and 1000, got %', p_max_attempts USING ERRCODE = '22023';
    END IF;
    IF p_unique_key IS NOT NULL AND (p_unique_key = '' OR octet_length(p_unique_key) > 512) THEN
        RAISE EXCEPTION 'skiplock: unique_key: must be 1 to 512 bytes' USING ERRCODE = '22023';
    END IF;
    IF p_tenant IS NOT NULL AND (p_tenant = '' OR octet_length(p_tenant) > 256) THEN
        RAISE EXCEPTION 'skiplock: tenant: must be 1 to 256 bytes' USING ERRCODE = '22023';
    END IF;
    IF p_entity IS NOT NULL AND (p_entity = '' OR octet_length(p_entity) > 256) THEN
        RAISE EXCEPTION 'skiplock: entity: must be 1 to 256 bytes' USING ERRCODE = '22023';
    END IF;
END
$$;

DROP TABLE {{schema}}.settings;
