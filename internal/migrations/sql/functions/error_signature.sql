-- Normalises an error message for grouping: the first line only, with quoted
-- strings, UUIDs, hex ids and numbers replaced by placeholders, whitespace
-- collapsed and at most 200 characters. Idempotent: the signature of a
-- signature is itself, so a signature copied from `skiplock dlq list` can be
-- passed back as a filter.
CREATE OR REPLACE FUNCTION {{schema}}.error_signature(err text)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT left(btrim(
        regexp_replace(
        regexp_replace(
        regexp_replace(
        regexp_replace(
        regexp_replace(
            split_part(coalesce(err, ''), E'\n', 1),
            '"[^"]*"|''[^'']*''|`[^`]*`', '<str>', 'g'),
            '[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}', '<uuid>', 'g'),
            '\m(0[xX][0-9a-fA-F]+|(?=[0-9]*[a-fA-F])(?=[a-fA-F]*[0-9])[0-9a-fA-F]{6,})\M', '<hex>', 'g'),
            '[0-9]+(\.[0-9]+)?', '<n>', 'g'),
            '\s+', ' ', 'g')), 200)
$$;

COMMENT ON FUNCTION {{schema}}.error_signature(text) IS
    'skiplock: normalises an error for grouping (first line; quoted strings, UUIDs, hex ids and numbers become <str>, <uuid>, <hex>, <n>; at most 200 characters). Idempotent.';
