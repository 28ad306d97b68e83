-- take: a shard leader claims due tasks under one lease, and re-claims the
-- tasks of leases that ran out. Fenced.
-- KEYS[1] due, KEYS[2] inflight (lease member -> deadline ms), KEYS[3] fence,
-- KEYS[4] done, KEYS[5] err, KEYS[6] lease sequence (a counter), KEYS[7]
-- receipts hash, KEYS[8] delivered index (see delivered_list)
-- ARGV[1] token, ARGV[2] max tasks, ARGV[3] lease ms, ARGV[4] key prefix,
-- ARGV[5] max finished records to purge (0: no purge this time),
-- ARGV[6] ahead ms: when nothing is due yet and the head of the due set is
-- due within this many ms, the tasks of the head's millisecond are taken
-- now, before they are due; the poller holds them until that instant and
-- fires them then (see Poller's Ahead). Only that one millisecond, and
-- never together with tasks of run-out leases, so that a take's tasks are
-- either due already or all due at one instant.
-- Returns {-1, stored_token} when fenced, else
-- {now in us, next_due or -1, next_lease or -1, lease member or '',
--  reclaimed, purge full (1 when the purge found as many expired records
--  as it was allowed: more are due for purging), id1, record1, id2, record2, ...}
-- (now in microseconds lets the poller sleep until a due time to the
-- microsecond instead of up to 1 ms past it; reclaimed counts the tasks at
-- the front of the list that came from leases that ran out.)
-- The records are returned as stored: the take does not rewrite them. What
-- makes a task taken is that it left the due set (see common.lua); what
-- brings it back if Kafka never confirms it is the lease: one member of
-- the in-flight set and one string key per take (see lease_key), so that
-- the cost per task is one HGET, and a settle is O(1) whatever the size of
-- the take.
-- The fence is checked on every take, idle or not, so that a deposed leader
-- learns it at its next take: an idle shard costs TIME, GET and one ZRANGE on
-- each of due and inflight.
local token = tonumber(ARGV[1])
local stale = fence(KEYS[3], token)
if stale then return {-1, stale} end
local max, lease, prefix = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local ahead = tonumber(ARGV[6]) or 0
local now = now_ms()

-- retention: drop finished records whose time is up (bounded, when asked)
local purge = tonumber(ARGV[5])
local purge_full = 0
if purge > 0 then
  local old = redis.call('ZRANGE', KEYS[4], '-inf', now, 'BYSCORE', 'LIMIT', 0, purge)
  local gone = {} -- the purged ids, and those whose record is gone already: their receipts go too
  for _, id in ipairs(old) do
    local bkey = bucket(prefix, id)
    local v = redis.call('HGET', bkey, id)
    if v then
      local st = string.sub(v, 1, 1)
      -- succeeded (S, or a lean success: waiting state, out of the due
      -- set) or cancelled
      if st == 'S' or st == 'c' or taken(KEYS[1], id, st) then
        redis.call('HDEL', bkey, id)
        redis.call('HDEL', KEYS[5], id)
        gone[#gone + 1] = id
      end
    else
      gone[#gone + 1] = id
    end
  end
  if #old > 0 then redis.call('ZREM', KEYS[4], unpack(old)) end
  if #old == purge then purge_full = 1 end
  -- delivered tasks: the purge lists whose retention ended (settle.lua),
  -- whole lists, while the budget lasts. A task of a list that is no
  -- longer delivered (a worker claimed it, finished it or retried it; it
  -- moved) is left alone: its outcome's own purge, or none, applies.
  local left = purge - #old
  if left > 0 then
    local lists = redis.call('ZRANGE', KEYS[8], '-inf', now, 'BYSCORE', 'LIMIT', 0, 16)
    local seen = {}
    for _, seq in ipairs(lists) do
      if left <= 0 then
        purge_full = 1
        break
      end
      seen[#seen + 1] = seq
      local lkey = delivered_list(prefix, seq)
      local val = redis.call('GET', lkey)
      redis.call('DEL', lkey)
      lease_entries(prefix, val, function(id, bkey, v, g)
        left = left - 1
        if string.sub(v, 2, 5) == g and taken(KEYS[1], id, string.sub(v, 1, 1))
            and not lean_done(KEYS[4], id) and is_delivered(prefix, id, v) then
          redis.call('HDEL', bkey, id)
          redis.call('HDEL', KEYS[5], id)
          gone[#gone + 1] = id
        end
      end)
    end
    if #seen > 0 then redis.call('ZREM', KEYS[8], unpack(seen)) end
    if #lists == 16 and #seen == 16 then purge_full = 1 end
  end
  if #gone > 0 then redis.call('HDEL', KEYS[7], unpack(gone)) end
end

local out = {now_us or now * 1000, -1, -1, '', 0, purge_full}
local claims = {} -- the new lease's value, one piece per task
local function claim(id, v)
  out[#out + 1] = id
  out[#out + 1] = v
  claims[#claims + 1] = id .. ' ' .. string.sub(v, 2, 5)
end

-- expired leases first (they are the oldest work); whole leases, so a
-- take may hold a little more than max
local l = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
local reclaimed = false
if l[2] and tonumber(l[2]) <= now then
  reclaimed = true
  local expired = redis.call('ZRANGE', KEYS[2], '-inf', now, 'BYSCORE', 'LIMIT', 0, max)
  for _, member in ipairs(expired) do
    if #claims >= max then break end
    drop_lease(KEYS[2], prefix, member, function(id, _, v, g)
      -- still taken, same generation, no lean success: Kafka may never
      -- have had it
      if string.sub(v, 2, 5) == g and taken(KEYS[1], id, string.sub(v, 1, 1)) and not lean_done(KEYS[4], id) then
        claim(id, v)
      end
    end)
  end
  out[5] = #claims
end

-- due tasks: only what is due is read (the future part of the set can be
-- long); the head tells whether anything is due and when the next one is.
local left = max - #claims
local h = head(KEYS[1])
-- upto: the last due millisecond taken (the head's own when taken ahead)
local upto = now
if h and h > now and not reclaimed and h <= now + ahead then upto = h end
if h and h <= upto and left > 0 then
  -- the scores carry each record's bucket (see due_score)
  local due = redis.call('ZRANGE', KEYS[1], '-inf', '(' .. string.format('%d', upto + 1), 'BYSCORE', 'LIMIT', 0, left, 'WITHSCORES')
  -- what was read is the lowest-ranked part of the set: drop it by rank
  local k = #due / 2
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, k - 1)
  for i = 1, #due, 2 do
    local id = due[i]
    local _, bkey = due_of_score(prefix, tonumber(due[i + 1]))
    local v = redis.call('HGET', bkey, id)
    -- a record in another state (a stray Kafka copy finished it while it
    -- waited to fire again) just leaves the due set
    if v and is_waiting(string.sub(v, 1, 1)) then claim(id, v) end
  end
  if k < left then h = head(KEYS[1]) end
end
if h then out[2] = h end

if #claims > 0 then
  local member = string.format('%d:%d', redis.call('INCR', KEYS[6]), #claims)
  redis.call('ZADD', KEYS[2], now + lease, member)
  redis.call('SET', lease_key(prefix, member), table.concat(claims))
  out[4] = member
end
if #claims > 0 or reclaimed then
  local nl = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if nl[2] then out[3] = tonumber(nl[2]) end
elseif l[2] then
  out[3] = tonumber(l[2]) -- no lease added or dropped: the earliest is unchanged
end
return out
