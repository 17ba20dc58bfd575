-- Version 20: least privilege (issue 38 §2, docs/security.md "Roles").
-- The limits that validate_job applies live in a table only the schema's
-- owner can write, instead of the custom setting skiplock.max_payload_bytes
-- that any session could SET for itself. The rest of this version is in the
-- function files: validate_job reads this table and refuses payloads nested
-- deeper than Go's MaxPayloadDepth; enqueue, enqueue_job, signal and the
-- maintenance functions a worker calls run as the owner (SECURITY DEFINER,
-- with a pinned search_path) and are executable only by the roles that
-- grant_role names; grant_role is new.
CREATE TABLE {{schema}}.settings (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    max_payload_bytes integer NOT NULL DEFAULT 1048576 CHECK (max_payload_bytes > 0)
);
INSERT INTO {{schema}}.settings DEFAULT VALUES;
