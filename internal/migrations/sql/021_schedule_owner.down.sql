-- Back to version 20: no owner column, no drop_done_partition (the function
-- file version 21 added). 021 changed no other function.
ALTER TABLE {{schema}}.schedules DROP COLUMN owner;
DROP FUNCTION {{schema}}.drop_done_partition(date, bigint);
