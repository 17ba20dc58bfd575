DROP TABLE IF EXISTS {{schema}}.limit_starts;
DROP TABLE IF EXISTS {{schema}}.limits;
