-- Version 21 (issue 37 §4): a schedule may belong to the code that declares
-- it. Client.ScheduleSync(owner, ...) stores its schedules with owner set
-- and deletes that owner's schedules it no longer declares; schedules added
-- one by one (ScheduleAdd, ScheduleDeclare, `skiplock schedule add`, plain
-- SQL) have none and are never pruned.
ALTER TABLE {{schema}}.schedules ADD COLUMN owner text;
--
-- Also (issue 37 §6, history export): the function drop_done_partition
-- (sql/functions/drop_done_partition.sql), which drops one day's jobs_done
-- partition only if it holds the rows its export wrote.
