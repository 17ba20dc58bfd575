-- The ring's period in seconds: how long one generation takes inserts
-- (docs/generations.md). ring_gen, rotate_ring and its pin test read it.
CREATE OR REPLACE FUNCTION {{schema}}.ring_period() RETURNS integer
LANGUAGE sql IMMUTABLE AS $$ SELECT 5 $$;
