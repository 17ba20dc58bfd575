-- Fencing tokens: every claim takes its lease token from one sequence, so the
-- tokens of successive leases of the same job strictly increase (a claim can
-- only happen after the previous lease's claim committed). External systems
-- can then fence writes with compare-and-set on the token: accept a write
-- only if its token is at least the highest token seen for that job.
--
-- CACHE must stay 1: a per-session cache would hand out tokens out of order
-- across connections. nextval never returns a value twice, crashes included.
CREATE SEQUENCE {{schema}}.lease_tokens AS bigint MINVALUE 1 CACHE 1;

-- Leases granted before this migration carried random tokens; start above
-- every one of them so that the next lease of those jobs is still larger.
SELECT setval('{{schema}}.lease_tokens'::regclass,
              GREATEST(1, (SELECT max(lease_token) FROM {{schema}}.jobs)), true);
