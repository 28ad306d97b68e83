-- settle: a take's records went to Kafka. Those Kafka did not confirm go
-- back to the due set at their due time (the leader produces them again);
-- the take's lease is dropped, which makes the rest fired. Fenced.
-- A take whose lease ran out and was re-claimed (or adopted by a new
-- leader) is left alone: its tasks belong to the take that re-claimed them.
-- A task a worker already finished with a lean success (its copy did reach
-- Kafka) is not put back (see requeue).
-- KEYS[1] inflight, KEYS[2] due, KEYS[3] fence, KEYS[4] done
-- ARGV[1] token, ARGV[2] key prefix, ARGV[3] the take's lease member, then
-- pairs id, gen of the records to release
-- Returns {-1, stored_token} when fenced, else {fired, released}.
local stale = fence(KEYS[3], tonumber(ARGV[1]))
if stale then return {-1, stale} end
if redis.call('ZREM', KEYS[1], ARGV[3]) == 0 then return {0, 0} end
redis.call('DEL', lease_key(ARGV[2], ARGV[3]))
local released = 0
for i = 4, #ARGV, 2 do
  local id = ARGV[i]
  local bkey = bucket(ARGV[2], id)
  local v = redis.call('HGET', bkey, id)
  if v and requeue(KEYS[2], KEYS[4], bkey, id, v, gen_bytes(tonumber(ARGV[i + 1]))) then
    released = released + 1
  end
end
local n = tonumber(string.match(ARGV[3], ':(%d+)$')) or 0
return {n - (#ARGV - 3) / 2, released}
