-- common.lua is prepended to every script of this package.
--
-- Keys of one task type (all share the hash tag {<ns>:rl:<type>}):
--   window  hash  s = start of the current window (ms), n = tasks admitted in it;
--                 expires when the window ends
--   bucket  hash  t = tokens (float, "%.17g"), ts = time of t (ms); expires
--                 once the bucket would be full again (a missing bucket is full)
--   running zset  member = slot id, score = slot expiry (ms); expired members
--                 are removed before every count; and skiplist_pad (below),
--                 scored 0
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

-- bucket_refill returns the tokens at now of a bucket that held tokens
-- at ts (refilled at rate per second, ms granularity, capped at burst;
-- nil: a full bucket) and the time they are valid at (never before ts, so
-- a clock that steps back adds no tokens).
local function bucket_refill(tokens, ts, rate, burst, now)
  if tokens == nil or ts == nil then return burst, now end
  if now > ts then
    tokens = tokens + (now - ts) * rate / 1000
    ts = now
  end
  if tokens > burst then tokens = burst end
  return tokens, ts
end

-- bucket_load is bucket_refill of a type's bucket hash.
local function bucket_load(key, rate, burst, now)
  local v = redis.call('HMGET', key, 't', 'ts')
  return bucket_refill(tonumber(v[1]), tonumber(v[2]), rate, burst, now)
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

-- A type's :run and a keyed rule's :k1 (a limit of 1 per value) are
-- sorted sets of the slots held now, a few dozen to a few hundred members
-- that each admission and release adds and removes by member (and :k1
-- looks up). As a listpack (Redis' encoding of a set of at most 128 short
-- members) each of those is a scan of the whole set; skiplist_pad, a
-- member longer than zset-max-listpack-value, makes Redis create the set
-- as a skip list (the encoding comes from the whole ZADD that creates it,
-- and a skip list never goes back): BenchmarkAdmitKeyedSteady, inside
-- redis-server per task admitted and released under a type rule with ~96
-- slots held, 5.6-6.6 us as a listpack, 2.4-3.0 as a skip list. Its score
-- 0 is below every expiry, so that every read of the holders (from now
-- up) skips it, and the prune of expired holders starts above it; it is
-- no slot id (those are "<limiter id>-<seq>:<i>") and no value (a key or
-- header value is valid UTF-8, \255 never is). releaseone.lua deletes a
-- :k1 whose pad is all it holds; a :run with only its pad expires a slot
-- TTL after its last admission or renewal.
local skiplist_pad = '\255k1 pad -------------------------------------------------------------------'

-- slots_prune drops expired slots and returns how many are held (the pad
-- is neither: its score is 0).
local function slots_prune(key, now)
  redis.call('ZREMRANGEBYSCORE', key, '(0', int(now))
  return redis.call('ZCOUNT', key, '(0', '+inf')
end

-- Keys of a rule with a key or header scope (keys.go has the layout), all
-- under the type's hash tag. The state of every value is a field of a few
-- keys of the type, so that one HMGET/HSET serves a batch's values:
--   kw    hash  value -> "<window start ms> <count>" (window_field)
--   kb    hash  value -> "<tokens %.17g> <ms>" (bucket_field)
--   ks    zset  slot id -> expiry ms: every slot of the type (as :run); a
--               slot id ends with its value ("<prefix><i>:<value>"), and
--               '#' .. value -> minus the number of slots the value holds
--               (negative: below every expiry), for each value holding any
--   keys  zset  value -> last activity ms: the values with a window or
--               bucket field, pruned past an idle horizon (their kw, kb
--               fields go with them); a concurrency-only rule has none
--   qs    zset  value -> when its queue expires: the values with a queue
-- Only a value with waiting tasks has keys of its own, value_key(base, v) ..
--   q     zset  member = id of a waiting task, score = the first due (ms)
--               it waited with: the value's tasks in due order
--   qt    hash  id -> when the task is expected back (ms)
-- built here rather than passed in KEYS, so that one call decides a
-- batch's many values; they share the declared keys' slot (base holds the
-- tag), on Redis Cluster too. q and qt expire grace after the latest
-- expected return they held. The value is length-prefixed: no two values'
-- keys meet.
local function value_key(base, v)
  return base .. 'k:' .. #v .. ':' .. v .. ':'
end

-- queue_head returns the head of the value's queue and its expected return
-- (nil when the queue is empty), first dropping heads whose expected return
-- passed more than grace ago (their task will not come back to claim its
-- place). At most 64 are dropped per call; a longer run of stale heads
-- goes on the next calls.
local function queue_head(vk, now, grace)
  local q, qt = vk .. 'q', vk .. 'qt'
  local id, e
  for _ = 1, 64 do
    id = redis.call('ZRANGE', q, 0, 0)[1]
    if not id then return nil, nil end
    e = tonumber(redis.call('HGET', qt, id))
    if e and e + grace >= now then return id, e end
    redis.call('ZREM', q, id)
    redis.call('HDEL', qt, id)
  end
  id = redis.call('ZRANGE', q, 0, 0)[1]
  if not id then return nil, nil end
  return id, tonumber(redis.call('HGET', qt, id)) or now
