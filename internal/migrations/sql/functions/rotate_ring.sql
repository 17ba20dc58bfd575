-- One turn of the ring, run about once a second by every worker process
-- (the first to take the advisory lock does the work; the others return at
-- once). The generation that will be current again in the next period
-- (ring_size() - 1 periods old) is emptied:
--   1. while the horizon is held back, its ready rows move (ring_evict) to
--      jobs_keyed, not to the current generation: a job moves at most once
--      however long it waits. (Moving a backlog to the current generation rewrote it every
--      turn it waited: a 40,000-job backlog drained at 7,500 jobs/s wrote
--      4,076 bytes of WAL per job instead of 1,902.) A job that waited more
--      than a period is the backlog's, which vacuum keeps as before;
--   2. if nothing is left in it (a running row is a long runner: it keeps its
--      generation until a later turn), it is locked ACCESS EXCLUSIVE within
--      p_lock_timeout_ms and truncated when still empty under that lock. A
--      lock not had in time (a long reader of jobs holds it) is tried again
--      on the next turn.
-- TRUNCATE removes only versions no live transaction can see as live: the
-- lock waits out every transaction that has touched the partition, and the
-- emptiness check reads after it. Returns the rows moved and the generation
-- truncated (NULL: none this turn). The design: docs/generations.md.
CREATE OR REPLACE FUNCTION {{schema}}.rotate_ring(p_lock_timeout_ms integer, OUT moved bigint, OUT truncated smallint)
LANGUAGE plpgsql AS $$
DECLARE
    v_slot bigint := floor(extract(epoch FROM clock_timestamp()) / {{schema}}.ring_period())::bigint;
    v_old smallint := ((v_slot + 1) % {{schema}}.ring_size())::smallint;
    v_part text := format('%I.%I', {{schema_lit}}, 'jobs_g' || v_old);
    v_left boolean;
BEGIN
    moved := 0;
    IF NOT pg_try_advisory_xact_lock(hashtext({{schema_lit}} || '.rotate_ring')) THEN
        RETURN;
    END IF;
    IF pg_relation_size(v_part::regclass) = 0 THEN
        RETURN; -- emptied already this period
    END IF;
    -- Stragglers move only while something holds the horizon back (a
    -- transaction or snapshot older than a period, a prepared transaction,
    -- a replication slot's xmin): otherwise vacuum keeps the generation as it
    -- kept the table, and moving a backlog would only cost (a 100,000-job
    -- bulk load drained in 12 s moved half of it: 1,246-1,338 bytes of WAL
    -- per job against 1,134, and 88-92 % of the ideal rate against 95-96 %).
    -- A role that cannot see other sessions' xmin (pg_read_all_stats) sees
    -- no pin, and the table grows under one as it did before 016.
    IF NOT EXISTS (SELECT 1 FROM pg_stat_activity AS a
                   WHERE a.pid <> pg_backend_pid() AND a.backend_type <> 'autovacuum worker'
                     AND (a.backend_xid IS NOT NULL OR a.backend_xmin IS NOT NULL)
                     AND a.xact_start < clock_timestamp() - {{schema}}.ring_period() * interval '1 second')
       AND NOT EXISTS (SELECT 1 FROM pg_prepared_xacts AS p
                       WHERE p.prepared < clock_timestamp() - {{schema}}.ring_period() * interval '1 second')
       AND NOT EXISTS (SELECT 1 FROM pg_replication_slots AS s WHERE s.xmin IS NOT NULL) THEN
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s)', v_part) INTO v_left;
        IF v_left THEN
            RETURN; -- no pin: vacuum keeps what is left; truncate once it is empty
        END IF;
    END IF;
    moved := {{schema}}.ring_evict(v_old);
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s)', v_part) INTO v_left;
    IF v_left THEN
        RETURN; -- a running job (or a row being moved by someone else)
    END IF;
    PERFORM set_config('lock_timeout', p_lock_timeout_ms || 'ms', true);
    BEGIN
        EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', v_part);
    EXCEPTION WHEN lock_not_available THEN
        RETURN;
    END;
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s)', v_part) INTO v_left;
    IF NOT v_left THEN
        EXECUTE format('TRUNCATE %s', v_part);
        truncated := v_old;
    END IF;
END
$$;

-- Issue 38 §2 (docs/security.md "Roles"): runs as the schema's owner, so
-- a worker role (grant_role) keeps the partitions and the ring without
-- owning the tables; the search_path is pinned so that nothing a
-- caller creates can stand in for what the body names. Only the owner and
-- the roles grant_role gives it to may call it.
ALTER FUNCTION {{schema}}.rotate_ring SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
REVOKE EXECUTE ON FUNCTION {{schema}}.rotate_ring FROM PUBLIC;
