-- As rot_3tx_b10.sql, but the batch is claimed through the fetch index (oldest
-- ready first, SKIP LOCKED) across the generations, as a queue's claim is.
INSERT INTO q_rot (gen, args) SELECT (SELECT gen FROM rot_cur), '{"n":1,"s":"small payload"}' FROM generate_series(1,10);
WITH c AS (UPDATE q_rot AS q SET state = 1, attempt = attempt + 1 FROM (SELECT gen, id FROM q_rot WHERE queue = 'default' AND state = 0 ORDER BY scheduled_at, id LIMIT 10 FOR UPDATE SKIP LOCKED) AS x WHERE q.gen = x.gen AND q.id = x.id RETURNING q.gen, q.id) SELECT array_agg(id) AS ids, array_agg(gen) AS gens FROM c \gset
DELETE FROM q_rot AS q USING unnest(':ids'::bigint[], ':gens'::int[]) AS d(id, gen) WHERE q.gen = d.gen AND q.id = d.id;
