-- censusload: counts one chunk of a shard's due set by task type and due
-- time, for GET /v1/load's per-type figures (census.go). Read only. The
-- chunk is the members scored below ARGV[4] (the horizon's end), from the
-- ARGV[2]-th on (0-based), at most ARGV[3] of them: the set's order is by
-- due time, so the members of the horizon and the overdue ones come first
-- and parked ones (scored ParkOffset later) never.
-- KEYS[1] the shard's due set (its name gives the prefix the bucket
-- hashes are named from, see due_of_score)
-- ARGV[1] from (ms): the first bucket's start; ARGV[2] the first member's
-- offset; ARGV[3] how many members; ARGV[4] the horizon's end (ms,
-- exclusive); ARGV[5] a bucket's width (ms)
-- Returns {examined, type, bucket, count, type, bucket, count, ...}:
-- examined is how many members the chunk held (fewer than ARGV[3]: none
-- left in range); bucket 0 is overdue (due before from), bucket i >= 1
-- the i-th bucket. A record gone or unreadable is not counted.
local from = tonumber(ARGV[1])
local width = tonumber(ARGV[5])
local prefix = string.sub(KEYS[1], 1, -4)
local m = redis.call('ZRANGE', KEYS[1], '-inf', '(' .. ARGV[4], 'BYSCORE', 'LIMIT', ARGV[2], ARGV[3], 'WITHSCORES')
local counts = {}
local order = {}
for j = 1, #m, 2 do
  local id = m[j]
  local due, bkey = due_of_score(prefix, tonumber(m[j + 1]))
  local v = redis.call('HGET', bkey, id)
  if v and is_moving(v) then v = string.sub(v, 9) end
  if v and #v >= 13 then
    local typ = body_type(string.sub(v, 14))
    if typ then
      local b = 0
      if due >= from then b = math.floor((due - from) / width) + 1 end
      local k = typ .. '\0' .. b
      local c = counts[k]
      if not c then
        c = {typ, b, 0}
        counts[k] = c
        order[#order + 1] = c
      end
      c[3] = c[3] + 1
    end
  end
end
local out = {(#m) / 2}
for _, c in ipairs(order) do
  out[#out + 1] = c[1]
  out[#out + 1] = c[2]
  out[#out + 1] = c[3]
end
return out
