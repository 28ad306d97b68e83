-- usage: read a type's current usage without changing anything.
-- KEYS[1] window hash, KEYS[2] bucket hash, KEYS[3] running zset
-- ARGV[1] window ms (0: no quota), ARGV[2] rate (0: no bucket), ARGV[3] burst
-- Returns {window count, tokens (string), running (unexpired slots), now ms}
local now = now_ms()
local win, rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local count = 0
if win > 0 then
  local _
  _, count = window_load(KEYS[1], win, now)
end
local tokens = 0
if rate > 0 then tokens = bucket_load(KEYS[2], rate, burst, now) end
local running = redis.call('ZCOUNT', KEYS[3], '(' .. int(now), '+inf')
return {count, string.format('%.17g', tokens), running, now}
