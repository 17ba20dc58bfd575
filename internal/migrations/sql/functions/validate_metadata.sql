-- The same rules as a payload (a JSON object), with a fixed bound: metadata
-- is for small values, 64 KiB at most. Raises 22023 naming the field.
CREATE OR REPLACE FUNCTION {{schema}}.validate_metadata(p_metadata jsonb)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_metadata IS NULL THEN
        RETURN;
    ELSIF jsonb_typeof(p_metadata) <> 'object' THEN
        RAISE EXCEPTION 'skiplock: metadata: must be a JSON object, got %', jsonb_typeof(p_metadata) USING ERRCODE = '22023';
    ELSIF octet_length(p_metadata::text) > 65536 THEN
        RAISE EXCEPTION 'skiplock: metadata: % bytes exceeds the limit of 65536 bytes', octet_length(p_metadata::text)
            USING ERRCODE = '22023';
    END IF;
END
$$;
