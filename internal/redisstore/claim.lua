-- claim: a worker claims the execution of fired tasks ("fired -> running"),
-- for tasks of one shard.
-- KEYS[2i-1] bucket hash of task i, KEYS[2i] run marker of task i
--   (dq:{<ns>:<shard>}:run:<id>:<gen>)
-- ARGV[5i-4] id, ARGV[5i-3] gen, ARGV[5i-2] marker TTL ms, ARGV[5i-1] owner
--   (the value that names this claimer; a retry with the same owner finds
--   its own marker and succeeds again), ARGV[5i] the copy's due time in ms
--   (-1: not checked; a record with another due time is stale, code 5)
-- Returns, per task, {code, state, record}: 1 claimed (record = the stored
-- record), 0 not found, 5 stale generation, 6 not in a fired state (its
-- outcome is stored), 7 held by another owner; record is '' unless claimed.
-- The generation tells the current firing (see is_fired in common.lua).
local out = {}
local n = #KEYS / 2
for i = 1, n do
  local bkey, rkey = KEYS[2 * i - 1], KEYS[2 * i]
  local id, g, ttl, owner, cdue = ARGV[5 * i - 4], tonumber(ARGV[5 * i - 3]), ARGV[5 * i - 2], ARGV[5 * i - 1], tonumber(ARGV[5 * i])
  local v = redis.call('HGET', bkey, id)
  if not v then
    out[#out + 1] = 0; out[#out + 1] = ''; out[#out + 1] = ''
  else
    local st, gen, _, due = parse(v)
    if gen ~= g or (cdue >= 0 and due ~= cdue) then
      out[#out + 1] = 5; out[#out + 1] = st; out[#out + 1] = ''
    elseif not is_fired(st) then
      out[#out + 1] = 6; out[#out + 1] = st; out[#out + 1] = ''
    else
      local cur = redis.call('GET', rkey)
      if cur and cur ~= owner then
        out[#out + 1] = 7; out[#out + 1] = st; out[#out + 1] = ''
      else
        redis.call('SET', rkey, owner, 'PX', ttl)
        out[#out + 1] = 1; out[#out + 1] = st; out[#out + 1] = v
      end
    end
  end
end
return out
