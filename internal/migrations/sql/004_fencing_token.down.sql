DROP SEQUENCE IF EXISTS {{schema}}.lease_tokens;
