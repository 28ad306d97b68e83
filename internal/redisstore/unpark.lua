-- unpark: parked tasks of one type go back into the due set at their due
-- time (one page of the type's parked index on one shard; see park.lua).
-- Each listed id leaves the index; one still parked (its due-set score at
-- least its record's due time + the park offset) gets its due score back,
-- any other (cancelled, rescheduled, finished or moved since) is only
-- dropped from the index. The type leaves ptypes when its index is empty.
-- Pollers are woken when the shard's earliest due time moved earlier.
-- KEYS[1] due, KEYS[2] parked index of the type, KEYS[3] ptypes,
-- KEYS[3+i] bucket hash of task i
-- ARGV[1] park offset ms, ARGV[2] type, ARGV[3] wake channel, ARGV[4] shard,
-- ARGV[4+i] id of task i
-- Returns {moved, left}: the tasks put back, the entries left in the index.
local offset = tonumber(ARGV[1])
local min_new, added = nil, {}
local moved = 0
for i = 5, #ARGV do
  local id, bkey = ARGV[i], KEYS[i - 1]
  redis.call('ZREM', KEYS[2], id)
  local v = redis.call('HGET', bkey, id)
  if v and is_waiting(string.sub(v, 1, 1)) then
    local _, _, _, due = parse(v)
    local score = redis.call('ZSCORE', KEYS[1], id)
    if score and math.floor(tonumber(score)) >= due + offset then
      redis.call('ZADD', KEYS[1], due_score(due, bkey), id)
      moved = moved + 1
      if min_new == nil or due < min_new then min_new = due end
      added[id] = true
    end
  end
end
local left = redis.call('ZCARD', KEYS[2])
if left == 0 then redis.call('SREM', KEYS[3], ARGV[2]) end
if min_new ~= nil then wake(KEYS[1], ARGV[3], ARGV[4], min_new, added) end
return {moved, left}
