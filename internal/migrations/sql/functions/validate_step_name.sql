-- Validation of a workflow's or a signal's name, shared by every entry point.
CREATE OR REPLACE FUNCTION {{schema}}.validate_step_name(p_field text, p_name text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_name IS NULL OR p_name = '' THEN
        RAISE EXCEPTION 'skiplock: %: must not be empty', p_field USING ERRCODE = '22023';
    ELSIF octet_length(p_name) > 128 THEN
        RAISE EXCEPTION 'skiplock: %: longer than 128 bytes', p_field USING ERRCODE = '22023';
    ELSIF p_name ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION 'skiplock: %: must not contain control characters', p_field USING ERRCODE = '22023';
    END IF;
END
$$;
