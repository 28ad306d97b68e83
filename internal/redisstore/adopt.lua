-- adopt: a new shard leader raises the fence to its token and puts every
-- task still leased by an earlier leader back into the due set, so they fire
-- again at once instead of waiting for their lease to run out. Bounded:
-- the caller loops while remaining > 0.
-- KEYS[1] inflight, KEYS[2] due, KEYS[3] fence
-- ARGV[1] token, ARGV[2] key prefix, ARGV[3] max leases
-- Returns {-1, stored_token} when fenced, else {moved, remaining leases}.
local stale = fence(KEYS[3], tonumber(ARGV[1]))
if stale then return {-1, stale} end
local members = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[3]) - 1)
local moved = 0
for _, member in ipairs(members) do
  drop_lease(KEYS[1], ARGV[2], member, function(id, bkey, v, g)
    if requeue(KEYS[2], bkey, id, v, g) then moved = moved + 1 end
  end)
end
return {moved, redis.call('ZCARD', KEYS[1])}
