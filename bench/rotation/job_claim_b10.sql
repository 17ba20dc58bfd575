-- The plain reference table with the same claim through its fetch index.
INSERT INTO q_job (args) SELECT '{"n":1,"s":"small payload"}' FROM generate_series(1,10);
WITH c AS (UPDATE q_job AS q SET state = 1, attempt = attempt + 1 FROM (SELECT id FROM q_job WHERE queue = 'default' AND state = 0 ORDER BY scheduled_at, id LIMIT 10 FOR UPDATE SKIP LOCKED) AS x WHERE q.id = x.id RETURNING q.id) SELECT array_agg(id) AS ids FROM c \gset
DELETE FROM q_job WHERE id = ANY (':ids'::bigint[]);
