-- take: a shard leader claims due tasks (due -> inflight with a lease) and
-- re-claims tasks whose lease expired. Fenced.
-- KEYS[1] due, KEYS[2] inflight (id -> lease deadline ms), KEYS[3] fence, KEYS[4] done, KEYS[5] err
-- ARGV[1] token, ARGV[2] max tasks, ARGV[3] lease ms, ARGV[4] key prefix,
-- ARGV[5] max finished records to purge (0: no purge this time)
-- Returns {-1, stored_token} when fenced, else
-- {now, next_due or -1, next_lease or -1, id1, record1, id2, record2, ...}
-- where each record already carries state f and the new generation.
-- An idle shard costs TIME, GET, and one ZRANGE on each of due and inflight.
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

local out = {now, -1, -1}
local leased = {}
local function claim(id, expired)
  local bkey = bucket(prefix, id)
  local v = redis.call('HGET', bkey, id)
  if not v then return false end
  local st, gen, att, due, body = parse(v)
  if expired and st ~= 'f' then return false end
  local rec = record('f', gen + 1, att, due, body)
  redis.call('HSET', bkey, id, rec)
  leased[#leased + 1] = now + lease
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
    if not claim(id, true) then gone[#gone + 1] = id end
  end
  if #gone > 0 then redis.call('ZREM', KEYS[2], unpack(gone)) end
  taken = #expired
end

-- due tasks, and the next due time from the same read
local left = max - taken
if left > 0 then
  local due = redis.call('ZRANGE', KEYS[1], '-inf', '+inf', 'BYSCORE', 'LIMIT', 0, left + 1, 'WITHSCORES')
  local ids = {}
  for i = 1, #due, 2 do
    local score = tonumber(due[i + 1])
    if score <= now and #ids < left then
      ids[#ids + 1] = due[i]
    else
      out[2] = score
      break
    end
  end
  if #ids > 0 then
    redis.call('ZREM', KEYS[1], unpack(ids))
    for _, id in ipairs(ids) do claim(id, false) end
  end
else
  local h = head(KEYS[1])
  if h then out[2] = h end
end
if #leased > 0 then redis.call('ZADD', KEYS[2], unpack(leased)) end

if #leased > 0 or taken > 0 then
  local nl = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if nl[2] then out[3] = tonumber(nl[2]) end
elseif l[2] then
  out[3] = tonumber(l[2]) -- nothing leased or re-claimed: the earliest lease is unchanged
end
return out
