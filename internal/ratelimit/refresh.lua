-- refresh: push a held slot's expiry to now + ttl (long handlers).
-- KEYS[1] the slot's set: a type's :run, a keyed rule's :ks or :k1
-- ARGV[1] slot ttl ms, ARGV[2] slot id (in :k1: the value), ARGV[3] the
-- set: '0' :run, '1' :ks (an expired slot leaves its value's count too:
-- slots_drop), '2' :k1, where the slot is the holder's only while its
-- expiry is ARGV[4], the one its holder set last (admitkeyed.lua)
-- Returns 0 when the slot had expired or was released (or, in :k1, is
-- another holder's), else 1, or in :k1 the slot's new expiry.
local now = now_ms()
local ttl, slot, set = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local exp = tonumber(redis.call('ZSCORE', KEYS[1], slot))
if exp == nil then return 0 end
if set == '2' and exp ~= tonumber(ARGV[4]) then return 0 end
if exp <= now then
  if set == '1' then
    slots_drop(KEYS[1], {slot})
  else
    redis.call('ZREM', KEYS[1], slot)
  end
  return 0
end
redis.call('ZADD', KEYS[1], int(now + ttl), slot)
redis.call('PEXPIRE', KEYS[1], int(ttl))
if set == '2' then return now + ttl end
return 1
