-- The schema as the catalog holds it after the migrations: what `go generate
-- ./internal/migrations` writes to internal/migrations/schema.sql, and what
-- TestSchemaFileIsCurrent compares it with. Names and definitions only (no
-- OIDs, no sizes, no rows); partitions that maintenance creates per day
-- (jobs_done_YYYYMMDD) are left out, jobs_done_default is kept.

-- name: schema_dump
-- One row per statement, in a stable order: sequences, tables (columns in
-- their physical order, which SELECT * and RETURNING j.* follow), their
-- constraints, indexes, views, functions, triggers, comments.
-- (rendered for the schema)
WITH rel AS (
    SELECT c.oid, c.relname, c.relkind, c.reloptions, c.relispartition,
           pg_get_expr(c.relpartbound, c.oid) AS bound,
           (SELECT p.relname FROM pg_inherits AS i JOIN pg_class AS p ON p.oid = i.inhparent
            WHERE i.inhrelid = c.oid) AS parent
    FROM pg_class AS c
    WHERE c.relnamespace = {{schema_lit}}::regnamespace
      AND NOT (c.relispartition AND c.relname ~ '^jobs_done_[0-9]+$')
),
idx AS (
    SELECT x.indexrelid, x.indrelid, i.relname, i.relispartition
    FROM pg_index AS x JOIN pg_class AS i ON i.oid = x.indexrelid
    JOIN rel AS r ON r.oid = x.indrelid
)
SELECT section, name, line FROM (
    SELECT 1 AS section, c.relname AS name, 0 AS sub,
           format('CREATE SEQUENCE %I.%I AS %s;', {{schema_lit}}, c.relname, format_type(s.seqtypid, NULL))
           || CASE WHEN o.relname IS NULL THEN '' ELSE format(E'\n-- owned by %I.%I', o.relname, a.attname) END AS line
    FROM rel AS c JOIN pg_sequence AS s ON s.seqrelid = c.oid
    LEFT JOIN pg_depend AS d ON d.objid = c.oid AND d.classid = 'pg_class'::regclass AND d.deptype = 'a'
         AND d.refclassid = 'pg_class'::regclass
    LEFT JOIN pg_class AS o ON o.oid = d.refobjid
    LEFT JOIN pg_attribute AS a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
    WHERE c.relkind = 'S'
  UNION ALL
    -- A table: its columns, or, for a partition, its parent, its bound and
    -- the defaults it sets itself.
    SELECT 2, c.relname, 0,
           CASE WHEN c.relispartition THEN
               format('CREATE TABLE %I.%I PARTITION OF %I.%I %s', {{schema_lit}}, c.relname, {{schema_lit}}, c.parent, c.bound)
               || coalesce((SELECT string_agg(format(E'\n    -- column %I DEFAULT %s', a.attname, pg_get_expr(d.adbin, d.adrelid)), '' ORDER BY a.attnum)
                            FROM pg_attribute AS a JOIN pg_attrdef AS d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
                            JOIN pg_class AS p ON p.relname = c.parent AND p.relnamespace = {{schema_lit}}::regnamespace
                            LEFT JOIN pg_attrdef AS pd ON pd.adrelid = p.oid AND pd.adnum = a.attnum
                            WHERE a.attrelid = c.oid
                              AND pg_get_expr(d.adbin, d.adrelid) IS DISTINCT FROM pg_get_expr(pd.adbin, pd.adrelid)), '')
           ELSE
               format(E'CREATE TABLE %I.%I (\n', {{schema_lit}}, c.relname)
               || (SELECT string_agg(format('    %I %s', a.attname, format_type(a.atttypid, a.atttypmod))
                                     || CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END
                                     || coalesce(' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid), ''),
                                     E',\n' ORDER BY a.attnum)
                   FROM pg_attribute AS a
                   LEFT JOIN pg_attrdef AS d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
                   WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped)
               || E'\n)' || coalesce(' PARTITION BY ' || pg_get_partkeydef(c.oid), '')
           END
           || coalesce(' WITH (' || array_to_string(c.reloptions, ', ') || ')', '') || ';'
    FROM rel AS c WHERE c.relkind IN ('r', 'p')
  UNION ALL
    -- Constraints declared on the table itself (a partition's inherited ones
    -- are its parent's).
    SELECT 2, c.relname, 1,
           format('ALTER TABLE %I.%I ADD CONSTRAINT %I %s;', {{schema_lit}}, c.relname, k.conname, pg_get_constraintdef(k.oid))
    FROM pg_constraint AS k JOIN rel AS c ON c.oid = k.conrelid
    WHERE k.conislocal AND k.conparentid = 0
  UNION ALL
    -- Indexes that no constraint creates; a partition's copy of its parent's
    -- index is named, its definition is the parent's.
    SELECT 2, c.relname, 2,
           CASE WHEN x.relispartition
                THEN format('-- index %I: %I on %I', x.relname,
                            (SELECT p.relname FROM pg_inherits AS h JOIN pg_class AS p ON p.oid = h.inhparent
                             WHERE h.inhrelid = x.indexrelid), c.relname)
                ELSE pg_get_indexdef(x.indexrelid) || ';' END
    FROM idx AS x JOIN rel AS c ON c.oid = x.indrelid
    WHERE NOT EXISTS (SELECT 1 FROM pg_constraint AS k WHERE k.conindid = x.indexrelid AND k.conrelid = x.indrelid)
       OR x.relispartition
  UNION ALL
    SELECT 3, c.relname, 0,
           format(E'CREATE VIEW %I.%I AS\n%s', {{schema_lit}}, c.relname, pg_get_viewdef(c.oid, true))
    FROM rel AS c WHERE c.relkind = 'v'
  UNION ALL
    SELECT 4, p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')', 0,
           rtrim(pg_get_functiondef(p.oid), E'\n') || ';'
    FROM pg_proc AS p WHERE p.pronamespace = {{schema_lit}}::regnamespace
  UNION ALL
    SELECT 5, c.relname || '.' || t.tgname, 0, pg_get_triggerdef(t.oid, true) || ';'
    FROM pg_trigger AS t JOIN rel AS c ON c.oid = t.tgrelid
    WHERE NOT t.tgisinternal AND t.tgparentid = 0
  UNION ALL
    SELECT 6, c.relname, 0,
           format('COMMENT ON %s %I.%I IS %L;', CASE c.relkind WHEN 'v' THEN 'VIEW' ELSE 'TABLE' END,
                  {{schema_lit}}, c.relname, obj_description(c.oid, 'pg_class'))
    FROM rel AS c WHERE obj_description(c.oid, 'pg_class') IS NOT NULL
  UNION ALL
    SELECT 6, c.relname || '.' || a.attname, 0,
           format('COMMENT ON COLUMN %I.%I.%I IS %L;', {{schema_lit}}, c.relname, a.attname, col_description(c.oid, a.attnum))
    FROM rel AS c JOIN pg_attribute AS a ON a.attrelid = c.oid
    WHERE a.attnum > 0 AND col_description(c.oid, a.attnum) IS NOT NULL
  UNION ALL
    SELECT 6, p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')', 0,
           format('COMMENT ON FUNCTION %I.%I(%s) IS %L;', {{schema_lit}}, p.proname, pg_get_function_identity_arguments(p.oid),
                  obj_description(p.oid, 'pg_proc'))
    FROM pg_proc AS p WHERE p.pronamespace = {{schema_lit}}::regnamespace AND obj_description(p.oid, 'pg_proc') IS NOT NULL
) AS s
ORDER BY section, name COLLATE "C", sub, line COLLATE "C";
