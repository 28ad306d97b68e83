-- cancel: a waiting task becomes cancelled; its record stays for the retention period.
-- KEYS[1] due zset, KEYS[2] bucket hash, KEYS[3] done zset (id -> expiry ms),
-- KEYS[4] stamp, KEYS[5] claims hash
-- (and, named from KEYS[1], the parked index of the task's type and the
-- shard's ptypes: see unindex_parked in common.lua)
-- ARGV[1] id, ARGV[2] retention ms, ARGV[3] the caller's map (see check_map)
-- Returns {code, state, due}: 1 cancelled, 0 not found, 4 conflict (not
-- waiting; state F when a leader took it, S after its lean success),
-- 7 moved (see is_moving). A cancel drops the claim of the task's
-- generation (see lean success in common.lua), and a parked task leaves
-- its type's parked index (unindex_parked).
check_map(KEYS[4], ARGV[3])
local v = redis.call('HGET', KEYS[2], ARGV[1])
if not v then return {0, '', 0} end
if is_moving(v) then return {7, '', 0} end
local st, gen, att, due, body = parse(v)
if not is_waiting(st) then return {4, st, due} end
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return {4, taken_state(KEYS[3], ARGV[1], v), due} end
unindex_parked(KEYS[1], ARGV[1], body)
redis.call('HSET', KEYS[2], ARGV[1], record('c', gen, att, due, body))
drop_claim(KEYS[5], ARGV[1], gen)
redis.call('ZADD', KEYS[3], now_ms() + tonumber(ARGV[2]), ARGV[1])
return {1, 'c', due}
