-- Statements of the tests' probe connections (NoticeConn, JITConn).

-- name: notices_to_client
-- Notices reach the client at client_min_messages = notice, the default;
-- set in case the server's default differs.
SELECT set_config('client_min_messages', 'notice', false);

-- name: jit_available
SELECT pg_jit_available();

-- name: load_auto_explain
LOAD 'auto_explain';

-- name: compile_and_explain_everything
-- Every statement's plan back to the client as a notice, and every
-- statement JIT-compiled (inlined, optimized) while jit is on.
SELECT set_config('auto_explain.log_min_duration', '0', false),
       set_config('auto_explain.log_level', 'notice', false),
       set_config('jit', 'on', false),
       set_config('jit_above_cost', '0', false),
       set_config('jit_inline_above_cost', '0', false),
       set_config('jit_optimize_above_cost', '0', false);

-- name: pin_horizon
-- A transaction that holds an xid (Pin): it pins the vacuum horizon of
-- this database until it ends.
BEGIN;
SELECT txid_current();
