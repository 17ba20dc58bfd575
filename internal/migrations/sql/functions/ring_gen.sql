-- The ring generation of this instant (the database clock): one of the
-- ring_size() partitions jobs_g0, jobs_g1, ...
CREATE OR REPLACE FUNCTION {{schema}}.ring_gen() RETURNS smallint
LANGUAGE sql VOLATILE AS $$
    SELECT (floor(extract(epoch FROM clock_timestamp()) / {{schema}}.ring_period())::bigint
            % {{schema}}.ring_size())::smallint
$$;
