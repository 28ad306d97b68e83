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
-- KEYS[1] due, KEYS[2] ptypes (the types whose parked index is not empty),
-- KEYS[3] the shard's claims hash (see claim_holder in common.lua), KEYS[4]
-- the done set, then per task i: KEYS[3+2i] bucket hash, KEYS[4+2i] the
-- parked index of its type
-- ARGV[1] park offset ms, then per task i: ARGV[4i-2] id, ARGV[4i-1] gen,
-- ARGV[4i] type, ARGV[4i+1] owner of the execution claim ('' none): the
-- claim is deleted if it holds owner, whatever the code (the worker is done
-- with its claim either way); a parked task's claim of its generation is
-- dropped whoever holds it (see lean success in common.lua)
-- Returns per task a code: 1 parked, 0 not found, 5 stale generation,
-- 6 not fired (waiting, parked already, or finished, a lean success
-- included), 7 on its way to
-- another shard.
local offset = tonumber(ARGV[1])
local base = nil
local out = {}
local n = (#KEYS - 4) / 2
local rfields, rowners = {}, {}
for i = 1, n do
  if ARGV[4 * i + 1] ~= '' then
    rfields[#rfields + 1] = claim_field(ARGV[4 * i - 2], ARGV[4 * i - 1])
    rowners[#rowners + 1] = ARGV[4 * i + 1]
  end
end
release_claims(KEYS[3], rfields, rowners)
for i = 1, n do
  local bkey, ikey = KEYS[3 + 2 * i], KEYS[4 + 2 * i]
  local id, g, typ = ARGV[4 * i - 2], tonumber(ARGV[4 * i - 1]), ARGV[4 * i]
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
    elseif not is_fired(st) or (is_waiting(st) and (redis.call('ZSCORE', KEYS[1], id) or lean_done(KEYS[4], id))) then
      code = 6
    else
      if not is_waiting(st) then st = waiting(att) end
      base = base or (now_ms() - offset / 2)
      redis.call('HSET', bkey, id, record(st, gen + 1, att, due, body))
      drop_claim(KEYS[3], id, gen)
      redis.call('ZADD', KEYS[1], due_score(math.max(due, base) + offset, bkey), id)
      redis.call('ZADD', ikey, due, id)
      redis.call('SADD', KEYS[2], typ)
    end
  end
  out[i] = code
end
return out
