DROP TABLE IF EXISTS {{schema}}.tenant_weights;
