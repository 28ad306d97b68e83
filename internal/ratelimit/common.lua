-- common.lua is prepended to every script of this package.
--
-- Keys of one task type (all share the hash tag {<ns>:rl:<type>}):
--   window  hash  s = start of the current window (ms), n = tasks admitted in it;
--                 expires when the window ends
--   bucket  hash  t = tokens (float, "%.17g"), ts = time of t (ms); expires
--                 once the bucket would be full again (a missing bucket is full)
--   running zset  member = slot id, score = slot expiry (ms); expired members
--                 are removed before every count
--
-- "now" is Redis TIME in ms, so every worker shares one clock (the tests
-- that jump to the next window run a variant with a shifted clock:
-- clock_test.go).
-- Integers are written with '%d': Lua numbers are doubles and would
-- otherwise be formatted with an exponent.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function int(x) return string.format('%d', x) end

-- window_load returns the start of the window that holds now and how many
-- tasks it admitted so far.
local function window_load(key, win, now)
  local start = now - (now % win)
  local v = redis.call('HMGET', key, 's', 'n')
  if tonumber(v[1]) == start then return start, tonumber(v[2]) or 0 end
  return start, 0
end

local function window_save(key, start, count, win, now)
  redis.call('HSET', key, 's', int(start), 'n', int(count))
  redis.call('PEXPIRE', key, int(start + win - now))
end

-- bucket_load returns the tokens at now (refilled at rate per second, ms
-- granularity, capped at burst) and the time they are valid at (never
-- before the stored time, so a clock that steps back adds no tokens).
local function bucket_load(key, rate, burst, now)
  local v = redis.call('HMGET', key, 't', 'ts')
  local tokens, ts = tonumber(v[1]), tonumber(v[2])
  if tokens == nil or ts == nil then return burst, now end
  if now > ts then
    tokens = tokens + (now - ts) * rate / 1000
    ts = now
  end
  if tokens > burst then tokens = burst end
  return tokens, ts
end

-- bucket_max_ttl bounds a bucket key's TTL: 2^53 ms (285,000 years, in
-- effect never). The time to refill grows without bound as the rate
-- shrinks; '%d' of a double beyond the int64 range gives -2^63, and a
-- negative PEXPIRE deletes the key: the bucket would be full again at once
-- (a rule with a rate of 1e-17 admitted every task).
local bucket_max_ttl = 9007199254740992

-- bucket_save stores the tokens at ts; the key expires once the bucket
-- would be full again (a missing bucket is full), at most bucket_max_ttl.
local function bucket_save(key, tokens, ts, rate, burst)
  redis.call('HSET', key, 't', string.format('%.17g', tokens), 'ts', int(ts))
  local ttl = math.ceil((burst - tokens) * 1000 / rate) + 1000
  if not (ttl < bucket_max_ttl) then ttl = bucket_max_ttl end -- also inf and nan
  if ttl < 1000 then ttl = 1000 end
  redis.call('PEXPIRE', key, int(ttl))
end

-- slots_prune drops expired slots and returns how many are held.
local function slots_prune(key, now)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', int(now))
  return redis.call('ZCARD', key)
end
