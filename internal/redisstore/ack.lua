-- ack: Kafka confirmed these claims; their lease is dropped. Fenced.
-- The record keeps state f: a task in state f that holds no lease in the
-- in-flight set is fired (see Get). A lease is dropped only while it is the
-- one the claiming take set (its deadline is unique to that take): a late
-- ack must not drop a newer claim of the same task, whose record Kafka has
-- not confirmed. One ZSCORE per task, no record read.
-- KEYS[1] inflight, KEYS[2] fence
-- ARGV[1] token, then pairs id, lease deadline ms
-- Returns {-1, stored_token} when fenced, else {acked}.
local stale = fence(KEYS[2], tonumber(ARGV[1]))
if stale then return {-1, stale} end
local drop = {}
for i = 2, #ARGV, 2 do
  local s = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if s and tonumber(s) == tonumber(ARGV[i + 1]) then drop[#drop + 1] = ARGV[i] end
end
if #drop > 0 then redis.call('ZREM', KEYS[1], unpack(drop)) end
return {#drop}
