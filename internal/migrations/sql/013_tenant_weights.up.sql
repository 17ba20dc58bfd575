-- Per-tenant weights for fair share (issue 18 §3): in a tenant-capped claim
-- (claim.sql, claim_capped) a tenant of weight w takes w jobs per round where
-- others take one, and up to w times the pool's cap. No row: weight 1.
-- Read by the capped claim only for queues that have a row here.
CREATE TABLE {{schema}}.tenant_weights (
    queue      text        NOT NULL,
    tenant     text        NOT NULL,
    weight     integer     NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, tenant),
    CONSTRAINT tenant_weights_weight_check CHECK (weight BETWEEN 2 AND 100)
);

COMMENT ON TABLE {{schema}}.tenant_weights IS
    'skiplock: fair-share weights of tenants in tenant-capped claims (skiplock queue weight).';
