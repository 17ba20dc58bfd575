-- Records the skiplock transaction that is about to enqueue held tasks, before
-- it commits: "state|process_at|xid". A later run asks PostgreSQL whether
-- that transaction committed (the tasks are in skiplock: only the Redis side
-- is left to remove) or not (they are imported again).
--   KEYS[1] the holding hash   ARGV[1] transaction id   ARGV[2..] task ids
for i = 2, #ARGV do
  local v = redis.call("HGET", KEYS[1], ARGV[i])
  if v then
    local state, score = string.match(v, "^([^|]*)|([^|]*)|")
    redis.call("HSET", KEYS[1], ARGV[i], state .. "|" .. score .. "|" .. ARGV[1])
  end
end
return 0
