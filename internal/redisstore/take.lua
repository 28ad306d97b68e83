-- take: a shard leader claims due tasks (due -> inflight with a lease) and
-- re-claims tasks whose lease expired. Fenced.
-- KEYS[1] due, KEYS[2] inflight (id -> lease deadline ms), KEYS[3] fence, KEYS[4] done, KEYS[5] err
-- ARGV[1] token, ARGV[2] max tasks, ARGV[3] lease ms, ARGV[4] key prefix, ARGV[5] max records to purge
-- Returns {-1, stored_token} when fenced, else
-- {now, next_due or -1, next_lease or -1, id1, record1, id2, record2, ...}
-- where each record already carries state f and the new generation.
local token = tonumber(ARGV[1])
local stale = fence(KEYS[3], token)
if stale then return {-1, stale} end
local max, lease, prefix = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local now = now_ms()

-- retention: drop finished records whose time is up (bounded)
local old = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now, 'LIMIT', 0, tonumber(ARGV[5]))
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
  redis.call('ZREM', KEYS[4], id)
end

local out = {now, -1, -1}
local function claim(id)
  local bkey = bucket(prefix, id)
  local v = redis.call('HGET', bkey, id)
  if not v then return end
  local st, gen, att, due, body = parse(v)
  local rec = record('f', gen + 1, att, due, body)
  redis.call('HSET', bkey, id, rec)
  redis.call('ZADD', KEYS[2], now + lease, id)
  out[#out + 1] = id
  out[#out + 1] = rec
end

local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, max)
for _, id in ipairs(expired) do
  redis.call('ZREM', KEYS[2], id)
  claim(id)
end
local left = max - #expired
if left > 0 then
  local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, left)
  for _, id in ipairs(due) do
    redis.call('ZREM', KEYS[1], id)
    claim(id)
  end
end
local h = head(KEYS[1])
if h then out[2] = h end
local l = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
if l[2] then out[3] = tonumber(l[2]) end
return out
