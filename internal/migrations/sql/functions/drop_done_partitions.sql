-- Drops every daily partition whose whole day ended more than keep ago:
-- one catalog operation per day, no row-by-row DELETE, no dead tuples.
-- Only partitions named jobs_done_YYYYMMDD are touched. Returns how many it
-- dropped.
CREATE OR REPLACE FUNCTION {{schema}}.drop_done_partitions(keep interval DEFAULT interval '7 days')
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    part    text;
    day_end timestamptz;
    dropped integer := 0;
BEGIN
    IF keep IS NULL OR keep < interval '0' THEN
        RAISE EXCEPTION 'skiplock: keep: must be a non-negative interval, got %', keep
            USING ERRCODE = '22023';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended({{schema_lit}} || '.partitions', 0));
    FOR part IN
        SELECT c.relname::text
        FROM pg_inherits AS i
        JOIN pg_class AS c ON c.oid = i.inhrelid
        WHERE i.inhparent = '{{schema}}.jobs_done'::regclass
          AND c.relname ~ '^jobs_done_[0-9]{8}$'
        ORDER BY c.relname
    LOOP
        day_end := (to_date(substr(part, 11), 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC';
        IF day_end <= now() - keep THEN
            EXECUTE format('DROP TABLE {{schema}}.%I', part);
            dropped := dropped + 1;
        END IF;
    END LOOP;
    RETURN dropped;
END
$$;

COMMENT ON FUNCTION {{schema}}.drop_done_partitions(interval) IS
    'skiplock: drops whole jobs_done_YYYYMMDD partitions whose day ended more than keep ago (never DELETE); returns how many it dropped.';

-- Issue 38 §2 (docs/security.md "Roles"): runs as the schema's owner, so
-- a worker role (grant_role) keeps the partitions and the ring without
-- owning the tables; the search_path is pinned so that nothing a
-- caller creates can stand in for what the body names. Only the owner and
-- the roles grant_role gives it to may call it.
ALTER FUNCTION {{schema}}.drop_done_partitions SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
REVOKE EXECUTE ON FUNCTION {{schema}}.drop_done_partitions FROM PUBLIC;
