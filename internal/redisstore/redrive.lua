-- redrive: a dead task is scheduled again now, with a fresh set of attempts
-- and the next generation (a Kafka copy of the dead firing stays stale).
-- KEYS[1] dead, KEYS[2] due, KEYS[3] bucket hash, KEYS[4] err hash
-- ARGV[1] id, ARGV[2] wake channel, ARGV[3] shard
-- Returns {code, state, due}: 1 redriven, 0 not found, 4 not dead.
local v = redis.call('HGET', KEYS[3], ARGV[1])
if not v then return {0, '', 0} end
local st, gen, att, due, body = parse(v)
if st ~= 'd' then return {4, st, due} end
local now = now_ms()
local old_head = head(KEYS[2])
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], record('s', gen + 1, 1, now, body))
redis.call('ZADD', KEYS[2], due_score(now, KEYS[3]), ARGV[1])
wake(KEYS[2], ARGV[2], ARGV[3], now, old_head)
return {1, 's', now}
