-- Summarizes jobs_done's BRIN index on id (jobs_done_id) over the whole
-- page ranges filled since it last ran, in the partitions completions go to
-- now (today's, UTC, and the default), newest first, stopping at the first
-- range already summarized. A look-up by id (jobs_finished, job_get) reads
-- every page of every range not summarized, whatever ids it asks for, and
-- the index leaves its ranges to this function (version 25: autosummarize
-- off, whose requests to autovacuum overflowed its list at a few thousand
-- completions a second, each dropped one a LOG line); only a vacuum of the
-- partition summarizes them otherwise, and none comes with autovacuum off.
-- Whole ranges only: an insert into a summarized range updates its
-- summary, which the range being filled would cost every completion.
-- Called every 10 s by every client that keeps the history (the retention
-- pass history_summarize) and in every look-up's pipeline (jobs_finished): one
-- session at a time summarizes (a transaction-scoped advisory lock; the
-- others go straight to their look-up), and it gives up when another
-- session holds a partition (lock_timeout: autovacuum, a partition being
-- attached), leaving the rest for the next call. Returns how many ranges it
-- summarized.
CREATE OR REPLACE FUNCTION {{schema}}.summarize_done()
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    r      record;
    blk    bigint;
    n      integer := 0;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtextextended({{schema_lit}} || '.summarize_done', 0)) THEN
        RETURN 0;
    END IF;
    FOR r IN
        SELECT i.indexrelid AS idx, i.indrelid AS heap,
               coalesce((SELECT o.option_value::integer
                         FROM pg_class AS ic, pg_options_to_table(ic.reloptions) AS o
                         WHERE ic.oid = i.indexrelid AND o.option_name = 'pages_per_range'), 128) AS per_range
        FROM pg_partition_tree('{{schema}}.jobs_done_id'::regclass) AS t
        JOIN pg_index AS i ON i.indexrelid = t.relid
        JOIN pg_class AS c ON c.oid = i.indrelid
        WHERE t.isleaf
          AND c.relname IN ('jobs_done_default', 'jobs_done_' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD'))
    LOOP
        -- The first page of the last whole range.
        blk := (pg_relation_size(r.heap) / current_setting('block_size')::bigint / r.per_range - 1) * r.per_range;
        WHILE blk >= 0 LOOP
            EXIT WHEN brin_summarize_range(r.idx, blk) = 0;
            n := n + 1;
            blk := blk - r.per_range;
        END LOOP;
    END LOOP;
    RETURN n;
EXCEPTION WHEN lock_not_available THEN
    RETURN n;
END
$$;

COMMENT ON FUNCTION {{schema}}.summarize_done() IS
    'skiplock: summarizes jobs_done''s BRIN index on id over the whole page ranges filled since it last ran (today''s partition and the default); returns how many ranges.';

-- As drop_done_partitions: runs as the schema's owner (brin_summarize_range
-- needs the index's owner), search_path pinned; lock_timeout so that it
-- never queues behind autovacuum or a partition change.
ALTER FUNCTION {{schema}}.summarize_done SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET lock_timeout = '20ms';
REVOKE EXECUTE ON FUNCTION {{schema}}.summarize_done FROM PUBLIC;
