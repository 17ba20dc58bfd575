-- Version 17: every SQL function's current body lives in one file,
-- sql/functions/<name>.sql, which the runner applies after the versioned
-- migrations whenever the schema reaches the latest version (and records in
-- schema_functions). This version's own change is in those files: the ring's
-- size has one home, ring_size(), which ring_gen and rotate_ring read, and
-- the ring's move (ring_evict) carries every column of jobs, read from the
-- catalog. From this version on an up file carries no function body; a down
-- file restores the bodies of the version below it (docs/migrations.md).
SELECT 1;
