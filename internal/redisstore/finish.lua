-- finish: a worker reports the outcome of one fired task.
-- KEYS[1] inflight, KEYS[2] due, KEYS[3] done, KEYS[4] dead, KEYS[5] bucket hash, KEYS[6] err hash
-- ARGV[1] id, ARGV[2] gen, ARGV[3] outcome: S succeeded | r retry (attempt+1) |
--   w wait (defer without using an attempt) | d dead
-- ARGV[4] due for r/w (absolute ms, or "+<ms>" from Redis TIME), ARGV[5] error text,
-- ARGV[6] retention ms, ARGV[7] wake channel, ARGV[8] shard
-- Returns {code, state, due}: 1 done, 0 not found, 5 stale generation,
-- 6 not in a fired state (already finished).
local id, g, outcome = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local v = redis.call('HGET', KEYS[5], id)
if not v then return {0, '', 0} end
local st, gen, att, due, body = parse(v)
if gen ~= g then return {5, st, due} end
if st ~= 'f' and st ~= 'F' then return {6, st, due} end
redis.call('ZREM', KEYS[1], id)
local now = now_ms()
if outcome == 'S' then
  redis.call('HSET', KEYS[5], id, record('S', gen, att, due, body))
  redis.call('ZADD', KEYS[3], now + tonumber(ARGV[6]), id)
  redis.call('HDEL', KEYS[6], id)
  return {1, 'S', due}
end
if outcome == 'd' then
  redis.call('HSET', KEYS[5], id, record('d', gen, att, due, body))
  redis.call('ZADD', KEYS[4], now, id)
  redis.call('HSET', KEYS[6], id, ARGV[5])
  return {1, 'd', due}
end
local ndue
if string.sub(ARGV[4], 1, 1) == '+' then
  ndue = now + tonumber(string.sub(ARGV[4], 2))
else
  ndue = tonumber(ARGV[4])
end
if outcome == 'r' then
  att = att + 1
  redis.call('HSET', KEYS[6], id, ARGV[5])
end
local old_head = head(KEYS[2])
local nst = waiting(att)
redis.call('HSET', KEYS[5], id, record(nst, gen, att, ndue, body))
redis.call('ZADD', KEYS[2], ndue, id)
wake(KEYS[2], ARGV[7], ARGV[8], ndue, old_head)
return {1, nst, ndue}
