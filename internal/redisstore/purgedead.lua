-- purgedead: delete a dead task for good.
-- KEYS[1] dead, KEYS[2] bucket hash, KEYS[3] err hash, KEYS[4] stamp,
-- KEYS[5] receipts hash
-- ARGV[1] id, ARGV[2] the caller's map (see check_map)
-- Returns {code, state, due}: 1 deleted, 0 not found, 4 not dead, 7 on its
-- way to another shard.
check_map(KEYS[4], ARGV[2])
local v = redis.call('HGET', KEYS[2], ARGV[1])
if not v then return {0, '', 0} end
if is_moving(v) then return {7, '', 0} end
local st, gen, att, due, body = parse(v)
if st ~= 'd' then return {4, st, due} end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[5], ARGV[1])
return {1, 'd', due}