end

-- queue_expire makes the value's queue keys last at least ms more; existed
-- says they already had a TTL (every write sets one), which GT then only
-- extends (GT on a key without a TTL does nothing).
local function queue_expire(vk, ms, existed)
  if existed then
    redis.call('PEXPIRE', vk .. 'q', int(ms), 'GT')
    redis.call('PEXPIRE', vk .. 'qt', int(ms), 'GT')
  else
    redis.call('PEXPIRE', vk .. 'q', int(ms))
    redis.call('PEXPIRE', vk .. 'qt', int(ms))
  end
end

-- expire_at_least makes key last at least ms more (PEXPIRE NX sets a TTL
-- on a key without one, GT then only extends it).
local function expire_at_least(key, ms)
  redis.call('PEXPIRE', key, int(ms), 'NX')
  redis.call('PEXPIRE', key, int(ms), 'GT')
end

-- index_touch records the activity of values in the type's :keys (pairs:
-- score, value, ...; GT keeps a later expected return) and keeps the key
-- until horizon after its latest score (maxscore). admitkeyed.lua prunes
-- it (with the values' fields).
local function index_touch(key, pairs, now, maxscore, horizon)
  if #pairs == 0 then return end
  redis.call('ZADD', key, 'GT', unpack(pairs))
  expire_at_least(key, maxscore + horizon - now)
end

-- window_field reads a value's window field ("<start> <count>", or nil):
-- the start of the window that holds now and its count so far.
local function window_field(f, win, now)
  local start = now - (now % win)
  if f then
    local s, n = string.match(f, '^(%d+) (%d+)$')
    if tonumber(s) == start then return start, tonumber(n) end
  end
  return start, 0
end

-- bucket_field reads a value's bucket field ("<tokens> <ms>", or nil: a
-- full bucket) as bucket_load does a bucket hash.
local function bucket_field(f, rate, burst, now)
  if not f then return burst, now end
  local t, at = string.match(f, '^(%S+) (%S+)$')
  return bucket_refill(tonumber(t), tonumber(at), rate, burst, now)
end

-- count_member is the member of :ks that counts value v's slots.
local function count_member(v) return '#' .. v end

-- slot_value returns the value of a keyed rule's slot id ("<prefix><i>:<value>",
-- the prefix "<limiter id>-<seq>:"): what follows its second ':'.
local function slot_value(slot)
  local a = string.find(slot, ':', 1, true)
  local b = a and string.find(slot, ':', a + 1, true)
  if not b then return nil end
  return string.sub(slot, b + 1)
end

-- slots_drop removes slots (a list of a keyed rule's slot ids, at most
-- 4,096 for unpack) from ks and takes those that were there off their
-- values' counts (count_member; a count that reaches zero leaves), in a few
-- commands whatever their number: a command per slot cost ~1 µs of Redis
-- CPU each. Returns how many were held.
local function slots_drop(ks, slots)
  if #slots == 0 then return 0 end
  local sc = redis.call('ZMSCORE', ks, unpack(slots))
  local gone, by, cms = {}, {}, {}
  for i = 1, #slots do
    if sc[i] then
      gone[#gone + 1] = slots[i]
      local v = slot_value(slots[i])
      if v then
        if by[v] == nil then
          by[v] = 0
          cms[#cms + 1] = count_member(v)
        end
        by[v] = by[v] + 1
      end
    end
  end
  if #gone == 0 then return 0 end
  redis.call('ZREM', ks, unpack(gone))
  if #cms > 0 then
    local cur = redis.call('ZMSCORE', ks, unpack(cms))
    local set, del = {}, {}
    for i = 1, #cms do
      local c = (tonumber(cur[i]) or 0) + by[string.sub(cms[i], 2)]
      if c < 0 then
        set[#set + 1] = c
        set[#set + 1] = cms[i]
      else
        del[#del + 1] = cms[i]
      end
    end
    if #set > 0 then redis.call('ZADD', ks, unpack(set)) end
    if #del > 0 then redis.call('ZREM', ks, unpack(del)) end
  end
  return #gone
end

-- slots_prune_keyed drops the expired slots of a keyed rule's ks
-- (slots_drop: their values' counts with them), at most 1,024 per call (the
-- rest on the next calls: a count stays high, never low, meanwhile).
-- Slots have positive scores (their expiry), counts negative ones.
local function slots_prune_keyed(ks, now)
  slots_drop(ks, redis.call('ZRANGE', ks, 0, int(now), 'BYSCORE', 'LIMIT', 0, 1024))
end
