-- claim: a worker claims the execution of fired tasks ("fired -> running"),
-- for tasks of one or more shards of one Redis node (a call of several
-- shards only where one redis-server holds every shard; a Redis Cluster
-- call is always one shard: its keys share a slot).
-- ARGV[1] the claims' TTL ms (one per call: the caller groups its claims
-- by TTL), ARGV[2] 1 when this call sweeps (see below), else 0, then one
-- section per shard: n, and n quadruples id, gen, owner
-- (the value that names this claimer; a retry with the same owner finds
-- its own claim and succeeds again), the copy's due time in ms (-1: not
-- checked; a record with another due time is stale, code 5)
-- KEYS, per section: the shard's claims hash (see claim_holder in
-- common.lua), its done set, and the bucket hash of each of its n tasks
-- Returns, per task in order, {code, state, record}: 1 claimed (record =
-- the stored record), 0 not found, 5 stale generation, 6 not in a fired
-- state (its outcome is stored), 7 held by another owner; record is ''
-- unless claimed.
-- The generation tells the current firing (see is_fired in common.lua);
-- a waiting-state record whose id is in the done set succeeded (a lean
-- success, see common.lua): code 6, state S.
-- Per task: one HGET of the record; the claims of a section are read
-- with one HMGET and written with one HSET, the done set with one ZMSCORE.
local now = now_ms()
-- the claims' deadline, formatted once
local dl = string.format('%d', now + tonumber(ARGV[1])) .. '|'
local out = {}

-- claim_shard claims a section: KEYS from k, ARGV from a (its n)
local function claim_shard(k, a, n)
  local runs = KEYS[k]
  local fields, ids = {}, {}
  for i = 1, n do
    ids[i] = ARGV[a + 4 * i - 3]
    fields[i] = claim_field(ids[i], ARGV[a + 4 * i - 2])
  end
  local cur = redis.call('HMGET', runs, unpack(fields))
  local fin = redis.call('ZMSCORE', KEYS[k + 1], unpack(ids))
  local set, mine = {}, {}
  for i = 1, n do
    local j = a + 4 * i - 3
    local id, g, owner, cdue = ids[i], tonumber(ARGV[j + 1]), ARGV[j + 2], tonumber(ARGV[j + 3])
    local v = redis.call('HGET', KEYS[k + 1 + i], id)
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
        -- a copy claimed earlier in this section holds it too
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
    -- HEXISTS: the pad's value is never read into Lua (see sweep_claims)
    if redis.call('HEXISTS', runs, claim_pad) == 0 then
      set[#set + 1] = claim_pad
      set[#set + 1] = claim_pad_value()
    end
    redis.call('HSET', runs, unpack(set))
  end
end

local sections = {}
local k, a = 1, 3
while a <= #ARGV do
  local n = tonumber(ARGV[a])
  claim_shard(k, a, n)
  sections[#sections + 1] = k
  k, a = k + 2 + n, a + 1 + 4 * n
end
-- a sweeping call (one in claimSweepEvery at random, claim.go) sweeps
-- one of its sections' claims hashes, picked by the microsecond of Redis'
-- clock: a call of many small sections (a worker's micro-batch spread over
-- the shards) pays one sweep, not one per shard, and most calls none
if ARGV[2] == '1' and #sections > 0 then sweep_claims(KEYS[sections[now_us % #sections + 1]], now) end
return out
