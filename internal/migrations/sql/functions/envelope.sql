-- A job's payload as one JSON document: the payload itself, or, for a job
-- whose ciphertext is stored as bytes (sealed, migration 24), the envelope
-- {"skiplock_encrypted": "v1.KEYID.BASE64URL"} it was enqueued as (payload
-- then holds {"skiplock_encrypted": "v1.KEYID"}). enqueue_one (given the
-- bytes, or a whole envelope) and the bulk enqueue store it split, so that
-- each copy of a sealed job's row (the claim's new version, the history,
-- the WAL of both) carries the ciphertext's bytes, not a third more of
-- base64 (docs/security.md). What
-- shows or exports a payload (job get --payload, the dashboard's reveal,
-- exports) reads it through here, so it sees what was enqueued.
CREATE OR REPLACE FUNCTION {{schema}}.envelope(payload jsonb, sealed bytea)
RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN sealed IS NULL THEN payload
                ELSE jsonb_build_object('skiplock_encrypted', (payload ->> 'skiplock_encrypted') || '.' ||
                     rtrim(translate(encode(sealed, 'base64'), E'+/\n', '-_'), '='))
           END
$$;

COMMENT ON FUNCTION {{schema}}.envelope(jsonb, bytea) IS
    'skiplock: a job''s payload as one JSON document: the payload, or the sealed payload''s envelope rebuilt from the key id in payload and the ciphertext in sealed.';
