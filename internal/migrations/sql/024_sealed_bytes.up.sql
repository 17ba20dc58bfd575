-- Version 24: a sealed payload's ciphertext as bytes. jobs, jobs_done and
-- jobs_dead get sealed (bytea, NULL for every payload stored whole): a job
-- enqueued with an envelope (docs/security.md) keeps its key id in payload,
-- {"skiplock_encrypted": "v1.KEYID"}, and its nonce, ciphertext and tag in
-- sealed, so each copy of its row carries the bytes instead of their
-- base64, a third more (400 B more WAL per copy of a 1 KiB payload).
-- envelope() (functions/envelope.sql) rebuilds the envelope; enqueue_one,
-- which version 24 moved enqueue_job's body to, takes the bytes (p_sealed)
-- or splits a whole envelope, and every statement that copies a row
-- carries sealed (enqueue_unique, cancel_workflow, retry_job among the
-- functions); the reader role's grant leaves it out, as it leaves out
-- payload (grant_role).
-- Rows stored before keep their envelopes whole: both forms open.
ALTER TABLE {{schema}}.jobs ADD COLUMN sealed bytea;
ALTER TABLE {{schema}}.jobs_done ADD COLUMN sealed bytea;
ALTER TABLE {{schema}}.jobs_dead ADD COLUMN sealed bytea;
