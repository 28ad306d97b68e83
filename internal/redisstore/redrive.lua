-- redrive: a dead task is scheduled again now, with a fresh set of attempts
-- and the next generation (a Kafka copy of the dead firing stays stale).
-- KEYS[1] dead, KEYS[2] due, KEYS[3] bucket hash, KEYS[4] err hash, KEYS[5] stamp,
-- KEYS[6] done zset (the id leaves it, defensively: no path leaves a dead
-- task there, and a waiting record in it would read as a
-- lean success, see common.lua)
-- ARGV[1] id, ARGV[2] wake channel, ARGV[3] shard, ARGV[4] the caller's map (see check_map)
-- Returns {code, state, due}: 1 redriven, 0 not found, 4 not dead, 7 on its
-- way to another shard.
check_map(KEYS[5], ARGV[4])
local v = redis.call('HGET', KEYS[3], ARGV[1])
if not v then return {0, '', 0} end
if is_moving(v) then return {7, '', 0} end
local st, gen, att, due, body = parse(v)
if st ~= 'd' then return {4, st, due} end
local now = now_ms()
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[6], ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], record('s', gen + 1, 1, now, body))
redis.call('ZADD', KEYS[2], due_score(now, KEYS[3]), ARGV[1])
wake(KEYS[2], ARGV[2], ARGV[3], now, {[ARGV[1]] = true})
return {1, 's', now}
