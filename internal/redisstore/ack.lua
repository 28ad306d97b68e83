-- ack: Kafka confirmed these records; firing -> fired, lease dropped. Fenced.
-- KEYS[1] inflight, KEYS[2] fence
-- ARGV[1] token, ARGV[2] key prefix, then pairs id, gen
-- Returns {-1, stored_token} when fenced, else {acked}.
local stale = fence(KEYS[2], tonumber(ARGV[1]))
if stale then return {-1, stale} end
local acked = 0
local drop = {}
for i = 3, #ARGV, 2 do
  local id, g = ARGV[i], tonumber(ARGV[i + 1])
  local bkey = bucket(ARGV[2], id)
  local v = redis.call('HGET', bkey, id)
  if v then
    local st, gen, att, due, body = parse(v)
    if gen == g then
      if st == 'f' then
        redis.call('HSET', bkey, id, record('F', gen, att, due, body))
      end
      drop[#drop + 1] = id
      acked = acked + 1
    end
  end
end
if #drop > 0 then redis.call('ZREM', KEYS[1], unpack(drop)) end
return {acked}
