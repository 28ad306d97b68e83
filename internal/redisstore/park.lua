-- park: a worker defers fired tasks of a paused type (of one shard) without
-- using an attempt. Each goes back into the due set at its due time +
-- ARGV[1] (ParkOffset: 2^40 ms, about 35 years; see park.go), so that no
-- take fires it, with the next generation (its Kafka copy is stale from then
-- on), and into its type's parked index, which unpark walks on resume. The
-- record keeps its waiting state and due time: cancel, reschedule and a
-- shard move see a parked task as a waiting one (a move recomputes its score
-- from the record, so it arrives unparked). A due time more than half the
-- offset in the past parks at now - offset/2 + offset instead, so that a
-- parked score always lies far in the future.
-- Tasks of one or more shards of one Redis node (a call of several shards
-- only where one redis-server holds every shard, see packCalls).
-- ARGV[1] park offset ms, then one section per shard: n, then per task id,
-- gen, type, owner of the execution claim ('' none): the claim is deleted
-- if it holds owner, whatever the code (the worker is done with its claim
-- either way); a parked task's claim of its generation is dropped whoever
-- holds it (see lean success in common.lua)
-- KEYS, per section: due, ptypes (the types whose parked index is not
-- empty), the shard's claims hash (see claim_holder in common.lua), the
-- done set, then per task its bucket hash and the parked index of its type
-- Returns per task, in order, a code: 1 parked, 0 not found, 5 stale
-- generation, 6 not fired (waiting, parked already, or finished, a lean
-- success included), 7 on its way to another shard.
local offset = tonumber(ARGV[1])
local base = nil
local out = {}

-- park_shard parks a section: KEYS from k, ARGV from a (its n)
local function park_shard(k, a, n)
  local due_key, ptypes, runs, done = KEYS[k], KEYS[k + 1], KEYS[k + 2], KEYS[k + 3]
  local rfields, rowners = {}, {}
  for i = 1, n do
    local j = a + 4 * i - 3
    if ARGV[j + 3] ~= '' then
      rfields[#rfields + 1] = claim_field(ARGV[j], ARGV[j + 1])
      rowners[#rowners + 1] = ARGV[j + 3]
    end
  end
  release_claims(runs, rfields, rowners)
  for i = 1, n do
    local j = a + 4 * i - 3
    local bkey, ikey = KEYS[k + 2 + 2 * i], KEYS[k + 3 + 2 * i]
    local id, g, typ = ARGV[j], tonumber(ARGV[j + 1]), ARGV[j + 2]
    local code = 1
    local v = redis.call('HGET', bkey, id)
    if not v then
      code = 0
    elseif is_moving(v) then
      code = 7
    else
      local st, gen, att, due, body = parse(v)
      if gen ~= g then
        code = 5
      elseif not is_fired(st) or (is_waiting(st) and (redis.call('ZSCORE', due_key, id) or lean_done(done, id))) then
        code = 6
      else
        if not is_waiting(st) then st = waiting(att) end
        base = base or (now_ms() - offset / 2)
        redis.call('HSET', bkey, id, record(st, gen + 1, att, due, body))
        drop_claim(runs, id, gen)
        redis.call('ZADD', due_key, due_score(math.max(due, base) + offset, bkey), id)
        redis.call('ZADD', ikey, due, id)
        redis.call('SADD', ptypes, typ)
      end
    end
    out[#out + 1] = code
  end
end

local k, a = 1, 2
while a <= #ARGV do
  local n = tonumber(ARGV[a])
  park_shard(k, a, n)
  k, a = k + 4 + 2 * n, a + 1 + 4 * n
end
return out
