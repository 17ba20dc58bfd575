-- Version 23: summarize_done() (functions/summarize_done.sql), which
-- summarizes jobs_done's BRIN index on id over the page ranges filled since
-- it last ran, first in every look-up of finished jobs by id (Client.Wait,
-- JobResult): without it such a look-up read every page written since
-- autovacuum last summarized, which with autovacuum off is all of them. No
-- table changes. The function's body is its file, as every function's
-- from version 17 on.
SELECT 1;
