-- reschedule: move a waiting task to a new due time.
-- KEYS[1] due zset, KEYS[2] bucket hash, KEYS[3] stamp, KEYS[4] done zset,
-- KEYS[5] claims hash
-- (and, named from KEYS[1], the parked index of the task's type and the
-- shard's ptypes: see unindex_parked in common.lua)
-- ARGV[1] id, ARGV[2] due (absolute ms or "+<ms>"), ARGV[3] wake channel, ARGV[4] shard,
-- ARGV[5] the caller's map (see check_map)
-- Returns {code, state, due}: 1 moved, 0 not found, 4 conflict (not
-- waiting; state F when a leader took it, S after its lean success), 7 on
-- its way to another shard.
-- The generation goes up: a Kafka copy of an earlier firing (one Kafka
-- did not confirm, released to fire again) must not run before the new
-- due time, and the claim of the earlier generation is dropped (see lean
-- success in common.lua). A parked task is unparked by it (its new score
-- is its new due time) and leaves its type's parked index
-- (unindex_parked); it is parked again if it fires while its type is
-- still paused.
check_map(KEYS[3], ARGV[5])
local v = redis.call('HGET', KEYS[2], ARGV[1])
if not v then return {0, '', 0} end
if is_moving(v) then return {7, '', 0} end
local st, gen, att, odue, body = parse(v)
if not is_waiting(st) then return {4, st, odue} end
if taken(KEYS[1], ARGV[1], st) then return {4, taken_state(KEYS[4], ARGV[1], v), odue} end
local due
if string.sub(ARGV[2], 1, 1) == '+' then
  due = now_ms() + tonumber(string.sub(ARGV[2], 2))
else
  due = tonumber(ARGV[2])
end
redis.call('HSET', KEYS[2], ARGV[1], record(st, gen + 1, att, due, body))
drop_claim(KEYS[5], ARGV[1], gen)
unindex_parked(KEYS[1], ARGV[1], body)
redis.call('ZADD', KEYS[1], due_score(due, KEYS[2]), ARGV[1])
wake(KEYS[1], ARGV[3], ARGV[4], due, {[ARGV[1]] = true})
return {1, st, due}
