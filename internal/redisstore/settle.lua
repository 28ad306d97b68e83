-- settle: a take's records went to Kafka. Those Kafka did not confirm go
-- back to the due set at their due time (the leader produces them again);
-- the take's lease is dropped, which makes the rest fired. Fenced.
-- A take whose lease ran out and was re-claimed (or adopted by a new
-- leader) is left alone: its tasks belong to the take that re-claimed them.
-- A task a worker already finished with a lean success (its copy did reach
-- Kafka) is not put back (see requeue).
-- The copies Kafka acknowledged get their fire receipt (see receipt.go):
-- one field each in the shard's receipts hash, straight from ARGV, one
-- HSET per 1000 tasks. A receipt of kind 'd' (its topic is not worked)
-- makes the task delivered without touching anything else (see
-- delivered in common.lua): the take's lease key becomes the purge list
-- of those tasks (is_delivered decides at purge time), under the retention's
-- expiry in the shard's delivered index. O(1) per take besides the HSET.
-- KEYS[1] inflight, KEYS[2] due, KEYS[3] fence, KEYS[4] done, KEYS[5]
-- receipts hash, KEYS[6] delivered index (list seq -> expiry ms)
-- ARGV[1] token, ARGV[2] key prefix, ARGV[3] the take's lease member,
-- ARGV[4] retention ms, ARGV[5] nf: how many records to release,
-- ARGV[6] how many receipts are of kind 'd', then nf pairs id, gen of the
-- records to release, then pairs id, receipt of the acknowledged copies
-- Returns {-1, stored_token} when fenced, else {fired, released, stored}
-- (stored 1 when the receipts were written: the lease was this take's).
local stale = fence(KEYS[3], tonumber(ARGV[1]))
if stale then return {-1, stale} end
if redis.call('ZREM', KEYS[1], ARGV[3]) == 0 then return {0, 0, 0} end
local lkey = lease_key(ARGV[2], ARGV[3])
local released = 0
local nf = tonumber(ARGV[5])
for i = 7, 6 + 2 * nf, 2 do
  local id = ARGV[i]
  local bkey = bucket(ARGV[2], id)
  local v = redis.call('HGET', bkey, id)
  if v and requeue(KEYS[2], KEYS[4], bkey, id, v, gen_bytes(tonumber(ARGV[i + 1]))) then
    released = released + 1
  end
end
for i = 7 + 2 * nf, #ARGV, 1000 do
  redis.call('HSET', KEYS[5], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
if tonumber(ARGV[6]) > 0 then
  local seq = string.match(ARGV[3], '^[^:]+')
  -- GET, SET and DEL rather than RENAME: a least-privilege ACL user of an
  -- earlier version may run this script (internal/acl)
  redis.call('SET', delivered_list(ARGV[2], seq), redis.call('GET', lkey))
  redis.call('DEL', lkey)
  redis.call('ZADD', KEYS[6], string.format('%d', now_ms() + tonumber(ARGV[4])), seq)
else
  redis.call('DEL', lkey)
end
local n = tonumber(string.match(ARGV[3], ':(%d+)$')) or 0
return {n - nf, released, 1}
