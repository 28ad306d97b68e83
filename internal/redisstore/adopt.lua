-- adopt: a new shard leader raises the fence to its token and makes every
-- lease an earlier leader left in flight run out now (deadline 0), so that
-- its first takes re-claim those tasks at once (same generation, see
-- take.lua) instead of after the lease. The tasks stay taken, out of the
-- due set: the earlier leader may have produced them, and a worker may run
-- such a copy (a waiting-state record of its generation counts as fired),
-- so cancel and reschedule must keep answering "fired" (a requeue into the
-- due set let them answer 200 while the copy ran), and a growth's mover
-- leaves them on their shard until they are finished. Bounded: the caller
-- loops while remaining > 0.
-- KEYS[1] inflight, KEYS[2] due (unused), KEYS[3] fence
-- ARGV[1] token, ARGV[2] key prefix (unused), ARGV[3] max leases
-- Returns {-1, stored_token} when fenced, else {tasks in the leases it made
-- run out, remaining leases with a deadline still ahead}.
local stale = fence(KEYS[3], tonumber(ARGV[1]))
if stale then return {-1, stale} end
local members = redis.call('ZRANGE', KEYS[1], '(0', '+inf', 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[3]))
local tasks = 0
for _, member in ipairs(members) do
  redis.call('ZADD', KEYS[1], 'XX', 0, member)
  tasks = tasks + (tonumber(string.match(member, ':(%d+)$')) or 0)
end
return {tasks, redis.call('ZCOUNT', KEYS[1], '(0', '+inf')}
