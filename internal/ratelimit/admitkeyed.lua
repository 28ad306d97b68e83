-- admitkeyed: decide n tasks of one type whose rule has a key or header
-- scope. Every limit applies to each scope value apart, exactly as admit.lua
-- applies it to a whole type. The state of all values lives in a few keys of
-- the type (common.lua has the layout), one field or member per value: one
-- command reads a batch's values, one writes them back, so a task costs
-- about what it costs under the type scope, not a few commands per value.
-- The tasks come grouped by value, each value's in decision order: due
-- order (then fetch order) for an ordered rule, priority order for an
-- unordered one. Each task is checked on its own (priority only decides
-- which side of the bucket's reserve it is on): window quota, then token
-- bucket, then concurrency; one that passes consumes all three.
--
-- Slots, limit 1 (the common case: one task of a value at a time): :k1
-- holds the values holding their slot (value -> expiry): one member per
-- running task, as the type scope's :run; the expiry is the holder's claim
-- (releaseone.lua, refresh.lua free or renew it only while it is theirs).
-- Slots, higher limits: :ks holds every slot of the type (slot id ->
-- expiry; the id ends with its value, slot_value) and, for each value
-- holding slots, its count as a negative score. Admission reads the
-- counts (one ZMSCORE for the batch) after dropping expired slots
-- (slots_drop, which keeps the counts true); a release (releasekeyed.lua)
-- drops its slots the same way. Counts and slots share the key and its
-- TTL, so they expire together. A value's running tasks are the sum over
-- both keys (each is read only while it exists: a rule whose limit
-- changed between 1 and more keeps its holders counted).
--
-- Order (ordered rules): a value's waiting tasks are in its :q (id -> the
-- first due it was deferred with) and :qt (id -> expected return ms). A
-- task runs only while the queue is empty or it is its head; any other is
-- deferred with code 4 (order) until just after the head's expected return.
-- Every deferred task joins the queue (ZADD NX keeps its place) and renews
-- its expected return; an admitted head leaves it. A head whose expected
-- return passed more than grace ago is dropped (cancelled, ended elsewhere,
-- its deferral lost), so no value blocks forever. :q and :qt expire grace
-- after the latest expected return they hold; :qs lists the values with a
-- queue, so one ZMSCORE spares a lookup per value without one. A value's
-- tasks waiting in its queue are decided in their queue order.
--
-- Idle values (window quota and token bucket): those whose :keys score is
-- older than the horizon leave :keys, :kw and :kb (at most 256 per call);
-- every key expires a horizon after its last write (:ks a slot TTL, queues
-- as above). A rule with neither keeps no :keys.
--
-- KEYS[1] :keys, KEYS[2] :qs, KEYS[3] :kw, KEYS[4] :kb, KEYS[5] :ks,
--   KEYS[6] :k1 (common.lua)
-- ARGV[1] base (the type's key prefix, "dq:{<ns>:rl:<type>}:")
-- ARGV[2] window limit (0: no quota), ARGV[3] window ms
-- ARGV[4] rate per second (0: no bucket), ARGV[5] burst, ARGV[6] reserve
-- ARGV[7] concurrency limit (0: none), ARGV[8] slot ttl ms
-- ARGV[9] 1 ordered / 0 unordered, ARGV[10] grace ms
-- ARGV[11] concurrency retry ms, ARGV[12] jitter seed in [0, 1)
-- ARGV[13] idle horizon ms, ARGV[14] longest wait ms (MaxDeferral)
-- ARGV[15] slot id prefix (limit above 1: the slot of the i-th task of
--   the call is prefix .. i .. ':' .. its value; limit 1: its value, held
--   until now + slot ttl)
-- ARGV[16] m, the number of values; ARGV[17] '1' when each value has one
--   task in this call; ARGV[18] the tasks: per value, its task count c,
--   then per task its due ms and id when ordered and its low flag (1 when
--   below the bucket's min priority) when there is a bucket, each field
--   followed by a space and an id written as "<length>:<id>";
--   ARGV[19 .. 18 + m] the values, in the same order. A task is no
--   argument of its own: each argument costs redis-server 0.07-0.2 µs
--   before the script starts (more with many: a Redis object and a Lua
--   string each, and their garbage), and the common batch (one task per
--   value, below) never reads ARGV[18].
-- Returns {now ms, codes, waits}: codes has one byte per task in the order
-- sent, '0' admitted, '1' window quota, '2' token bucket, '3' concurrency,
-- '4' order; waits holds the wait ms of each deferred task, in order.
local now = now_ms()
local base = ARGV[1]
local wlimit, win = tonumber(ARGV[2]), tonumber(ARGV[3])
local rate, burst, reserve = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local climit, ttl = tonumber(ARGV[7]), tonumber(ARGV[8])
local ordered, grace = ARGV[9] == '1', tonumber(ARGV[10])
local retry, seed = tonumber(ARGV[11]), tonumber(ARGV[12])
local horizon, maxwait = tonumber(ARGV[13]), tonumber(ARGV[14])
local prefix, m, allone = ARGV[15], tonumber(ARGV[16]), ARGV[17] == '1'
local vals = {unpack(ARGV, 19, 18 + m)}

local KW, KB, KS, K1 = KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local one = climit == 1
local indexed = wlimit > 0 or rate > 0 -- values have fields to prune

-- values idle past the horizon leave the index and the state hashes; a
-- value's :keys score moves only when it is older than fresh (a quarter of
-- the horizon; pruning waits that much longer): a busy value costs no
-- skiplist move per batch
local fresh = math.floor(horizon / 4)
local active = {}
if indexed then
  local idle = redis.call('ZRANGE', KEYS[1], '-inf', '(' .. int(now - horizon - fresh), 'BYSCORE', 'LIMIT', 0, 256)
  if #idle > 0 then
    redis.call('ZREM', KEYS[1], unpack(idle))
    redis.call('HDEL', KW, unpack(idle))
    redis.call('HDEL', KB, unpack(idle))
  end
  active = redis.call('ZMSCORE', KEYS[1], unpack(vals))
end

local wv, bv, cv, cm, hv = {}, {}, {}, {}, {}
local k1there = false
if wlimit > 0 then wv = redis.call('HMGET', KW, unpack(vals)) end
if rate > 0 then bv = redis.call('HMGET', KB, unpack(vals)) end
if climit > 0 then
  k1there = redis.call('EXISTS', K1) == 1
  if k1there then
    redis.call('ZREMRANGEBYSCORE', K1, '(0', int(now)) -- not the pad (common.lua)
    hv = redis.call('ZMSCORE', K1, unpack(vals))
  end
  if not one or redis.call('EXISTS', KS) == 1 then
    for j = 1, m do cm[j] = count_member(vals[j]) end
    slots_prune_keyed(KS, now)
    cv = redis.call('ZMSCORE', KS, unpack(cm))
  end
end
local wset, bset = {}, {}

local queued = {}
if ordered and redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', int(now))
  queued = redis.call('ZMSCORE', KEYS[2], unpack(vals))
end

-- add_holders writes the values that took their slot to :k1 (z: expiry,
-- value pairs); a set created here is a skip list (skiplist_pad,
-- common.lua)
local function add_holders(z)
  if not k1there then
    z[#z + 1] = 0
    z[#z + 1] = skiplist_pad
  end
  redis.call('ZADD', K1, unpack(z))
  redis.call('PEXPIRE', K1, int(ttl))
end

-- The common batch of a limit of 1 with no quota or bucket: each value
-- has one task, holds no slot and has no queue (nor any value slots above
-- a limit of 1). Every task is admitted, as the loop below would decide,
-- without its bookkeeping per task, which was most of the interpreter's
-- time in this script (BenchmarkAdmitKeyedSteady).
if one and allone and not indexed and #cv == 0 then
  local z, all = {}, true
  local expiry = int(now + ttl)
  for j = 1, m do
    if hv[j] or queued[j] then
      all = false
      break
    end
    z[2 * j - 1], z[2 * j] = expiry, vals[j]
  end
  if all and m > 0 then
    add_holders(z)
    return {now, string.rep('0', m), {}}
  end
end

-- the tasks (ARGV[18]): each value's count, each task's due, id and low
-- flag by its position in the call
local tasks = ARGV[18]
local counts, dues, ids, lows = {}, {}, {}, {}
local function field(p) -- the field at p and where the next one starts
  local e = string.find(tasks, ' ', p, true)
  return string.sub(tasks, p, e - 1), e + 1
end
do
  local p, slot = 1, 0
  for j = 1, m do
    local c
    c, p = field(p)
    c = tonumber(c)
    counts[j] = c
    for _ = 1, c do
      slot = slot + 1
      if ordered then
        dues[slot], p = field(p)
        local colon = string.find(tasks, ':', p, true)
        local n = tonumber(string.sub(tasks, p, colon - 1))
        ids[slot] = string.sub(tasks, colon + 1, colon + n)
        p = colon + n + 2
      end
      if rate > 0 then lows[slot], p = field(p) end
    end
  end
end

local function clamp(w)
  if not (w >= 1) then return 1 end -- also nan
  if w > maxwait then return maxwait end
  return math.floor(w)
end

local codes, waits = {}, {} -- by position in the call
local first = 0 -- position of the value's first task, less one
local idx, qsmax = {}, nil
local zargs = {} -- ZADD arguments of :ks: the slots taken and the counts of their values
local z1 = {} -- ZADD arguments of :k1: the values that took their slot
local nowstr, expiry = int(now), int(now + ttl)
for j = 1, m do
  local v, c = vals[j], counts[j]
  local vk = nil -- value_key(base, v), made when its queue is used
  local wstart, wcount, tokens, ts, running, ksn = 0, 0, 0, now, 0, 0
  if wlimit > 0 then wstart, wcount = window_field(wv[j], win, now) end
  if rate > 0 then tokens, ts = bucket_field(bv[j], rate, burst, now) end
  if climit > 0 then -- ksn: the value's slots in :ks; running: in both keys
    ksn = -(tonumber(cv[j]) or 0)
    running = ksn
    if hv[j] then running = running + 1 end
  end
  -- existed: the queue holds tasks (so its keys have a TTL); emptied: a
  -- queue this call saw is gone (its :qs entry goes too)
  local head, headqt, existed, emptied = nil, nil, false, false
  if queued[j] then
    vk = value_key(base, v)
    head, headqt = queue_head(vk, now, grace)
    existed, emptied = head ~= nil, head == nil
  end
  -- the order to decide the value's tasks in: as sent (due order), except
  -- that tasks waiting in the queue go by their place in it (a task's due
  -- moves when it is deferred; its place does not)
  local order = nil -- nil: as sent
  if head ~= nil and c > 1 then
    order = {}
    for k = 1, c do order[k] = k end
    local places = redis.call('ZMSCORE', vk .. 'q', unpack(ids, first + 1, first + c))
    local key = {}
    for k = 1, c do
      key[k] = tonumber(places[k]) or tonumber(dues[first + k])
    end
    table.sort(order, function(a, b)
      if key[a] ~= key[b] then return key[a] < key[b] end
      return a < b
    end)
  end
  local took, tokenwait, qexp = 0, 0, nil
  for o = 1, c do
    local k = o
    if order then k = order[o] end
    local slot = first + k
    local id, low = ids[slot], lows[slot] == '1'
    local code, wait = 0, 0
    if head ~= nil and head ~= id then
      code = 4
      local jit = 0.8 + 0.4 * ((seed + j * 0.6180339887) % 1)
      if headqt > now then -- just after the head is back
        wait = headqt - now + 1 + math.floor(retry * (jit - 0.8))
      else -- the head is late: wait as long as it is overdue, at least a retry
        wait = math.max(retry, now - headqt) * jit
      end
    elseif wlimit > 0 and wcount >= wlimit then
      code, wait = 1, wstart + win - now
    elseif rate > 0 and math.floor(low and tokens - reserve or tokens) < 1 then
      local need = tokenwait + 1 - tokens
      if low then need = need + reserve end
      code, wait = 2, math.ceil(need * 1000 / rate)
      tokenwait = tokenwait + 1
    elseif climit > 0 and running >= climit then
      code, wait = 3, math.floor(retry * (0.8 + 0.4 * ((seed + j * 0.6180339887) % 1)))
    end
    if code == 0 then
      wcount, tokens, took = wcount + 1, tokens - 1, took + 1
      if one then
        z1[#z1 + 1] = expiry
        z1[#z1 + 1] = v
        running = running + 1
      elseif climit > 0 then
        zargs[#zargs + 1] = expiry
        zargs[#zargs + 1] = prefix .. slot .. ':' .. v
        running, ksn = running + 1, ksn + 1
      end
      if head ~= nil then -- it is the head: it leaves the queue
        redis.call('ZREM', vk .. 'q', id)
        redis.call('HDEL', vk .. 'qt', id)
        head, headqt = queue_head(vk, now, grace)
        if head == nil then existed, emptied = false, true end
      end
    else
      wait = clamp(wait)
      waits[slot] = wait
      if ordered then
        if vk == nil then vk = value_key(base, v) end
        redis.call('ZADD', vk .. 'q', 'NX', dues[slot], id)
        redis.call('HSET', vk .. 'qt', id, int(now + wait))
        if qexp == nil or now + wait + grace > qexp then qexp = now + wait + grace end
        if head == nil then head, headqt = id, now + wait end
        emptied = false
      end
    end
    codes[slot] = code
  end
  first = first + c
  if took > 0 then
    if wlimit > 0 then
      wset[#wset + 1] = v
      wset[#wset + 1] = int(wstart) .. ' ' .. int(wcount)
    end
    if rate > 0 then
      bset[#bset + 1] = v
      bset[#bset + 1] = string.format('%.17g', tokens) .. ' ' .. int(ts)
    end
    if climit > 1 then
      zargs[#zargs + 1] = -ksn
      zargs[#zargs + 1] = cm[j]
    end
  end
  if qexp ~= nil then
    queue_expire(vk, qexp - now, existed)
    redis.call('ZADD', KEYS[2], 'GT', int(qexp), v)
    if qsmax == nil or qexp > qsmax then qsmax = qexp end
  elseif emptied then
    redis.call('ZREM', KEYS[2], v)
  end
  if indexed then
    local last = tonumber(active[j])
    if last == nil or last < now - fresh then
      idx[#idx + 1] = nowstr
      idx[#idx + 1] = v
    end
  end
end
if qsmax ~= nil then expire_at_least(KEYS[2], qsmax - now) end
if #wset > 0 then
  redis.call('HSET', KW, unpack(wset))
  expire_at_least(KW, horizon)
end
if #bset > 0 then
  redis.call('HSET', KB, unpack(bset))
  expire_at_least(KB, horizon)
end
if #zargs > 0 then
  redis.call('ZADD', KS, unpack(zargs))
  redis.call('PEXPIRE', KS, int(ttl))
end
if #z1 > 0 then add_holders(z1) end

local inorder = {}
for pos = 1, first do
  if codes[pos] ~= 0 then inorder[#inorder + 1] = waits[pos] end
end

index_touch(KEYS[1], idx, now, now, horizon + fresh)
return {now, table.concat(codes), inorder}
