-- admit: decide n tasks of one type against all of the type's limits at
-- once. The tasks are in decision order: the first h are at or above the
-- bucket's min priority ("high"), the rest below ("low"). Taken in order, a
-- task runs when it passes the window quota, then the token bucket (a low
-- task only while a token stays above the reserve), then the concurrency
-- limit; the first that fails stops the admission, so the tasks that run
-- are a prefix. Only tasks that run consume quota, tokens and slots.
-- KEYS[1] window hash, KEYS[2] bucket hash, KEYS[3] running zset
-- ARGV[1] window limit (0: no quota), ARGV[2] window ms
-- ARGV[3] rate per second (0: no bucket), ARGV[4] burst, ARGV[5] reserve
-- ARGV[6] concurrency limit (0: none), ARGV[7] slot ttl ms
-- ARGV[8] n, ARGV[9] h, ARGV[10] slot id prefix (slot of the i-th task: prefix .. i)
-- Returns {now ms, window start ms, window count, tokens (string), running,
--          earliest slot expiry ms or -1, admitted, reason high, reason low}
-- where a reason is what holds back the next task of that class:
-- 0 nothing, 1 window quota, 2 token bucket, 3 concurrency.
local now = now_ms()
local wlimit, win = tonumber(ARGV[1]), tonumber(ARGV[2])
local rate, burst, reserve = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local climit, ttl = tonumber(ARGV[6]), tonumber(ARGV[7])
local n, h = tonumber(ARGV[8]), tonumber(ARGV[9])

local big = n + 1 -- "no limit"
local wstart, wcount, wroom = 0, 0, big
if wlimit > 0 then
  wstart, wcount = window_load(KEYS[1], win, now)
  wroom = math.max(0, wlimit - wcount)
end
local tokens, ts = 0, now
if rate > 0 then tokens, ts = bucket_load(KEYS[2], rate, burst, now) end
local running, croom = 0, big
if climit > 0 then
  running = slots_prune(KEYS[3], now)
  croom = math.max(0, climit - running)
end

-- how many of a class may take tokens, given t tokens
local function troom(t, low)
  if rate == 0 then return big end
  if low then t = t - reserve end
  return math.max(0, math.floor(t))
end

local take = math.min(h, wroom, croom, troom(tokens, false))
if take == h then
  take = h + math.min(n - h, wroom - h, croom - h, troom(tokens - h, true))
end

-- what stops the next task of a class once take tasks ran
local function reason(low)
  if wcount + take >= wlimit and wlimit > 0 then return 1 end
  if troom(tokens - take, low) == 0 then return 2 end
  if running + take >= climit and climit > 0 then return 3 end
  return 0
end
local rhigh, rlow = reason(false), reason(true)

if take > 0 then
  if wlimit > 0 then
    wcount = wcount + take
    window_save(KEYS[1], wstart, wcount, win, now)
  end
  if rate > 0 then
    tokens = tokens - take
    bucket_save(KEYS[2], tokens, ts, rate, burst)
  end
  if climit > 0 then
    local expiry, prefix, zargs = int(now + ttl), ARGV[10], {}
    for i = 1, take do
      zargs[2 * i - 1] = expiry
      zargs[2 * i] = prefix .. i
    end
    if redis.call('EXISTS', KEYS[3]) == 0 then -- created here: as a skip list (skiplist_pad, common.lua)
      zargs[2 * take + 1], zargs[2 * take + 2] = 0, skiplist_pad
    end
    redis.call('ZADD', KEYS[3], unpack(zargs))
    redis.call('PEXPIRE', KEYS[3], int(ttl))
    running = running + take
  end
end

local earliest = -1
if climit > 0 and running >= climit then
  local e = redis.call('ZRANGE', KEYS[3], '(0', '+inf', 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
  if e[2] then earliest = tonumber(e[2]) end
end
return {now, wstart, wcount, string.format('%.17g', tokens), running, earliest, take, rhigh, rlow}
