-- Moves the ready rows of ring generation p_gen to jobs_keyed, in one
-- statement (DELETE ... RETURNING into an INSERT: a claim racing the move
-- finds the old version deleted and skips it, in READ COMMITTED as under SKIP
-- LOCKED), and returns how many. Every column of jobs is carried: the list is
-- read from the catalog, not written here, so a column added to jobs moves
-- with its row (TestCopiesCarryEveryJobsColumn); only gen changes, to
-- jobs_keyed's -1. Called by rotate_ring (docs/generations.md).
CREATE OR REPLACE FUNCTION {{schema}}.ring_evict(p_gen smallint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_cols text;
    v_moved bigint;
BEGIN
    SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) INTO v_cols
    FROM pg_attribute AS a
    WHERE a.attrelid = '{{schema}}.jobs'::regclass AND a.attnum > 0 AND NOT a.attisdropped AND a.attname <> 'gen';
    EXECUTE format($q$
        WITH m AS (DELETE FROM %1$I.%2$I AS j WHERE j.state = 'ready' RETURNING j.*)
        INSERT INTO %1$I.jobs (%3$s, gen) SELECT %3$s, -1 FROM m$q$,
        {{schema_lit}}, 'jobs_g' || p_gen, v_cols);
    GET DIAGNOSTICS v_moved = ROW_COUNT;
    RETURN v_moved;
END
$$;
