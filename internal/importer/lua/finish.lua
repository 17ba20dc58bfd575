-- Removes tasks that are in skiplock now: the task hash, its uniqueness lock
-- if it still holds it (as asynq's own delete does), and its holding entry.
--   KEYS[1] the holding hash   ARGV[1] the queue's key prefix   ARGV[2..] ids
for i = 2, #ARGV do
  local id = ARGV[i]
  local tkey = ARGV[1] .. "t:" .. id
  local unique_key = redis.call("HGET", tkey, "unique_key")
  if unique_key and unique_key ~= "" and redis.call("GET", unique_key) == id then
    redis.call("DEL", unique_key)
  end
  redis.call("DEL", tkey)
  redis.call("HDEL", KEYS[1], id)
end
return 0
