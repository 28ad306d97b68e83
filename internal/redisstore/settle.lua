-- settle: a take's records went to Kafka. Those Kafka did not confirm go
-- back to the due set at their due time (the leader produces them again);
-- the take's lease is dropped, which makes the rest fired. Fenced.
-- A take whose lease ran out and was re-claimed (or adopted by a new
-- leader) is left alone: its tasks belong to the take that re-claimed them.
-- A task a worker already finished with a lean success (its copy did reach
-- Kafka) is not put back (see requeue).
-- The copies Kafka acknowledged get their fire receipt (see receipt.go):
-- one field each in the shard's receipts hash, written with one HSET per
-- 500 tasks. A copy whose topic no work process handles (receipt kind 'd')
-- ends delivered: its id goes into the done set with the retention's
-- expiry, the record untouched (a waiting-state record out of the due set,
-- in the done set, whose receipt says 'd' for its generation is
-- delivered; see readRecord). Only if nothing else happened to it since
-- the take: the record still waiting-state with that generation, not back
-- in the due set, no lean success, no execution claim (a work process of
-- its topic that started meanwhile runs it: claim.lua). Otherwise its
-- receipt says 'f' and it stays what it is.
-- KEYS[1] inflight, KEYS[2] due, KEYS[3] fence, KEYS[4] done, KEYS[5] claims
-- hash, KEYS[6] receipts hash
-- ARGV[1] token, ARGV[2] key prefix, ARGV[3] the take's lease member,
-- ARGV[4] retention ms, ARGV[5] n: how many records to release, then n
-- pairs id, gen of them, then per acknowledged copy: id, gen, receipt,
-- bucket hash key ('' unless the receipt's kind is 'd')
-- Returns {-1, stored_token} when fenced, else {fired, released,
-- delivered: one '1' or '0' per 'd' receipt, in order}.
local stale = fence(KEYS[3], tonumber(ARGV[1]))
if stale then return {-1, stale} end
if redis.call('ZREM', KEYS[1], ARGV[3]) == 0 then return {0, 0, ''} end
redis.call('DEL', lease_key(ARGV[2], ARGV[3]))
local released = 0
local nf = tonumber(ARGV[5])
for i = 6, 5 + 2 * nf, 2 do
  local id = ARGV[i]
  local bkey = bucket(ARGV[2], id)
  local v = redis.call('HGET', bkey, id)
  if v and requeue(KEYS[2], KEYS[4], bkey, id, v, gen_bytes(tonumber(ARGV[i + 1]))) then
    released = released + 1
  end
end

-- many_call runs cmd on key with the arguments list, 1000 per command,
-- and returns the replies concatenated
local function many_call(cmd, key, list)
  local out = {}
  for i = 1, #list, 1000 do
    local r = redis.call(cmd, key, unpack(list, i, math.min(i + 999, #list)))
    for j = 1, #r do out[#out + 1] = r[j] end
  end
  return out
end

local hs = {} -- the receipts: id, value pairs
local cand = {} -- the ARGV positions of the 'd' receipts
for i = 6 + 2 * nf, #ARGV, 4 do
  if string.sub(ARGV[i + 2], 1, 1) == 'd' then
    cand[#cand + 1] = i
  else
    hs[#hs + 1] = ARGV[i]
    hs[#hs + 1] = ARGV[i + 2]
  end
end
local marks = {}
if #cand > 0 then
  local ids, fields = {}, {}
  for j, i in ipairs(cand) do
    ids[j] = ARGV[i]
    fields[j] = claim_field(ARGV[i], ARGV[i + 1])
  end
  local indue = many_call('ZMSCORE', KEYS[2], ids)
  local indone = many_call('ZMSCORE', KEYS[4], ids)
  local held = many_call('HMGET', KEYS[5], fields)
  local expiry = string.format('%d', now_ms() + tonumber(ARGV[4]))
  local done = {}
  for j, i in ipairs(cand) do
    local r = ARGV[i + 2]
    local ok = not indue[j] and not indone[j] and not held[j]
    if ok then
      local v = redis.call('HGET', ARGV[i + 3], ids[j])
      ok = v and is_waiting(string.sub(v, 1, 1)) and string.sub(v, 2, 5) == string.sub(r, 2, 5)
    end
    if ok then
      done[#done + 1] = expiry
      done[#done + 1] = ids[j]
      marks[j] = '1'
    else
      r = 'f' .. string.sub(r, 2)
      marks[j] = '0'
    end
    hs[#hs + 1] = ids[j]
    hs[#hs + 1] = r
  end
  if #done > 0 then zadd_all(KEYS[4], done) end
end
for i = 1, #hs, 1000 do
  redis.call('HSET', KEYS[6], unpack(hs, i, math.min(i + 999, #hs)))
end
local n = tonumber(string.match(ARGV[3], ':(%d+)$')) or 0
return {n - nf, released, table.concat(marks)}
