-- usagekeyed: read the usage of a type whose rule has a key or header
-- scope, bounded: the values idle past the horizon are skipped (admitkeyed
-- prunes them), the `scan` most recently active are read and the `top`
-- busiest returned (most slots held, then most tasks waiting, then most
-- admitted in the window; then by value). It changes nothing.
-- KEYS as admitkeyed.lua's
-- ARGV[1] base, ARGV[2] window ms (0: no quota), ARGV[3] rate (0: no
-- bucket), ARGV[4] burst, ARGV[5] idle horizon ms, ARGV[6] scan, ARGV[7] top
-- Returns {now, active values, window sum, running sum, waiting sum,
--          rows...} where each row is {value, window count, tokens
--          (string), running, waiting}; the sums are over the scanned values.
local now = now_ms()
local base = ARGV[1]
local win, rate, burst = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local horizon, scan, top = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local from = '(' .. int(now - horizon - math.floor(horizon / 4)) -- admitkeyed.lua's pruning
local active = redis.call('ZCOUNT', KEYS[1], from, '+inf')
local vals = redis.call('ZRANGE', KEYS[1], '+inf', from, 'BYSCORE', 'REV', 'LIMIT', 0, scan)
local m = #vals
local out = {now, active, 0, 0, 0}
if m == 0 then return out end
local wv, bv, held, queued = {}, {}, {}, {}
if win > 0 then wv = redis.call('HMGET', KEYS[3], unpack(vals)) end
if rate > 0 then bv = redis.call('HMGET', KEYS[4], unpack(vals)) end
held = slots_held(KEYS[6], redis.call('HMGET', KEYS[5], unpack(vals)), m, now)
queued = redis.call('ZMSCORE', KEYS[2], unpack(vals))
local rows, wsum, rsum, qsum = {}, 0, 0, 0
for j, v in ipairs(vals) do
  local count, tokens, waiting = 0, 0, 0
  if win > 0 then
    local _
    _, count = window_field(wv[j], win, now)
  end
  if rate > 0 then tokens = bucket_field(bv[j], rate, burst, now) end
  if queued[j] then waiting = redis.call('ZCARD', value_key(base, v) .. 'q') end
  local running = #held[j]
  wsum, rsum, qsum = wsum + count, rsum + running, qsum + waiting
  rows[j] = {v, count, tokens, running, waiting}
end
table.sort(rows, function(a, b)
  if a[4] ~= b[4] then return a[4] > b[4] end
  if a[5] ~= b[5] then return a[5] > b[5] end
  if a[2] ~= b[2] then return a[2] > b[2] end
  return a[1] < b[1]
end)
out[3], out[4], out[5] = wsum, rsum, qsum
for i = 1, math.min(top, m) do
  local r = rows[i]
  out[#out + 1] = {r[1], r[2], string.format('%.17g', r[3]), r[4], r[5]}
end
return out
