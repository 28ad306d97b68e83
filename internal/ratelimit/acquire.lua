-- acquire: take a concurrency slot (or refresh one already held by slot).
-- KEYS[1] running zset
-- ARGV[1] shift ms, ARGV[2] limit, ARGV[3] slot ttl ms, ARGV[4] slot id
-- Returns {1 acquired or 0 full, now ms, running, earliest expiry ms or -1}
local now = now_ms(tonumber(ARGV[1]))
local limit, ttl, slot = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local running = slots_prune(KEYS[1], now)
if redis.call('ZSCORE', KEYS[1], slot) or running < limit then
  if redis.call('ZADD', KEYS[1], int(now + ttl), slot) == 1 then running = running + 1 end
  redis.call('PEXPIRE', KEYS[1], int(ttl))
  return {1, now, running, -1}
end
local h = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local earliest = -1
if h[2] then earliest = tonumber(h[2]) end
return {0, now, running, earliest}
