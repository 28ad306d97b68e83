-- release: Kafka did not confirm these records; firing -> back to the due set
-- at their due time, so the leader produces them again. Fenced.
-- KEYS[1] inflight, KEYS[2] due, KEYS[3] fence
-- ARGV[1] token, ARGV[2] key prefix, then pairs id, gen
-- Returns {-1, stored_token} when fenced, else {released}.
local stale = fence(KEYS[3], tonumber(ARGV[1]))
if stale then return {-1, stale} end
local n = 0
for i = 3, #ARGV, 2 do
  local id, g = ARGV[i], tonumber(ARGV[i + 1])
  local bkey = bucket(ARGV[2], id)
  local v = redis.call('HGET', bkey, id)
  if v and requeue(KEYS[2], bkey, id, v, g) then
    redis.call('ZREM', KEYS[1], id)
    n = n + 1
  end
end
return {n}
