DROP TABLE IF EXISTS {{schema}}.limits;
