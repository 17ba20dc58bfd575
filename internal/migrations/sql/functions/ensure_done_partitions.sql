-- Creates the daily jobs_done partitions (jobs_done_YYYYMMDD, UTC) from
-- today through days_ahead, moving the rows of each day out of
-- jobs_done_default first. Completions and this pass meet every day (history
-- is kept by default), so it locks jobs_done_default (until its transaction
-- ends) only when it has a day to attach. Each day's BRIN index on id is
-- built before the ATTACH, which adopts it, with autosummarize off (version
-- 25): the ATTACH would otherwise give the day jobs_done_id's own options,
-- autosummarize on, whose requests to autovacuum overflow its list at a few
-- thousand completions a second, each dropped one a LOG line;
-- summarize_done() summarizes the ranges instead. Returns how many it
-- created.
CREATE OR REPLACE FUNCTION {{schema}}.ensure_done_partitions(days_ahead integer DEFAULT 7)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    today   date := (now() AT TIME ZONE 'UTC')::date;
    d       date;
    part    text;
    lo      timestamptz;
    hi      timestamptz;
    created integer := 0;
BEGIN
    IF days_ahead IS NULL OR days_ahead < 0 OR days_ahead > 366 THEN
        RAISE EXCEPTION 'skiplock: days_ahead: must be between 0 and 366, got %', days_ahead
            USING ERRCODE = '22023';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended({{schema_lit}} || '.partitions', 0));
    FOR d IN
        SELECT g::date FROM generate_series(today, today + days_ahead, interval '1 day') AS g
        UNION
        SELECT DISTINCT (x.finished_at AT TIME ZONE 'UTC')::date FROM {{schema}}.jobs_done_default AS x
        ORDER BY 1
    LOOP
        part := 'jobs_done_' || to_char(d, 'YYYYMMDD');
        CONTINUE WHEN to_regclass(format('{{schema}}.%I', part)) IS NOT NULL;
        lo := d::timestamp AT TIME ZONE 'UTC';
        hi := (d + 1)::timestamp AT TIME ZONE 'UTC';
        -- Hold off archiving into jobs_done_default until this transaction
        -- ends: a row for day d landing there between the move below and the
        -- ATTACH would make the ATTACH fail (SQLSTATE 23514). Completions
        -- only write there while a day has no partition, so they rarely wait.
        LOCK TABLE {{schema}}.jobs_done_default IN EXCLUSIVE MODE;
        EXECUTE format('CREATE TABLE {{schema}}.%I (LIKE {{schema}}.jobs_done INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', part);
        EXECUTE format('WITH m AS (DELETE FROM {{schema}}.jobs_done_default WHERE finished_at >= %L AND finished_at < %L RETURNING *) '
                       'INSERT INTO {{schema}}.%I SELECT * FROM m', lo, hi, part);
        EXECUTE format('CREATE INDEX %I ON {{schema}}.%I USING brin (id) WITH (pages_per_range = 16, autosummarize = off)',
                       part || '_id_idx', part);
        EXECUTE format('ALTER TABLE {{schema}}.jobs_done ATTACH PARTITION {{schema}}.%I FOR VALUES FROM (%L) TO (%L)',
                       part, lo, hi);
        EXECUTE format('COMMENT ON TABLE {{schema}}.%I IS %L', part,
                       'skiplock: jobs finished on ' || d || ' (UTC); dropped whole by drop_done_partitions()');
        created := created + 1;
    END LOOP;
    RETURN created;
END
$$;

COMMENT ON FUNCTION {{schema}}.ensure_done_partitions(integer) IS
    'skiplock: creates the daily jobs_done partitions (jobs_done_YYYYMMDD, UTC) from today through days_ahead and drains jobs_done_default; returns how many it created.';

-- Issue 38 §2 (docs/security.md "Roles"): runs as the schema's owner, so
-- a worker role (grant_role) keeps the partitions and the ring without
-- owning the tables; the search_path is pinned so that nothing a
-- caller creates can stand in for what the body names. Only the owner and
-- the roles grant_role gives it to may call it.
ALTER FUNCTION {{schema}}.ensure_done_partitions SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
REVOKE EXECUTE ON FUNCTION {{schema}}.ensure_done_partitions FROM PUBLIC;
