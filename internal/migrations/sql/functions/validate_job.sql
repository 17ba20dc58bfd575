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
    -- issue 38 §5: Go's controlChar (validate.go), unicode.IsControl: C0,
    -- DEL and C1, what a terminal may act on. Unique key, tenant and entity
    -- are identifiers the CLI and the dashboard print; queue and kind cannot
    -- hold one (name_re). NUL cannot reach a text value at all.
    control_re constant text := '[\x01-\x1f\x7f-\x9f]';
    field text;
    val text;
    limit_bytes integer;
    ch text;
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
    -- Unique key, tenant and entity, each in turn as Go checks them
    -- (validateKey): its size, then the first control character, named as
    -- Go names it (U+XXXX and the bytes before its first occurrence), so the
    -- message is Go's word for word.
    FOREACH field IN ARRAY ARRAY['unique_key', 'tenant', 'entity'] LOOP
        val := CASE field WHEN 'unique_key' THEN p_unique_key WHEN 'tenant' THEN p_tenant ELSE p_entity END;
        CONTINUE WHEN val IS NULL;
        limit_bytes := CASE field WHEN 'unique_key' THEN 512 ELSE 256 END;
        IF val = '' OR octet_length(val) > limit_bytes THEN
            RAISE EXCEPTION 'skiplock: %: must be 1 to % bytes', field, limit_bytes USING ERRCODE = '22023';
        END IF;
        ch := substring(val FROM control_re);
        IF ch IS NOT NULL THEN
            RAISE EXCEPTION 'skiplock: %: contains the control character U+% at byte offset % '
                '(an identifier is printed by the CLI and the dashboard: no control characters)',
                field, lpad(upper(to_hex(ascii(ch))), 4, '0'), octet_length(split_part(val, ch, 1))
                USING ERRCODE = '22023';
        END IF;
    END LOOP;
END
$$;
