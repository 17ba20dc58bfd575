-- Back to version 22: no summarize_done (23 added it and changed no other
-- body).
DROP FUNCTION IF EXISTS {{schema}}.summarize_done();
