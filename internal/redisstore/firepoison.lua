-- firepoison: a shard leader settles the tasks of a take that Kafka refused
-- for good (unknown topic, record too large, ...), before the take's
-- settle. Each one is either parked (back in the due set a little later,
-- the record untouched, so that it does not hold its shard back while its
-- grace runs) or, once its grace is over, made dead exactly as a worker's
-- dead outcome writes it (state d, the dead set, an entry of the attempt
-- history: see history_append in common.lua; no worker ran it, so the
-- entry has no start time), so that GET, the dead listing and redrive see
-- it. Fenced.
-- KEYS[1] inflight, KEYS[2] due, KEYS[3] fence, KEYS[4] dead, KEYS[5] err,
-- KEYS[6] done, KEYS[7] claims hash
-- ARGV[1] token, ARGV[2] key prefix, ARGV[3] the take's lease member,
-- ARGV[4] wake channel, ARGV[5] shard, then per task 5 values: id, gen,
-- dead-not-before (ms by Redis' clock; 0: park only), park ms, reason.
-- Returns {-1, stored_token} when fenced, else one code per task:
-- 1 dead, 2 parked, 0 left alone (the take's lease is gone, or the record
-- is gone, in another state, of another generation, back in the due set,
-- or succeeded: a worker ran a copy that reached Kafka before, see lean
-- success in common.lua). A task made dead loses the claim of its
-- generation.
-- A task is never made dead before its dead-not-before time by Redis'
-- clock: it is parked instead.
local stale = fence(KEYS[3], tonumber(ARGV[1]))
if stale then return {-1, stale} end
local out = {}
local n = (#ARGV - 5) / 5
if not redis.call('ZSCORE', KEYS[1], ARGV[3]) then
  for i = 1, n do out[i] = 0 end
  return out
end
local now = now_ms()
local min_new, added = nil, {}
for i = 1, n do
  local a = 5 * i + 1
  local id, g, not_before, park, reason = ARGV[a], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), ARGV[a + 4]
  local bkey = bucket(ARGV[2], id)
  local v = redis.call('HGET', bkey, id)
  local code = 0
  if v then
    local st, gen, att, due, body = parse(v)
    if gen == g and taken(KEYS[2], id, st) and not lean_done(KEYS[6], id) then
      if not_before > 0 and now >= not_before then
        redis.call('HSET', bkey, id, record('d', gen, att, due, body))
        redis.call('ZADD', KEYS[4], now, id)
        redis.call('HSET', KEYS[5], id, history_append(redis.call('HGET', KEYS[5], id),
          history_entry('', att, struct.pack('>I6', now), 'd', reason)))
        drop_claim(KEYS[7], id, gen)
        code = 1
      else
        local at = now + park
        redis.call('ZADD', KEYS[2], due_score(at, bkey), id)
        if min_new == nil or at < min_new then min_new = at end
        added[id] = true
        code = 2
      end
    end
  end
  out[i] = code
end
if min_new ~= nil then wake(KEYS[2], ARGV[4], ARGV[5], min_new, added) end
return out
