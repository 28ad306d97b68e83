-- ack: Kafka confirmed these records; their lease is dropped. Fenced.
-- The record keeps state f: a task in state f that holds no lease in the
-- in-flight set is fired (see Get). Not rewriting the record keeps the ack
-- at one HGET per task, the cheapest check that the lease still belongs to
-- this generation (a late ack must not drop a newer claim's lease).
-- KEYS[1] inflight, KEYS[2] fence
-- ARGV[1] token, ARGV[2] key prefix, then pairs id, gen
-- Returns {-1, stored_token} when fenced, else {acked}.
local stale = fence(KEYS[2], tonumber(ARGV[1]))
if stale then return {-1, stale} end
local drop = {}
for i = 3, #ARGV, 2 do
  local id = ARGV[i]
  local v = redis.call('HGET', bucket(ARGV[2], id), id)
  if v and struct.unpack('>I4', v, 2) == tonumber(ARGV[i + 1]) then
    local st = string.sub(v, 1, 1)
    if st == 'f' or st == 'F' then drop[#drop + 1] = id end
  end
end
if #drop > 0 then redis.call('ZREM', KEYS[1], unpack(drop)) end
return {#drop}
