-- name: grant_role
-- Gives a database role what one component of skiplock needs (grant_role,
-- migration 020; docs/security.md "Roles") and returns the statements it ran.
--   $1 kind (producer, worker, reader, admin)  $2 the role
SELECT g.stmt FROM {{schema}}.grant_role($1::text, $2::name) AS g(stmt);
