-- settle: a take's records went to Kafka. Those Kafka did not confirm go
-- back to the due set at their due time (the leader produces them again);
-- then every lease the take still holds is dropped at once, which makes
-- the rest fired (state f without a lease; see ack.lua). Fenced.
-- Releasing first keeps a crash between the two steps safe: a record is
-- never left fired without having been confirmed.
-- KEYS[1] inflight, KEYS[2] due, KEYS[3] fence
-- ARGV[1] token, ARGV[2] key prefix, ARGV[3] the take's lease score, then
-- pairs id, gen of the records to release
-- Returns {-1, stored_token} when fenced, else {fired, released}.
local stale = fence(KEYS[3], tonumber(ARGV[1]))
if stale then return {-1, stale} end
local released = 0
for i = 4, #ARGV, 2 do
  local id, g = ARGV[i], tonumber(ARGV[i + 1])
  local s = redis.call('ZSCORE', KEYS[1], id)
  if s and tonumber(s) == tonumber(ARGV[3]) then
    local bkey = bucket(ARGV[2], id)
    local v = redis.call('HGET', bkey, id)
    redis.call('ZREM', KEYS[1], id)
    if v and requeue(KEYS[2], bkey, id, v, g) then
      released = released + 1
    end
  end
end
-- the take's remaining leases: one range of equal scores
local fired = redis.call('ZREMRANGEBYSCORE', KEYS[1], ARGV[3], ARGV[3])
return {fired, released}
