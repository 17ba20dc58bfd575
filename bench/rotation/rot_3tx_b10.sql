-- The reference job life cycle (job_3tx_b10.sql) on q_rot: each batch lives in
-- the generation it was inserted in, and the UPDATE and DELETE name it (pruning).
WITH ins AS (INSERT INTO q_rot (gen, args) SELECT (SELECT gen FROM rot_cur), '{"n":1,"s":"small payload"}' FROM generate_series(1,10) RETURNING id, gen) SELECT array_agg(id) AS ids, min(gen) AS g FROM ins \gset
UPDATE q_rot SET state = 1, attempt = attempt + 1 WHERE gen = :g AND id = ANY (':ids'::bigint[]);
DELETE FROM q_rot WHERE gen = :g AND id = ANY (':ids'::bigint[]);
