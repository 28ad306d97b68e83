-- take: a shard leader claims due tasks (due -> inflight with a lease) and
-- re-claims tasks whose lease expired. Fenced.
-- KEYS[1] due, KEYS[2] inflight (id -> lease score), KEYS[3] fence, KEYS[4] done, KEYS[5] err,
-- KEYS[6] lease sequence (a counter)
-- ARGV[1] token, ARGV[2] max tasks, ARGV[3] lease ms, ARGV[4] key prefix,
-- ARGV[5] max finished records to purge (0: no purge this time)
-- Returns {-1, stored_token} when fenced, else
-- {now in us, next_due or -1, next_lease or -1, lease score or '', id1, record1, id2, record2, ...}
-- (now in microseconds lets the poller sleep until a due time to the
-- microsecond instead of up to 1 ms past it)
-- where each record already carries state f and the new generation.
-- Every claim of one take has the same lease score: the deadline in ms plus
-- a fraction that no other take in flight shares (a counter mod 1000, /1000),
-- so that settle.lua drops the take's leases with one ZREMRANGEBYSCORE.
-- The fence is checked on every take, idle or not, so that a deposed leader
-- learns it at its next take: an idle shard costs TIME, GET and one ZRANGE on
-- each of due and inflight.
local token = tonumber(ARGV[1])
local stale = fence(KEYS[3], token)
if stale then return {-1, stale} end
local max, lease, prefix = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local now = now_ms()

-- retention: drop finished records whose time is up (bounded, when asked)
local purge = tonumber(ARGV[5])
if purge > 0 then
  local old = redis.call('ZRANGE', KEYS[4], '-inf', now, 'BYSCORE', 'LIMIT', 0, purge)
  for _, id in ipairs(old) do
    local bkey = bucket(prefix, id)
    local v = redis.call('HGET', bkey, id)
    if v then
      local st = string.sub(v, 1, 1)
      if st == 'S' or st == 'c' then
        redis.call('HDEL', bkey, id)
        redis.call('HDEL', KEYS[5], id)
      end
    end
  end
  if #old > 0 then redis.call('ZREM', KEYS[4], unpack(old)) end
end

local out = {now_us or now * 1000, -1, -1, ''}
local leased = {}
local until_ms = now + lease
local score = nil -- the lease score, made on the first claim
-- claim rewrites only the header's state and generation (the attempt, due
-- time and body bytes are copied as they are).
local function claim(id, bkey, expired)
  local v = redis.call('HGET', bkey, id)
  if not v then return false end
  if expired and string.sub(v, 1, 1) ~= 'f' then return false end
  local rec = 'f' .. struct.pack('>I4', struct.unpack('>I4', v, 2) + 1) .. string.sub(v, 6)
  redis.call('HSET', bkey, id, rec)
  if not score then
    score = string.format('%d.%03d', until_ms, redis.call('INCR', KEYS[6]) % 1000)
    out[4] = score
  end
  leased[#leased + 1] = score
  leased[#leased + 1] = id
  out[#out + 1] = id
  out[#out + 1] = rec
  return true
end

-- expired leases first (they are the oldest work)
local taken = 0
local l = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
if l[2] and tonumber(l[2]) <= now then
  local expired = redis.call('ZRANGE', KEYS[2], '-inf', now, 'BYSCORE', 'LIMIT', 0, max)
  local gone = {}
  for _, id in ipairs(expired) do
    if not claim(id, bucket(prefix, id), true) then gone[#gone + 1] = id end
  end
  if #gone > 0 then redis.call('ZREM', KEYS[2], unpack(gone)) end
  taken = #expired
end

-- due tasks: only what is due is read (the future part of the set can be
-- long); the head tells whether anything is due and when the next one is.
local left = max - taken
local h = head(KEYS[1])
if h and h <= now and left > 0 then
  -- the scores carry each record's bucket (see due_score)
  local due = redis.call('ZRANGE', KEYS[1], '-inf', '(' .. string.format('%d', now + 1), 'BYSCORE', 'LIMIT', 0, left, 'WITHSCORES')
  -- what was read is the lowest-ranked part of the set: drop it by rank
  local k = #due / 2
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, k - 1)
  for i = 1, #due, 2 do
    local _, bkey = due_of_score(prefix, tonumber(due[i + 1]))
    claim(due[i], bkey, false)
  end
  if k < left then h = head(KEYS[1]) end
end
if h then out[2] = h end
if #leased > 0 then zadd_all(KEYS[2], leased) end

if #leased > 0 or taken > 0 then
  local nl = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if nl[2] then out[3] = tonumber(nl[2]) end
elseif l[2] then
  out[3] = tonumber(l[2]) -- nothing leased or re-claimed: the earliest lease is unchanged
end
return out
