-- Validation shared by every SQL entry point. Raises 22023
-- (invalid_parameter_value) with a message that names the field; the Go API
-- applies the same rules before it sends anything (validate.go states each
-- limit once; TestSQLLimitsEqualGo probes both sides at each bound).
-- The payload size limit is read from settings, which only the schema's
-- owner can write: nothing a caller's session sets can raise it (migration
-- 020; it used to be the custom setting skiplock.max_payload_bytes).
CREATE OR REPLACE FUNCTION {{schema}}.validate_job(
    p_queue text, p_kind text, p_payload jsonb, p_priority integer,
    p_run_at timestamptz, p_max_attempts integer, p_unique_key text,
    p_tenant text, p_entity text)
RETURNS void
LANGUAGE plpgsql STABLE AS $$
DECLARE
    name_re constant text := '^[A-Za-z0-9_][A-Za-z0-9_.:-]*$';
    -- issue 38 §2: the limit lives where only the owner can change it. Read
    -- by the one row's key, so that under a caller's enable_seqscan = off
    -- (add_tasks, the claim's settings) it is an index scan, not a
    -- seq scan costed at 10^10 that JIT-compiles on every call (9 ms each).
    max_payload bigint := (SELECT s.max_payload_bytes FROM {{schema}}.settings AS s WHERE s.only_row);
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
    -- issue 38 §7: Go's MaxPayloadDepth (64). A container at level 64 (the
    -- object itself is level 0) is the 65th level of nesting.
    ELSIF jsonb_path_exists(p_payload, 'strict $.**{64} ? (@.type() == "object" || @.type() == "array")') THEN
        RAISE EXCEPTION 'skiplock: payload: nesting deeper than 64 levels' USING ERRCODE = '22023';
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
