-- claim: a worker claims the execution of fired tasks ("fired -> running"),
-- for tasks of one shard.
-- KEYS[1] the shard's claims hash (see claim_holder in common.lua),
-- KEYS[2] the done set, KEYS[2+i] bucket hash of task i
-- ARGV[1] the claims' TTL ms (one per call: the caller groups its claims
-- by TTL), then ARGV[4i-2] id, ARGV[4i-1] gen, ARGV[4i] owner (the value
-- that names this claimer; a retry with the same owner finds its own claim
-- and succeeds again), ARGV[4i+1] the copy's due time in ms (-1: not
-- checked; a record with another due time is stale, code 5)
-- Returns, per task, {code, state, record}: 1 claimed (record = the stored
-- record), 0 not found, 5 stale generation, 6 not in a fired state (its
-- outcome is stored), 7 held by another owner; record is '' unless claimed.
-- The generation tells the current firing (see is_fired in common.lua);
-- a waiting-state record whose id is in the done set succeeded (a lean
-- success, see common.lua): code 6, state S.
-- Per task: one HGET of the record; the claims of the whole call are read
-- with one HMGET and written with one HSET, the done set with one ZMSCORE.
local runs = KEYS[1]
local n = #KEYS - 2
local now = now_ms()
local fields, ids = {}, {}
for i = 1, n do
  ids[i] = ARGV[4 * i - 2]
  fields[i] = claim_field(ids[i], ARGV[4 * i - 1])
end
local cur = redis.call('HMGET', runs, unpack(fields))
local fin = redis.call('ZMSCORE', KEYS[2], unpack(ids))
local set, mine = {}, {}
-- the claims' deadline, formatted once
local dl = string.format('%d', now + tonumber(ARGV[1])) .. '|'
local out = {}
for i = 1, n do
  local id, g, owner, cdue = ids[i], tonumber(ARGV[4 * i - 1]), ARGV[4 * i], tonumber(ARGV[4 * i + 1])
  local v = redis.call('HGET', KEYS[2 + i], id)
  if not v then
    out[#out + 1] = 0; out[#out + 1] = ''; out[#out + 1] = ''
  else
    local st = string.sub(v, 1, 1)
    local gen, _, due = struct.unpack('>I4I2I6', v, 2)
    if gen ~= g or (cdue >= 0 and due ~= cdue) then
      out[#out + 1] = 5; out[#out + 1] = st; out[#out + 1] = ''
    elseif not is_fired(st) then
      out[#out + 1] = 6; out[#out + 1] = st; out[#out + 1] = ''
    elseif fin[i] and is_waiting(st) then
      out[#out + 1] = 6; out[#out + 1] = 'S'; out[#out + 1] = ''
    else
      -- a copy claimed earlier in this call holds it too
      local f = fields[i]
      local holder = mine[f] or claim_holder(cur[i], now)
      if holder and holder ~= owner then
        out[#out + 1] = 7; out[#out + 1] = st; out[#out + 1] = ''
      else
        mine[f] = owner
        set[#set + 1] = f
        set[#set + 1] = dl .. owner
        out[#out + 1] = 1; out[#out + 1] = st; out[#out + 1] = v
      end
    end
  end
end
if #set > 0 then
  if redis.call('HEXISTS', runs, claim_pad) == 0 then
    set[#set + 1] = claim_pad
    set[#set + 1] = claim_pad_value()
  end
  redis.call('HSET', runs, unpack(set))
end
sweep_claims(runs, now)
return out
