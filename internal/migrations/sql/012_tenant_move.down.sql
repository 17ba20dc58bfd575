DROP TABLE IF EXISTS {{schema}}.moved_out;
DROP TABLE IF EXISTS {{schema}}.moved_in;
