-- The ring's size: how many generations jobs_g0..jobs_g<n-1> there are (one
-- taking inserts, one draining, one waiting to be truncated; why three is
-- enough: docs/generations.md). Every use reads it here: ring_gen,
-- rotate_ring, the tests that count the partitions. The partitions
-- themselves were created by migration 016; a different size needs a
-- migration that creates or drops them, and this file changed with it.
CREATE OR REPLACE FUNCTION {{schema}}.ring_size() RETURNS integer
LANGUAGE sql IMMUTABLE AS $$ SELECT 3 $$;
