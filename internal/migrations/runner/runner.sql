-- The migration runner's own statements: its lock, the schema and the
-- version table it records applied migrations in. `skiplock migrate sql`
-- exports the same statements (with the values in place of the
-- parameters), so a schema applied by either is recognised by both.

-- name: lock
-- Serializes migration runners of one schema for the transaction; other
-- installations in the same database use other keys.
--   parameter: the schema name
SELECT pg_advisory_xact_lock(hashtextextended('skiplock.migrate.' || $1, 0));

-- name: create_schema
CREATE SCHEMA IF NOT EXISTS {{schema}};

-- name: version_table
CREATE TABLE IF NOT EXISTS {{schema}}.schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now());

-- name: version_table_exists
SELECT to_regclass({{schema_lit}} || '.schema_migrations') IS NOT NULL;

-- name: applied
SELECT version, applied_at FROM {{schema}}.schema_migrations;

-- name: record
--   parameters: the version, the name
INSERT INTO {{schema}}.schema_migrations (version, name) VALUES ($1, $2) ON CONFLICT (version) DO NOTHING;

-- name: forget
--   parameter: the version
DELETE FROM {{schema}}.schema_migrations WHERE version = $1;

-- name: drop_version_table
DROP TABLE {{schema}}.schema_migrations;

-- name: schema_in_use
-- Whether anything besides skiplock's tables lives in the schema (after a
-- full down migration): then the schema itself stays.
SELECT EXISTS (SELECT 1 FROM pg_class WHERE relnamespace = {{schema_lit}}::regnamespace)
    OR EXISTS (SELECT 1 FROM pg_proc WHERE pronamespace = {{schema_lit}}::regnamespace)
    OR EXISTS (SELECT 1 FROM pg_type WHERE typnamespace = {{schema_lit}}::regnamespace);

-- name: drop_schema
DROP SCHEMA {{schema}};
