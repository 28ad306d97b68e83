-- extend: a worker sets the deadline of its execution claim again, only if
-- it still holds it (a claim that expired, and may have been taken by
-- another run, is not touched).
-- KEYS[1] the shard's claims hash (see claim_holder in common.lua)
-- ARGV[1] the claim's field ("<id>:<gen>"), ARGV[2] the owner it was
-- claimed with, ARGV[3] TTL ms from now
-- Returns 1 when the deadline was set, 0 when the claim is not ours (or gone).
local now = now_ms()
if claim_holder(redis.call('HGET', KEYS[1], ARGV[1]), now) == ARGV[2] then
  redis.call('HSET', KEYS[1], ARGV[1], string.format('%d', now + tonumber(ARGV[3])) .. '|' .. ARGV[2])
  return 1
end
return 0
