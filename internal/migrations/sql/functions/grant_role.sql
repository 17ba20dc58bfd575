-- Gives a role what one component of skiplock needs and no more (issue 38
-- §2, docs/security.md "Roles"). `skiplock roles grant KIND ROLE` runs it:
--   SELECT * FROM skiplock.grant_role(kind => 'producer', grantee => 'checkout');
-- Every kind gets USAGE on the schema and SELECT on settings (the limits).
--   producer: EXECUTE on enqueue, enqueue_job, enqueue_one and signal, which run as the
--             owner (SECURITY DEFINER) and validate everything; no privilege
--             on any table, so no write past validation.
--   worker:   SELECT, INSERT, UPDATE, DELETE on the tables, the sequences,
--             EXECUTE on every function (the maintenance that needs the
--             owner runs through SECURITY DEFINER functions); never settings,
--             schema_migrations or schema_functions.
--   reader:   SELECT on every table and view but the payload, sealed and
--             output columns (job arguments, their ciphertext, step and task
--             outputs): the dashboard's read-only mode and stats. GRANT
--             SELECT (payload, sealed) ON skiplock.jobs TO it to let it see
--             them.
--   admin:    the worker's privileges and TRUNCATE: every CLI and dashboard
--             action; still not settings (only the owner changes limits),
--             no DDL.
-- Run it as the schema's owner, and again after an upgrade that adds a
-- table. Returns the statements it ran, in order.
CREATE OR REPLACE FUNCTION {{schema}}.grant_role(kind text, grantee name)
RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
    s constant text := {{schema_lit}};
    stmts text[] := ARRAY[format('GRANT USAGE ON SCHEMA %I TO %I', s, grantee),
                          format('GRANT SELECT ON %I.settings TO %I', s, grantee)];
    r record;
    stmt text;
BEGIN
    IF grantee IS NULL OR NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles AS o WHERE o.rolname = grantee) THEN
        RAISE EXCEPTION 'skiplock: grantee: no role %', grantee USING ERRCODE = '22023';
    END IF;
    CASE kind
    WHEN 'producer' THEN
        stmts := stmts || format('GRANT EXECUTE ON FUNCTION %1$I.enqueue, %1$I.enqueue_job, %1$I.enqueue_one, %1$I.signal TO %2$I', s, grantee);
    WHEN 'worker', 'admin' THEN
        stmts := stmts
            || format('GRANT SELECT, INSERT, UPDATE, DELETE%s ON ALL TABLES IN SCHEMA %I TO %I',
                      CASE WHEN kind = 'admin' THEN ', TRUNCATE' ELSE '' END, s, grantee)
            || format('REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON %1$I.settings, %1$I.schema_migrations, %1$I.schema_functions FROM %2$I',
                      s, grantee)
            || format('GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA %I TO %I', s, grantee)
            || format('GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA %I TO %I', s, grantee);
    WHEN 'reader' THEN
        FOR r IN
            SELECT c.relname,
                   bool_or(a.attname IN ('payload', 'output', 'sealed')) AS hides,
                   string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum)
                       FILTER (WHERE a.attname NOT IN ('payload', 'output', 'sealed')) AS cols
            FROM pg_catalog.pg_class AS c
            JOIN pg_catalog.pg_attribute AS a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
            WHERE c.relnamespace = s::regnamespace AND c.relkind IN ('r', 'p', 'v')
            GROUP BY c.relname
            ORDER BY c.relname
        LOOP
            stmts := stmts || CASE WHEN r.hides
                                   THEN format('GRANT SELECT (%s) ON %I.%I TO %I', r.cols, s, r.relname, grantee)
                                   ELSE format('GRANT SELECT ON %I.%I TO %I', s, r.relname, grantee) END;
        END LOOP;
    ELSE
        RAISE EXCEPTION 'skiplock: kind: must be producer, worker, reader or admin, got %', kind USING ERRCODE = '22023';
    END CASE;
    FOREACH stmt IN ARRAY stmts LOOP
        EXECUTE stmt;
        RETURN NEXT stmt;
    END LOOP;
END
$$;
