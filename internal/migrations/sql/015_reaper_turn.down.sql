-- Back to every process reaping on its own timer.
DROP TABLE IF EXISTS {{schema}}.reaper_turn;
