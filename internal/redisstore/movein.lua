-- movein: the second step of a move, on the task's new shard: the record
-- goes back into the set it left. Idempotent: a record already here (moved
-- by an earlier try, by another process finishing the move, or changed
-- here since) is left as it is. Not fenced: the old shard's moving record
-- is the only source, and movedone deletes it only after this step.
-- KEYS[1] due, KEYS[2] done, KEYS[3] dead, KEYS[4] err hash, KEYS[5]
-- receipts hash, KEYS[6] lease sequence, KEYS[7] delivered index,
-- KEYS[7+i] bucket hash of task i
-- ARGV[1] wake channel, ARGV[2] shard, ARGV[3] retention ms, then per
-- task: id, moving value, last error ('' for none), fire receipt ('' for
-- none)
-- A delivered task (kind 'v') gets a purge list here, under the
-- retention's expiry from now (see delivered_list in common.lua).
-- Returns per task 1 moved in, 2 already here.
local min_new, added = nil, {}
local out = {}
local delivered = {}
for i = 4, #ARGV, 4 do
  local id, mv, err, rc = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local bkey = KEYS[7 + i / 4]
  if redis.call('HSETNX', bkey, id, string.sub(mv, 9)) == 0 then
    out[#out + 1] = 2
  else
    local kind = string.sub(mv, 2, 2)
    local score = struct.unpack('>I6', mv, 3)
    if kind == 'q' then
      local due = struct.unpack('>I6', mv, 9 + 7)
      redis.call('ZADD', KEYS[1], due_score(due, bkey), id)
      if min_new == nil or due < min_new then min_new = due end
      added[id] = true
    elseif kind == 'o' then
      redis.call('ZADD', KEYS[2], score, id)
    elseif kind == 'x' then
      redis.call('ZADD', KEYS[3], score, id)
    elseif kind == 'v' then
      delivered[#delivered + 1] = id .. ' ' .. string.sub(mv, 10, 13)
    end
    if err ~= '' then redis.call('HSET', KEYS[4], id, err) end
    if rc ~= '' then redis.call('HSET', KEYS[5], id, rc) end
    out[#out + 1] = 1
  end
end
if #delivered > 0 then
  local seq = redis.call('INCR', KEYS[6])
  redis.call('SET', delivered_list(string.sub(KEYS[5], 1, -5), seq), table.concat(delivered))
  redis.call('ZADD', KEYS[7], string.format('%d', now_ms() + tonumber(ARGV[3])), seq)
end
if min_new ~= nil then wake(KEYS[1], ARGV[1], ARGV[2], min_new, added) end
return out
