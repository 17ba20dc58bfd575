-- NULL or 1 to 1000000 (validate.go MaxLimitWeight). Raises 22023 naming
-- the field.
CREATE OR REPLACE FUNCTION {{schema}}.validate_limit_weight(p_limit_weight integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_limit_weight IS NOT NULL AND (p_limit_weight < 1 OR p_limit_weight > 1000000) THEN
        RAISE EXCEPTION 'skiplock: limit_weight: must be between 1 and 1000000, got %', p_limit_weight
            USING ERRCODE = '22023';
    END IF;
END
$$;
