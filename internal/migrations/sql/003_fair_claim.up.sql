-- Ready rows without a tenant, in claim order. A tenant-capped claim treats
-- them as one more tenant and takes its share from here; without this index
-- it had to walk every tenant's ready rows to find them, so one tenant's
-- burst of 300,000 jobs made each capped claim read all 300,000. The cost is
-- one more index entry per untenanted enqueue (about 140 bytes of WAL).
CREATE INDEX jobs_ready_no_tenant ON {{schema}}.jobs (queue, priority DESC, run_at, id)
    WHERE state = 'ready' AND tenant IS NULL;
