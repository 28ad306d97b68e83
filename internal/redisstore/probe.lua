-- probe: where does a task live while the shard map grows? Run on the
-- task's old shard by a caller routing by the new map (ARGV[2]); it also
-- stamps the shard with that count (check_map), after which no process
-- with the old map can create the task here: an answer "absent" stays true.
-- KEYS[1] bucket hash, KEYS[2] err hash, KEYS[3] stamp, KEYS[4] receipts
-- hash
-- ARGV[1] id, ARGV[2] the caller's map (see check_map)
-- Returns {value or false, last error or false, fire receipt or false}.
check_map(KEYS[3], ARGV[2])
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then return {false, false, false} end
return {v, redis.call('HGET', KEYS[2], ARGV[1]) or false, redis.call('HGET', KEYS[4], ARGV[1]) or false}
