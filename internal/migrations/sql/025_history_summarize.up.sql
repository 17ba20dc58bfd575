-- Version 25: jobs_done's BRIN index on id (jobs_done_id) no longer asks
-- autovacuum to summarize each page range it fills (autosummarize). Each
-- filled range was a work item for autovacuum, whose list holds 256 and is
-- emptied only when an autovacuum worker next visits the database (once a
-- naptime, a minute by default): above about 3,000 completions a second
-- the list is full, and every request after that was dropped with a LOG
-- line, `request for BRIN range summarization for index ... was not
-- recorded`, written by the completing backend (17,218 of them in the
-- pressure suite's quarter of an hour, issue 40). The ranges are
-- summarized by summarize_done() instead (version 23): every client that
-- keeps the history runs it every 10 s (maintenance.Retention), and the
-- look-ups of finished jobs before they read, as before; autovacuum's
-- vacuums of the partitions summarize what is left.
--
-- A partitioned index takes no ALTER INDEX ... SET, so the option is
-- turned off on each partition's index, and ensure_done_partitions
-- (functions/ensure_done_partitions.sql) builds a new day's index with it
-- off before attaching the day, which adopts it; jobs_done_id itself
-- keeps autosummarize = on, which only a partition attached without its
-- own index would inherit.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT t.relid FROM pg_partition_tree('{{schema}}.jobs_done_id'::regclass) AS t WHERE t.isleaf
    LOOP
        EXECUTE format('ALTER INDEX %s SET (autosummarize = off)', r.relid::regclass);
    END LOOP;
END
$$;
