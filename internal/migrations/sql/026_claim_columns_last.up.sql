-- Version 26: the six columns a claim changes (attempts, state, lease_token,
-- attempted_at, locked_by, lease_expires_at) move to the end of jobs' row,
-- so that a claim's WAL record carries only the bytes it changes (issue 40).
-- PostgreSQL logs an update that stays on its page as the new row minus the
-- bytes it shares with the old one at its start and at its end. With these
-- columns in the middle (the third, seventh to ninth, eleventh and
-- fourteenth) the shared start ended at the twelfth byte, and the shared end
-- (the payload and what follows it) survived only when the bytes the claim
-- inserts kept gen's two-byte alignment, an even count that depends on the
-- worker id's length: 184 or 210 B a claim, by the worker id. At the end
-- they are the record's only data, about 136 B whatever the worker id
-- (docs/performance-log.md, 2026-12-02). Order among them: the heartbeat
-- changes lease_expires_at alone, last, so its record is that column.
--
-- PostgreSQL cannot reorder columns; each is added anew, copied, dropped
-- and renamed. Dropping one drops what names it, so what names them is
-- read from the catalog first and made again after, as it was: the
-- indexes (jobs_ready and its kin, partitioned, with each partition's index
-- by its own name, and the running indexes), the checks, the views
-- (long_runners, wait_p99) with their comments and grants, and the column
-- privileges grant_role gave the reader role. The copy rewrites every row
-- of jobs once (the backlog) under this migration's ACCESS EXCLUSIVE lock;
-- a queue's table holds its backlog only, and docs/migrations.md says so.
-- A dropped column stays in the catalog, invisible, and costs a row nothing
-- (a NULL bit). Rows in jobs_done, jobs_dead and the move tables keep
-- their order: they are written once and never updated by a claim.
-- One DO block, so the move is whole even where a tool runs each
-- statement on its own.
DO $$
DECLARE
    moved constant text[] := ARRAY['attempts', 'state', 'lease_token', 'attempted_at', 'locked_by', 'lease_expires_at'];
    tree oid[];
    indexes oid[];
    redo text[] := '{}';
    r record;
    stmt text;
BEGIN
    SELECT array_agg(t.relid) INTO tree FROM pg_partition_tree('{{schema}}.jobs'::regclass) AS t;

    -- Views reading the columns: their definitions, options, comments and
    -- grants.
    FOR r IN
        SELECT DISTINCT v.oid, v.oid::regclass::text AS name, pg_get_viewdef(v.oid) AS def,
               array_to_string(v.reloptions, ', ') AS options, obj_description(v.oid, 'pg_class') AS comment
        FROM pg_depend AS d
        JOIN pg_rewrite AS w ON w.oid = d.objid
        JOIN pg_class AS v ON v.oid = w.ev_class
        JOIN pg_attribute AS a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
        WHERE d.classid = 'pg_rewrite'::regclass AND d.refobjid = ANY (tree) AND a.attname = ANY (moved)
          AND v.oid <> d.refobjid
    LOOP
        redo := redo || format('CREATE VIEW %s%s AS %s', r.name,
                               coalesce(' WITH (' || nullif(r.options, '') || ')', ''), r.def);
        IF r.comment IS NOT NULL THEN
            redo := redo || format('COMMENT ON VIEW %s IS %L', r.name, r.comment);
        END IF;
        redo := redo || ARRAY(
            SELECT format('GRANT %s ON %s TO %s%s', x.privilege_type, r.name,
                          CASE WHEN x.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(x.grantee::regrole::text) END,
                          CASE WHEN x.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END)
            FROM pg_class AS c, aclexplode(c.relacl) AS x
            WHERE c.oid = r.oid AND x.grantee <> c.relowner);
        EXECUTE format('DROP VIEW %s', r.name);
    END LOOP;

    -- Checks on jobs that name the columns (the partitions inherit them).
    redo := redo || ARRAY(
        SELECT format('ALTER TABLE {{schema}}.jobs ADD CONSTRAINT %I %s', c.conname, pg_get_constraintdef(c.oid))
        FROM pg_constraint AS c
        WHERE c.conrelid = '{{schema}}.jobs'::regclass AND c.contype = 'c'
          AND EXISTS (SELECT 1 FROM pg_attribute AS a
                      WHERE a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey) AND a.attname = ANY (moved))
        ORDER BY c.conname);

    -- Indexes that name them: the partitioned ones first (made ON ONLY
    -- jobs), then each partition's, attached to its parent by name.
    SELECT array_agg(DISTINCT d.objid) INTO indexes
    FROM pg_depend AS d
    JOIN pg_index AS i ON i.indexrelid = d.objid
    JOIN pg_attribute AS a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
    WHERE d.classid = 'pg_class'::regclass AND d.refobjid = ANY (tree) AND a.attname = ANY (moved);
    redo := redo || ARRAY(
        SELECT pg_get_indexdef(c.oid)
        FROM pg_class AS c
        WHERE c.oid = ANY (indexes)
        ORDER BY c.relkind <> 'I', c.relname);
    redo := redo || ARRAY(
        SELECT format('ALTER INDEX %s ATTACH PARTITION %s', h.inhparent::regclass, h.inhrelid::regclass)
        FROM pg_inherits AS h
        WHERE h.inhrelid = ANY (indexes)
        ORDER BY h.inhrelid::regclass::text);

    -- Column privileges (grant_role's reader), on jobs and each partition.
    redo := redo || ARRAY(
        SELECT format('GRANT %s (%I) ON %s TO %s%s', x.privilege_type, a.attname, a.attrelid::regclass,
                      CASE WHEN x.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(x.grantee::regrole::text) END,
                      CASE WHEN x.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END)
        FROM pg_attribute AS a, aclexplode(a.attacl) AS x
        WHERE a.attrelid = ANY (tree) AND a.attname = ANY (moved) AND a.attacl IS NOT NULL);

    -- The move: new columns at the row's end, every row copied once, the
    -- old ones dropped (with what names them), the new ones renamed.
    ALTER TABLE {{schema}}.jobs
        ADD COLUMN attempts_026 integer NOT NULL DEFAULT 0,
        ADD COLUMN state_026 text NOT NULL DEFAULT 'ready',
        ADD COLUMN lease_token_026 bigint,
        ADD COLUMN attempted_at_026 timestamptz,
        ADD COLUMN locked_by_026 text,
        ADD COLUMN lease_expires_at_026 timestamptz;
    UPDATE {{schema}}.jobs
    SET attempts_026 = attempts, state_026 = state, lease_token_026 = lease_token,
        attempted_at_026 = attempted_at, locked_by_026 = locked_by, lease_expires_at_026 = lease_expires_at;
    ALTER TABLE {{schema}}.jobs
        DROP COLUMN attempts, DROP COLUMN state, DROP COLUMN lease_token,
        DROP COLUMN attempted_at, DROP COLUMN locked_by, DROP COLUMN lease_expires_at;
    FOREACH stmt IN ARRAY moved LOOP
        EXECUTE format('ALTER TABLE {{schema}}.jobs RENAME COLUMN %I TO %I', stmt || '_026', stmt);
    END LOOP;

    FOREACH stmt IN ARRAY redo LOOP
        EXECUTE stmt;
    END LOOP;
END
$$;

-- The planner's statistics of the six columns went with the old ones.
ANALYZE {{schema}}.jobs;
