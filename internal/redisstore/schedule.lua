-- schedule: create or upsert tasks of one or more shards of one Redis
-- node (a call of several shards only where one redis-server holds every
-- shard; a Redis Cluster call is always one shard: its keys share a slot).
-- ARGV[1] wake channel, then one section per shard:
--   shard, the caller's map (see check_map), mode, n, and n triples
--   id, due, data (quadruples with mode 'j'); mode letters: 'x' existing
--   tasks only (the old shard of a growing map: an absent task is created
--   on its new shard); 'r'
--   revive: a cancelled task becomes waiting again with the new content
--   (the scheduler re-materializing a tick it cancelled); 'c' confirm: the
--   replay of a write that ran but that the replicas did not confirm
--   (DQ_REDIS_REPLICA_ACKS): an absent task is created (a failover lost
--   the write), an existing one is left as it is (the write stands, or a
--   later change replaced it: never undone) and its record written again
--   unchanged, so that the WAIT after the call covers it; 'j' journal
--   replay: each task carries a fourth value, its journal entry's token,
--   and a task whose token this shard has seen is treated as in mode 'c'
--   (the entry was applied before: a daemon that died between writing it
--   and removing it from its journal must not write it over a change
--   made since), while a token not seen yet is remembered in the shard's
--   replay marks (prefix .. 'jr', token -> ms) with the write
-- KEYS, per section: due zset, stamp, done zset, claims hash, and the
--   bucket hash of each of its n tasks
-- A triple's due is relative to Redis TIME, "+<ms><fraction>" (the
-- fraction: the four decimals of the task's bucket in its due-set score,
-- ".0010", see due_score), and data the task's body; or absolute: the
-- due-set score (due_score), and data the whole record of a new task
-- (record('s', 0, 1, due, body)). The caller formats both, so that this
-- script formats no float per task (a relative score is the due time's
-- digits and the fraction) and builds a record only for a relative one
-- (the body is cut from an absolute one only for an id that exists).
-- Returns per task, in order, {code, state, due}: code 1 created,
-- 2 unchanged, 3 updated (upsert of a waiting task, with the next
-- generation), 4 conflict (task exists in another state with different
-- content; state F when a leader took it, S after its lean success), 7 on
-- its way to another shard, 8 absent (mode 'x'). An update drops the claim
-- of the generation it replaces (a task Kafka did not confirm is waiting
-- again, and a worker may run a copy that reached the topic: see lean
-- success in common.lua), and unparks a parked task (unindex_parked).
local channel = ARGV[1]
local now = nil
local out = {}

-- replay_mark_ms is how long a shard remembers a journal entry's token
-- (mode 'j'): a day, far longer than a daemon takes to restart and replay
-- its journal again
local replay_mark_ms = 86400000

-- stride is the number of values per task of a section of mode m
local function stride(m)
  if string.find(m, 'j', 1, true) then return 4 end
  return 3
end

local function schedule_shard(k, a, n)
  local due_key = KEYS[k]
  local shard, mode = ARGV[a], ARGV[a + 2]
  local existing_only = string.find(mode, 'x', 1, true) ~= nil
  local revive = string.find(mode, 'r', 1, true) ~= nil
  local confirm = string.find(mode, 'c', 1, true) ~= nil
  local sw = stride(mode)
  local marks_key, marks = nil, nil -- mode 'j': the shard's replay marks, and the tokens to remember
  if sw == 4 then marks_key, marks = string.sub(due_key, 1, -4) .. 'jr', {} end
  local min_new = nil
  local zadd = {}
  local queued = {}
  for i = 1, n do
    local j = a + 4 + sw * (i - 1)
    local id, spec, data = ARGV[j], ARGV[j + 1], ARGV[j + 2]
    local token, seen = nil, false
    if marks then
      token = ARGV[j + 3]
      seen = redis.call('ZSCORE', marks_key, token) ~= false
    end
    local bkey = KEYS[k + 3 + i]
    local relative = string.sub(spec, 1, 1) == '+'
    local due, score, body, rec
    if relative then
      now = now or now_ms()
      due = now + tonumber(string.sub(spec, 2, -6))
      score = string.format('%d', due) .. string.sub(spec, -5)
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
      if not queued[id] and taken(due_key, id, st) then st = taken_state(KEYS[k + 2], id, cur) end
      state = st
      if confirm or seen then
        code, due = 2, odue
        redis.call('HSET', bkey, id, cur)
      elseif revive and st == 'c' then
        -- off the done set first: its purge would delete the new record
        code, state = 3, 's'
        redis.call('ZREM', KEYS[k + 2], id)
        -- a new task: the cancelled one's attempt history (the err hash,
        -- named from the due set like the parked index) is not its own
        redis.call('HDEL', string.sub(due_key, 1, -4) .. 'err', id)
        redis.call('HSET', bkey, id, record('s', gen + 1, 1, due, body))
      elseif obody == body and (relative or odue == due) then
        code, due = 2, odue
      elseif is_waiting(st) then
        code = 3
        redis.call('HSET', bkey, id, record(st, gen + 1, att, due, body))
        drop_claim(KEYS[k + 3], id, gen)
        -- a parked task updated is unparked (its new score is its due time)
        unindex_parked(due_key, id, obody)
      else
        code, due = 4, odue
      end
    end
    if code == 1 or code == 3 then
      queued[id] = true
      zadd[#zadd + 1] = score
      zadd[#zadd + 1] = id
      if min_new == nil or due < min_new then min_new = due end
    end
    if token and not seen and code <= 3 then
      now = now or now_ms()
      marks[#marks + 1] = now
      marks[#marks + 1] = token
    end
    out[#out + 1] = code
    out[#out + 1] = state
    out[#out + 1] = due
  end
  if marks and #marks > 0 then
    redis.call('ZADD', marks_key, unpack(marks))
    redis.call('ZREMRANGEBYSCORE', marks_key, '-inf', '(' .. string.format('%d', now - replay_mark_ms))
    redis.call('PEXPIRE', marks_key, replay_mark_ms)
  end
  -- one ZADD for the whole section (zadd_all); a later copy of an id in
  -- the same section wins
  if #zadd > 0 then zadd_all(due_key, zadd) end
  if min_new ~= nil then wake(due_key, channel, shard, min_new, queued) end
end

-- Every section's map first: a refusal (an error) leaves every task of
-- the call unwritten (an earlier section's stamp may have been raised to
-- the caller's map, as any call of that shard would), so the caller
-- routes all its tasks again.
local sections = {}
local k, a = 1, 2
while a <= #ARGV do
  check_map(KEYS[k + 1], ARGV[a + 1])
  local n = tonumber(ARGV[a + 3])
  sections[#sections + 1] = {k, a, n}
  k, a = k + 4 + n, a + 4 + stride(ARGV[a + 2]) * n
end
for _, s in ipairs(sections) do schedule_shard(s[1], s[2], s[3]) end
return out
