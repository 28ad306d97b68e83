-- tokens: take up to n tokens for tasks of one priority. A task below the
-- bucket's min priority may only take a token that leaves at least reserve.
-- KEYS[1] bucket hash
-- ARGV[1] shift ms, ARGV[2] rate per second, ARGV[3] burst, ARGV[4] reserve,
-- ARGV[5] min priority, ARGV[6] n, ARGV[7] priority
-- Returns {granted, tokens after (string), now ms}
local now = now_ms(tonumber(ARGV[1]))
local rate, burst, reserve = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local minp, n, prio = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local tokens, ts = bucket_load(KEYS[1], rate, burst, now)
local avail = tokens
if prio < minp then avail = tokens - reserve end
local take = math.max(0, math.min(n, math.floor(avail)))
if take > 0 then
  tokens = tokens - take
  bucket_save(KEYS[1], tokens, ts, rate, burst)
end
return {take, string.format('%.17g', tokens), now}
