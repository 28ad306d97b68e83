-- refresh: push a held slot's expiry to now + ttl (long handlers).
-- KEYS[1] running zset
-- ARGV[1] slot ttl ms, ARGV[2] slot id
-- Returns 1 when the slot was held, 0 when it had expired or was released.
local now = now_ms()
local ttl, slot = tonumber(ARGV[1]), ARGV[2]
local exp = tonumber(redis.call('ZSCORE', KEYS[1], slot))
if exp == nil then return 0 end
if exp <= now then
  redis.call('ZREM', KEYS[1], slot)
  return 0
end
redis.call('ZADD', KEYS[1], int(now + ttl), slot)
redis.call('PEXPIRE', KEYS[1], int(ttl))
return 1
