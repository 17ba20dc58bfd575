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

-- name: functions_table
-- The function files (sql/functions/*.sql) applied to this schema, with the
-- hash of each file's text: the runner applies a file whose hash differs,
-- after the versioned migrations, whenever the schema is at the latest
-- version. A down run forgets them all, so the next up applies every file.
CREATE TABLE IF NOT EXISTS {{schema}}.schema_functions (
    name       text PRIMARY KEY,
    sha256     text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now());

-- name: functions_applied
SELECT name, sha256 FROM {{schema}}.schema_functions;

-- name: function_record
--   parameters: the function's name, the hash of its file
INSERT INTO {{schema}}.schema_functions AS f (name, sha256) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE SET sha256 = excluded.sha256, applied_at = now();

-- name: functions_forget
--   parameter: the names of the files there are (NULL: forget every record)
DELETE FROM {{schema}}.schema_functions WHERE $1::text[] IS NULL OR name <> ALL ($1::text[]);

-- name: drop_functions_table
DROP TABLE IF EXISTS {{schema}}.schema_functions;

-- name: function_bodies_unchecked
-- A function file may call one applied after it (ring_gen reads ring_size):
-- the bodies are checked when they run, as pg_dump's restores do. Returns
-- the setting to restore.
SELECT current_setting('check_function_bodies'), set_config('check_function_bodies', 'off', true);

-- name: function_bodies_checked
--   parameter: the setting function_bodies_unchecked returned
SELECT set_config('check_function_bodies', $1, true);
