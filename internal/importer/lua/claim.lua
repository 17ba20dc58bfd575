-- Takes tasks out of asynq's reach, atomically with asynq's own scripts
-- (Redis runs one script at a time): each id still in the state it was
-- listed in (or any movable one: a scheduled task may have been forwarded
-- to pending meanwhile) is removed from its list or sorted set and recorded
-- in the import's holding hash as "state|process_at|" (no transaction yet).
-- A task asynq has made active is left where it is.
--   KEYS[1] the holding hash, asynq:{<queue>}:skiplock_import
--   ARGV[1] the queue's key prefix, asynq:{<queue>}:
--   ARGV[2] "1" to take archived tasks too
--   ARGV[3..] task ids
-- Returns id, state, process_at (unix seconds, "" for pending), msg per
-- task taken.
local out = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  local tkey = ARGV[1] .. "t:" .. id
  local state = redis.call("HGET", tkey, "state")
  local removed = 0
  local score = ""
  if state == "pending" then
    -- From the tail, where the import reads its batch (and asynq
    -- dequeues): LREM with count 0 would scan the whole list per task.
    removed = redis.call("LREM", ARGV[1] .. "pending", -1, id)
  elseif state == "scheduled" or state == "retry" or (state == "archived" and ARGV[2] == "1") then
    score = redis.call("ZSCORE", ARGV[1] .. state, id) or ""
    removed = redis.call("ZREM", ARGV[1] .. state, id)
  end
  if removed > 0 and redis.call("HEXISTS", KEYS[1], id) == 0 then
    redis.call("HSET", KEYS[1], id, state .. "|" .. score .. "|")
    table.insert(out, id)
    table.insert(out, state)
    table.insert(out, score)
    table.insert(out, redis.call("HGET", tkey, "msg"))
  end
end
return out
