-- schedule: create or upsert tasks of one shard.
-- KEYS[1]  due zset;  KEYS[2] stamp; KEYS[3] done zset; KEYS[4] claims hash;
-- KEYS[4+i] bucket hash of task i
-- ARGV[1]  wake channel; ARGV[2] shard; ARGV[3] the caller's map (see check_map);
-- ARGV[4]  mode, letters: 'x' existing tasks only (the old shard of a
--          growing map: an absent task is created on its new shard);
--          'r' revive: a cancelled task becomes waiting again with the new
--          content (the scheduler re-materializing a tick it cancelled)
-- ARGV[3i+2], ARGV[3i+3], ARGV[3i+4] (i = 1..n): id, due, data
--   due is "+<ms>" relative to Redis TIME, and data the task's body; or
--   absolute: the due-set score (due_score), and data the whole record of
--   a new task (record('s', 0, 1, due, body)): the caller formats both, so
--   that this script neither formats a score nor builds a record per task
--   (the body is cut from it only for an id that exists).
-- Returns per task {code, state, due}: code 1 created, 2 unchanged,
-- 3 updated (upsert of a waiting task, with the next generation), 4 conflict
-- (task exists in another state with different content; state F when a
-- leader took it, S after its lean success), 7 on its way to another
-- shard, 8 absent (mode 'x'). An update drops the claim of the generation
-- it replaces (a task Kafka did not confirm is waiting again, and a worker
-- may run a copy that reached the topic: see lean success in common.lua).
local due_key = KEYS[1]
check_map(KEYS[2], ARGV[3])
local existing_only = string.find(ARGV[4], 'x', 1, true) ~= nil
local revive = string.find(ARGV[4], 'r', 1, true) ~= nil
local old_head = head(due_key)
local now = nil
local min_new = nil
local out = {}
local zadd = {}
local queued = {}
local n = (#ARGV - 4) / 3
for i = 1, n do
  local id, spec, data = ARGV[3 * i + 2], ARGV[3 * i + 3], ARGV[3 * i + 4]
  local bkey = KEYS[4 + i]
  local relative = string.sub(spec, 1, 1) == '+'
  local due, score, body, rec
  if relative then
    now = now or now_ms()
    due = now + tonumber(string.sub(spec, 2))
    body = data
  else
    score = spec
    due = math.floor(tonumber(spec))
    rec = data
  end
  local code, state = 1, 's'
  local cur = nil
  if existing_only then
    cur = redis.call('HGET', bkey, id)
    if not cur then code, state, due = 8, '', 0 end
  elseif redis.call('HSETNX', bkey, id, rec or record('s', 0, 1, due, body)) == 0 then
    -- the common case, a new id, cost only the HSETNX
    cur = redis.call('HGET', bkey, id)
  end
  if cur and is_moving(cur) then
    code, state, due = 7, '', 0
  elseif cur then
    body = body or string.sub(rec, 14)
    local st, gen, att, odue, obody = parse(cur)
    -- (an id written earlier in this call is not in the due set yet)
    if not queued[id] and taken(due_key, id, st) then st = taken_state(KEYS[3], id) end
    state = st
    if revive and st == 'c' then
      -- off the done set first: its purge would delete the new record
      code, state = 3, 's'
      redis.call('ZREM', KEYS[3], id)
      redis.call('HSET', bkey, id, record('s', gen + 1, 1, due, body))
    elseif obody == body and (relative or odue == due) then
      code, due = 2, odue
    elseif is_waiting(st) then
      code = 3
      redis.call('HSET', bkey, id, record(st, gen + 1, att, due, body))
      drop_claim(KEYS[4], id, gen)
    else
      code, due = 4, odue
    end
  end
  if code == 1 or code == 3 then
    queued[id] = true
    zadd[#zadd + 1] = score or due_score(due, bkey)
    zadd[#zadd + 1] = id
    if min_new == nil or due < min_new then min_new = due end
  end
  out[#out + 1] = code
  out[#out + 1] = state
  out[#out + 1] = due
end
-- one ZADD for the whole call (zadd_all); a later copy of an id in the
-- same call wins
if #zadd > 0 then zadd_all(due_key, zadd) end
if min_new ~= nil then wake(due_key, ARGV[1], ARGV[2], min_new, old_head) end
return out
