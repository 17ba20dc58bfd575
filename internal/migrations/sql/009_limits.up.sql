-- Concurrency and rate limits (issue 18): at most `concurrency` running jobs
-- of a queue or of a kind, cluster-wide, or at most `rate` job starts per
-- `per` (a sliding window over limit_starts), either in total or per
-- partition value (the job's tenant, its entity, or a top-level field of
-- its payload).
-- Enforced by the claim itself (claim.sql, claim_limited): claimers of work
-- a limit covers take the limit's transaction-scoped advisory lock before
-- their claim statement, so its snapshot sees every running job the previous
-- holder claimed; the running count is derived from the jobs table, so a
-- crashed worker's slots come back when the reaper takes its leases back.
CREATE TABLE {{schema}}.limits (
    name        text        PRIMARY KEY,
    queue       text,
    kind        text,
    -- NULL: one count for everything the limit covers; 'tenant', 'entity',
    -- or 'arg:FIELD' (the payload's top-level FIELD as text): one count per
    -- value. Jobs without a value (no tenant, ...) are not limited by it.
    partition   text,
    concurrency integer,
    rate        integer,
    per         interval,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT limits_name_check CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$'),
    CONSTRAINT limits_scope_check CHECK (num_nonnulls(queue, kind) = 1),
    CONSTRAINT limits_partition_check CHECK (
        partition IS NULL OR partition IN ('tenant', 'entity')
        OR partition ~ '^arg:[A-Za-z_][A-Za-z0-9_]{0,62}$'),
    CONSTRAINT limits_cap_check CHECK (
        (concurrency BETWEEN 1 AND 1000000 AND rate IS NULL AND per IS NULL)
        OR (concurrency IS NULL AND rate BETWEEN 1 AND 1000000
            AND per BETWEEN interval '1 second' AND interval '1 day'))
);

-- The starts a rate limit counts: one row per job started under it, written
-- by the claim that started it (under the limit's lock), read over the
-- limit's window by the next claims, and pruned once older than the window
-- (internal/maintenance, limits pass). Rows of other limits never exist.
CREATE TABLE {{schema}}.limit_starts (
    name text        NOT NULL,
    key  text        NOT NULL,
    at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX limit_starts_name_at ON {{schema}}.limit_starts (name, at);

COMMENT ON TABLE {{schema}}.limits IS
    'skiplock: concurrency limits enforced by every claim (skiplock limit set|list|remove).';
