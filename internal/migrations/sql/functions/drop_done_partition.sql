-- Drops the jobs_done partition of one UTC day, only if it holds exactly
-- expect_rows rows: the count an export of that day wrote (history export,
-- Config.HistoryExport). A row that reached the day after the export (a
-- move out of jobs_done_default) makes the count differ, and the partition
-- stays until it is exported again. Under the partitions' advisory lock
-- (as drop_done_partitions), with the partition locked before it is
-- counted, so no row can arrive between the count and the drop. Returns
-- whether it dropped (false: no such partition, or the count differs).
CREATE OR REPLACE FUNCTION {{schema}}.drop_done_partition(day date, expect_rows bigint)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    part text := 'jobs_done_' || to_char(day, 'YYYYMMDD');
    n    bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended({{schema_lit}} || '.partitions', 0));
    IF to_regclass(format('{{schema}}.%I', part)) IS NULL THEN
        RETURN false;
    END IF;
    EXECUTE format('LOCK TABLE {{schema}}.%I IN ACCESS EXCLUSIVE MODE', part);
    EXECUTE format('SELECT count(*) FROM {{schema}}.%I', part) INTO n;
    IF n <> expect_rows THEN
        RETURN false;
    END IF;
    EXECUTE format('DROP TABLE {{schema}}.%I', part);
    RETURN true;
END
$$;

COMMENT ON FUNCTION {{schema}}.drop_done_partition(date, bigint) IS
    'skiplock: drops the jobs_done partition of one UTC day if it holds exactly expect_rows rows (what its export wrote); returns whether it dropped.';
