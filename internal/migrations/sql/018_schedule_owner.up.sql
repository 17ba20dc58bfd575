-- Version 18 (issue 37 §4): a schedule may belong to the code that declares
-- it. Client.ScheduleSync(owner, ...) stores its schedules with owner set
-- and deletes that owner's schedules it no longer declares; schedules added
-- one by one (ScheduleAdd, ScheduleDeclare, `skiplock schedule add`, plain
-- SQL) have none and are never pruned.
ALTER TABLE {{schema}}.schedules ADD COLUMN owner text;
