-- usagekeyed: read the usage of a type whose rule has a key or header
-- scope, bounded. The values looked at are at most `scan` of each of: the
-- most recently active of :keys (window and bucket state; the values idle
-- past the horizon are skipped, admitkeyed prunes them), the busiest
-- holders of slots (their counts in :ks, most negative first, and the
-- values holding their slot in :k1, latest expiry first) and the
-- values with a queue; the `top` busiest of them are returned (most slots
-- held, then most tasks waiting, then most admitted in the window; then by
-- value). It changes nothing.
-- KEYS as admitkeyed.lua's
-- ARGV[1] base, ARGV[2] window ms (0: no quota), ARGV[3] rate (0: no
-- bucket), ARGV[4] burst, ARGV[5] idle horizon ms, ARGV[6] scan, ARGV[7] top
-- Returns {now, active values, window sum, running sum, waiting sum,
--          rows...} where each row is {value, window count, tokens
--          (string), running, waiting}. Running is every live slot of the
-- type; the window and waiting sums are over the values looked at; active
-- is how many values there are with state, exact while each source holds
-- at most `scan`, else at least that many.
local now = now_ms()
local base = ARGV[1]
local win, rate, burst = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local horizon, scan, top = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local from = '(' .. int(now - horizon - math.floor(horizon / 4)) -- admitkeyed.lua's pruning
local qfrom = '(' .. int(now)
local nk = redis.call('ZCOUNT', KEYS[1], from, '+inf')
local n1 = redis.call('ZCOUNT', KEYS[6], qfrom, '+inf')
local nr = redis.call('ZCOUNT', KEYS[5], '-inf', '(0') + n1
local nq = redis.call('ZCOUNT', KEYS[2], qfrom, '+inf')
local running = redis.call('ZCOUNT', KEYS[5], qfrom, '+inf') + n1
local vals, seen = {}, {}
local function add(v)
  if not seen[v] then
    seen[v] = true
    vals[#vals + 1] = v
  end
end
for _, v in ipairs(redis.call('ZRANGE', KEYS[1], '+inf', from, 'BYSCORE', 'REV', 'LIMIT', 0, scan)) do add(v) end
for _, c in ipairs(redis.call('ZRANGE', KEYS[5], '-inf', '(0', 'BYSCORE', 'LIMIT', 0, scan)) do add(string.sub(c, 2)) end -- count_member's value
for _, v in ipairs(redis.call('ZRANGE', KEYS[6], '+inf', qfrom, 'BYSCORE', 'REV', 'LIMIT', 0, scan)) do add(v) end
for _, v in ipairs(redis.call('ZRANGE', KEYS[2], qfrom, '+inf', 'BYSCORE', 'LIMIT', 0, scan)) do add(v) end
local m = #vals
local active = m
if nk > scan or nr > scan or nq > scan then active = math.max(m, nk, nr, nq) end
local out = {now, active, 0, running, 0}
if m == 0 then return out end
local wv, bv, held, queued, cm = {}, {}, {}, {}, {}
if win > 0 then wv = redis.call('HMGET', KEYS[3], unpack(vals)) end
if rate > 0 then bv = redis.call('HMGET', KEYS[4], unpack(vals)) end
for j = 1, m do cm[j] = count_member(vals[j]) end
held = redis.call('ZMSCORE', KEYS[5], unpack(cm))
local one = redis.call('ZMSCORE', KEYS[6], unpack(vals))
queued = redis.call('ZMSCORE', KEYS[2], unpack(vals))
local rows, wsum, qsum = {}, 0, 0
for j, v in ipairs(vals) do
  local count, tokens, waiting = 0, 0, 0
  if win > 0 then
    local _
    _, count = window_field(wv[j], win, now)
  end
  if rate > 0 then tokens = bucket_field(bv[j], rate, burst, now) end
  if queued[j] then waiting = redis.call('ZCARD', value_key(base, v) .. 'q') end
  local r = -(tonumber(held[j]) or 0)
  if one[j] and tonumber(one[j]) > now then r = r + 1 end
  wsum, qsum = wsum + count, qsum + waiting
  rows[j] = {v, count, tokens, r, waiting}
end
table.sort(rows, function(a, b)
  if a[4] ~= b[4] then return a[4] > b[4] end
  if a[5] ~= b[5] then return a[5] > b[5] end
  if a[2] ~= b[2] then return a[2] > b[2] end
  return a[1] < b[1]
end)
out[3], out[5] = wsum, qsum
for i = 1, math.min(top, m) do
  local r = rows[i]
  out[#out + 1] = {r[1], r[2], string.format('%.17g', r[3]), r[4], r[5]}
end
return out
