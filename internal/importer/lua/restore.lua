-- Gives held tasks back to asynq, where they were: a task skiplock cannot
-- take (its type is not a valid kind, its payload too large) stays asynq's.
-- A pending task goes back to the end asynq dequeues from next.
--   KEYS[1] the holding hash   ARGV[1] the queue's key prefix   ARGV[2..] ids
for i = 2, #ARGV do
  local id = ARGV[i]
  local v = redis.call("HGET", KEYS[1], id)
  if v then
    local state, score = string.match(v, "^([^|]*)|([^|]*)|")
    if state == "pending" then
      redis.call("RPUSH", ARGV[1] .. "pending", id)
    else
      redis.call("ZADD", ARGV[1] .. state, tonumber(score) or 0, id)
    end
    redis.call("HDEL", KEYS[1], id)
  end
end
return 0
