-- Priority aging (issue 18 §4), opt-in per queue: a ready job of the queue
-- that has been due for longer than age_after is promoted to priority age_to
-- (never lowered), so a steady stream of higher-priority work cannot starve
-- it forever. The pass runs in every started client (internal/maintenance,
-- aging.go). Both NULL: no aging.
ALTER TABLE {{schema}}.queues
    ADD COLUMN age_after interval,
    ADD COLUMN age_to    integer,
    ADD CONSTRAINT queues_aging_check CHECK (
        (age_after IS NULL AND age_to IS NULL)
        OR (age_after >= interval '1 second' AND age_to BETWEEN -1000 AND 1000));
