-- name: sealed_ready_batch
-- Client.KeysRotate: a batch of ready jobs (due or scheduled) whose payload
-- is sealed (Config.Encryption), in id order after $1, locked until the
-- batch commits (claims skip them meanwhile, as they skip any locked row).
-- A running job is left to its worker.
--   $1 after this id  $2 batch size
SELECT j.id, coalesce(j.tenant, ''), j.payload::text, j.sealed
FROM {{schema}}.jobs AS j
WHERE j.state = 'ready' AND j.id > $1 AND j.payload ? 'skiplock_encrypted'
ORDER BY j.id
LIMIT $2
FOR UPDATE OF j SKIP LOCKED;

-- name: reseal_payload
-- One re-sealed payload, written while the batch holds its row lock,
-- split as enqueue_one stores it (envelope()).
--   $1 id  $2 payload (the key id)  $3 sealed (the ciphertext's bytes)
UPDATE {{schema}}.jobs AS j SET payload = $2::jsonb, sealed = $3::bytea WHERE j.id = $1 AND j.state = 'ready';

-- name: sealed_dead_batch
-- Client.KeysRotate: a batch of dead letters whose payload is sealed, in id
-- order after $1, locked until the batch commits (a replay waits), so that
-- retiring a key does not make them unreadable.
--   $1 after this id  $2 batch size
SELECT d.id, coalesce(d.tenant, ''), d.payload::text, d.sealed
FROM {{schema}}.jobs_dead AS d
WHERE d.id > $1 AND d.payload ? 'skiplock_encrypted'
ORDER BY d.id
LIMIT $2
FOR UPDATE OF d SKIP LOCKED;

-- name: reseal_dead_payload
-- One dead letter's re-sealed payload, split (as reseal_payload).
--   $1 id  $2 payload (the key id)  $3 sealed (the ciphertext's bytes)
UPDATE {{schema}}.jobs_dead AS d SET payload = $2::jsonb, sealed = $3::bytea WHERE d.id = $1;
