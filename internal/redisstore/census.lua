-- census: counts one chunk of a shard's sorted set by task type, for
-- GET /v1/counts (census.go). Read only; the chunk is the members of
-- ranks ARGV[2] .. ARGV[2] + ARGV[3] - 1, so that a call stays short and
-- only (type, count) pairs cross the wire, never a record.
-- KEYS[1] the set: the due, done or dead set of the shard; KEYS[2] the
-- shard's due set (its name gives the prefix the bucket hashes are named
-- from, see bucket)
-- ARGV[1] the set's kind: q due | o done | x dead; ARGV[2] the first rank;
-- ARGV[3] how many members; ARGV[4] the park offset (ParkOffset, ms)
-- Returns {examined, type, a, b, type, a, b, ...}: examined is how many
-- members the chunk held (fewer than ARGV[3]: the set ends there); per
-- type of the records counted, for q a = scheduled (state s) and b =
-- retrying (state r), parked members left out (their type's parked index
-- counts them exactly); for o a = succeeded (state S, or a waiting-state
-- record out of the due set: a lean success, see common.lua), cancelled
-- ones left out; for x a = dead. A record on its way to another shard
-- counts as the record it carries; a record gone or unreadable is not
-- counted (it is still examined).
local kind = ARGV[1]
local start = tonumber(ARGV[2])
local offset = tonumber(ARGV[4])
local due_key = KEYS[2]
local prefix = string.sub(due_key, 1, -4)
local m
if kind == 'q' then
  m = redis.call('ZRANGE', KEYS[1], start, start + tonumber(ARGV[3]) - 1, 'WITHSCORES')
else
  m = redis.call('ZRANGE', KEYS[1], start, start + tonumber(ARGV[3]) - 1)
end
local step = 1
if kind == 'q' then step = 2 end
local counts = {}
local order = {}
local function add(typ, i)
  local c = counts[typ]
  if not c then
    c = {0, 0}
    counts[typ] = c
    order[#order + 1] = typ
  end
  c[i] = c[i] + 1
end
for j = 1, #m, step do
  local id = m[j]
  local bkey
  local score = nil
  if kind == 'q' then
    score = tonumber(m[j + 1])
    local _
    _, bkey = due_of_score(prefix, score)
  else
    bkey = bucket(prefix, id)
  end
  local v = redis.call('HGET', bkey, id)
  if v and is_moving(v) then v = string.sub(v, 9) end
  if v and #v >= 13 then
    local st = string.sub(v, 1, 1)
    local typ = body_type(string.sub(v, 14))
    if typ then
      if kind == 'q' then
        local due = struct.unpack('>I6', v, 8)
        if math.floor(score) < due + offset then
          if st == 's' then add(typ, 1) elseif st == 'r' then add(typ, 2) end
        end
      elseif kind == 'o' then
        if st == 'S' or (is_waiting(st) and not redis.call('ZSCORE', due_key, id)) then add(typ, 1) end
      elseif st == 'd' then
        add(typ, 1)
      end
    end
  end
end
local out = {(#m) / step}
for _, typ in ipairs(order) do
  out[#out + 1] = typ
  out[#out + 1] = counts[typ][1]
  out[#out + 1] = counts[typ][2]
end
return out
