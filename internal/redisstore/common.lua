-- common.lua is prepended to every script of this package.
--
-- A task record is one field of a bucket hash (prefix .. "t:" .. bucket):
--   field = task id
--   value = <state: 1 byte> <gen: uint32> <attempt: uint16> <due ms: uint48> <body>
-- (integers big-endian; see decodeRecord in store.go). state is one
-- character: s scheduled, r retrying, S succeeded, d dead, c cancelled.
-- A take does not rewrite the record: a task in state s or r that is not
-- in its shard's due set was taken by a leader (fired, see taken()). Every
-- change that puts a task back to waiting with something new (a retry, a
-- deferral, a reschedule, an update, a redrive) increases gen, so a Kafka
-- copy of an earlier generation is stale to the worker; a copy of the
-- current generation was fired at or after the due time the record holds.
-- body is the task's immutable encoding (package task), compared byte for
-- byte to recognise identical re-submits. The header is binary to keep a
-- pending task under 300 bytes of Redis memory.

-- now_us is Redis' clock in microseconds as of the last now_ms() call.
local now_us = nil

local function now_ms()
  local t = redis.call('TIME')
  now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function parse(v)
  local gen, att, due, pos = struct.unpack('>I4I2I6', v, 2)
  return string.sub(v, 1, 1), gen, att, due, string.sub(v, pos)
end

local function record(state, gen, attempt, due, body)
  return state .. struct.pack('>I4I2I6', gen, attempt, due) .. body
end

-- the same function as bucketOf in keys.go
local function bucket(prefix, id)
  local h = 0
  for i = 1, #id do
    h = (h * 31 + string.byte(id, i)) % 2147483647
  end
  return prefix .. 't:' .. (h % 1024)
end

-- is_waiting: a waiting-state record (scheduled or retrying), in the due
-- set or taken out of it by a leader (see taken()).
local function is_waiting(st)
  return st == 's' or st == 'r'
end

-- is_fired: a record a worker may run or finish, given the copy's
-- generation matches: a waiting-state one (a take leaves records as they
-- are), or f/F, the fired states of records written before that change.
local function is_fired(st)
  return is_waiting(st) or st == 'f' or st == 'F'
end

-- waiting is the state of a task back in the due set.
local function waiting(attempt)
  if attempt > 1 then return 'r' end
  return 's'
end

-- wake tells pollers that shard's earliest due time moved earlier. It
-- runs after a write that added members to the due set (added: a table
-- whose keys are their ids) and publishes when the set's first member is
-- one of them: due, the earliest added due time, is the message
-- ("<shard>:<due ms>", read by ParseWake in wake.go). The
-- head is read by member, without its score: a score reply is a double
-- that Redis prints (%.17g) and Lua parses back, and those two cost more
-- than the rest of a one-task section of a schedule (3.5 against 0.5 µs
-- measured with redis-benchmark). A task added in the same millisecond
-- as the old head, or the head itself moved later, may wake a poller
-- that did not need it: a spare wake-up (it reads the head again), never
-- a missed one.
local function wake(due_key, channel, shard, due, added)
  local h = redis.call('ZRANGE', due_key, '0', '0')[1]
  if h and added[h] then
    redis.call('PUBLISH', channel, shard .. ':' .. string.format('%d', due))
  end
end

-- A due-set score is the due time in ms plus the record's bucket / 1024,
-- so that a take reads each record's bucket from its score instead of
-- hashing the id (the hash was the costliest step of a take). The fraction
-- needs 10 of the double's 53 bits: exact for due times before 2^43 ms
-- (year 2248). Written with 4 decimals (Lua would print only 14 digits);
-- the bucket is recovered by rounding. A task is due when its score is
-- below now + 1.
local function due_score(due, bkey)
  return string.format('%.4f', due + tonumber(string.match(bkey, '%d+$')) / 1024)
end

-- due_of_score splits a score into the due time and the bucket key.
local function due_of_score(prefix, score)
  local due = math.floor(score)
  return due, prefix .. 't:' .. math.floor((score - due) * 1024 + 0.5)
end

-- head is the due set's earliest due time (nil when empty), for a take
-- (the wake-up after a write reads the head's member only, see wake).
local function head(due_key)
  local h = redis.call('ZRANGE', due_key, '0', '0', 'WITHSCORES')
  if h[2] then return math.floor(tonumber(h[2])) end
  return nil
end

-- taken tells whether a waiting-state record (s or r) is out of the due
-- set, i.e. a leader took it: it is reported as fired ('F'), or as
-- succeeded when its id is in the done set (see lean success below).
local function taken(due_key, id, st)
  return is_waiting(st) and not redis.call('ZSCORE', due_key, id)
end

-- Lean success. A worker that still holds the execution claim of the copy
-- it ran records a success without reading or rewriting the record: the
-- id goes into the done set (which holds it for the retention purge
-- anyway) and out of the due set, and the record keeps its waiting state.
-- A waiting-state record whose id is in the done set is succeeded; one
-- that is also out of the due set, always (a lean success leaves the due
-- set, and nothing puts a task back into it without taking it out of the
-- done set or first checking the done set). What makes trusting the claim
-- safe: a claim "<id>:<gen>" held by its owner means the record still has
-- generation gen and no outcome, because every script that changes a
-- fired or requeued record without holding its claim drops the claim
-- (drop_claim): finish (another owner's outcome), park, cancel,
-- reschedule, schedule's update, firepoison, movestart.
local function lean_done(done_key, id)
  return redis.call('ZSCORE', done_key, id) ~= false
end

-- requeue puts a taken task back into the due set at its due time: what a
-- settle does with a take Kafka did not confirm. The record is not
-- touched. Only a task still in a waiting state with generation g (the
-- header's 4 bytes, see gen_bytes) and no lean success is put back: a
-- worker may have finished or retried it meanwhile. Returns whether it did.
local function requeue(due_key, done_key, bkey, id, v, g)
  if not is_waiting(string.sub(v, 1, 1)) or string.sub(v, 2, 5) ~= g then return false end
  if lean_done(done_key, id) then return false end
  local due = struct.unpack('>I6', v, 8)
  redis.call('ZADD', due_key, due_score(due, bkey), id)
  return true
end

-- gen_bytes is a generation as the record header holds it (4 bytes).
local function gen_bytes(g)
  return struct.pack('>I4', g)
end

-- A take's claims form one lease: a member "<seq>:<count>" of the shard's
-- in-flight set, scored by its deadline (ms), and a string key
-- prefix .. "lease:" .. seq holding "<id> <gen: 4 bytes>" for each task
-- (ids have no white space). lease_key names it.
local function lease_key(prefix, member)
  return prefix .. 'lease:' .. string.match(member, '^[^:]+')
end

-- lease_entries calls f(id, bkey, record, gen bytes) for each task of a
-- lease's value val (nil: none) whose record still exists.
local function lease_entries(prefix, val, f)
  if not val then return end
  local pos, n = 1, #val
  while pos <= n do
    local sp = string.find(val, ' ', pos, true)
    if not sp then return end
    local id = string.sub(val, pos, sp - 1)
    local bkey = bucket(prefix, id)
    local v = redis.call('HGET', bkey, id)
    if v then f(id, bkey, v, string.sub(val, sp + 1, sp + 4)) end
    pos = sp + 5
  end
end

-- drop_lease removes a lease (its in-flight member and its key), then
-- calls f(id, bkey, record, gen bytes) for each of its tasks whose record
-- still exists: what a re-claim (take) and an adopt do with it.
local function drop_lease(inflight_key, prefix, member, f)
  local lkey = lease_key(prefix, member)
  local val = redis.call('GET', lkey)
  redis.call('DEL', lkey)
  redis.call('ZREM', inflight_key, member)
  lease_entries(prefix, val, f)
end

-- fence checks a leader's token against the shard's highest one, raising it.
-- It returns the stored token when the caller is stale, nil when it may go on.
local function fence(fence_key, token)
  local f = tonumber(redis.call('GET', fence_key) or '0')
  if token < f then return f end
  if token > f then redis.call('SET', fence_key, string.format('%d', token)) end
  return nil
end

-- A sorted set of at most zset-max-listpack-entries (128) members of at
-- most zset-max-listpack-value (64) bytes is a listpack, in which every
-- ZADD member is a linear scan of the set that parses each entry's score:
-- a batch of k members into a set of n costs k * n. A due set is deleted
-- whenever its shard has fired everything, and the next ZADD of fewer than
-- 129 members creates it as a listpack again: in bench/compare's end to
-- end workload (batches of tasks due now, fired as they come) the ZADDs
-- cost 4-6 us of Redis per task, a fifth to a quarter of all. zadd_all
-- turns a set of at most 128 members into a skip list before a batch of at
-- least zadd_skiplist_min members: one member longer than
-- zset-max-listpack-value (and no task id: it holds white space), added
-- and removed again in the same call (a skip list never goes back to a
-- listpack). ZCARD, not OBJECT ENCODING, tells a small set: no ACL rule to
-- add, and a small set that is a skip list already costs only the pad's
-- two commands. Smaller batches leave a small set compact.
local zadd_skiplist_min = 16
-- (a literal: Lua makes it once, when the script is loaded, not per call)
local zset_pad = '~pad ---------------------------------------------------------------------------------------------------------------------------'

-- zadd_all adds score/member pairs (a flat list) to key, in chunks:
-- unpack() of more than a few thousand values fails in Redis' Lua.
local function zadd_all(key, pairs_list)
  local n = #pairs_list
  local pad = n >= 2 * zadd_skiplist_min and redis.call('ZCARD', key) <= 128
  if pad then redis.call('ZADD', key, '+inf', zset_pad) end
  for i = 1, n, 1000 do
    redis.call('ZADD', key, unpack(pairs_list, i, math.min(i + 999, n)))
  end
  if pad then redis.call('ZREM', key, zset_pad) end
end

-- Elastic shards (see shardmap.go). A shard's stamp key holds the map
-- ("<count>|<previous>|<epoch>") with the highest count any process routed
-- by when it wrote to the shard. A caller that routes by a smaller count
-- uses a map older than a growth that already touched this shard:
-- check_map refuses it ("DQSTALEMAP <stored map>"); it adopts that map and
-- routes again.
local function check_map(stamp_key, map)
  local cur = redis.call('GET', stamp_key)
  if cur == map then return end -- the common case: the same map
  local count = tonumber(string.match(map, '^%d+'))
  local st = 0
  if cur then st = tonumber(string.match(cur, '^%d+')) end
  if st > count then error({err = 'DQSTALEMAP ' .. cur}) end
  if st < count then redis.call('SET', stamp_key, map) end
end

-- A record on its way to another shard (movestart.lua) is
-- 'M' .. kind .. score (uint48) .. the record, where kind tells which set it
-- left: q due set (score: none, recomputed), o done set, x dead set, - none.
-- Every by-id script answers such a record with code 7 ("moved"): the
-- caller finishes the move and goes to the new shard.
local function is_moving(v)
  return string.sub(v, 1, 1) == 'M'
end

-- Parked tasks (park.lua): a parked task keeps its waiting record, and its
-- id is in its type's parked index, prefix .. 'parked:' .. type, whose
-- type is in prefix .. 'ptypes' while the index is not empty (the prefix
-- is the shard's, its due set's name without 'due': see keys.go). A
-- script that takes a waiting task out of the due set or gives it a new
-- due score (cancel, reschedule, schedule's update) calls unindex_parked,
-- so that the index holds only parked tasks (GET /v1/types counts it).

-- body_type is the task type in a record's body (task.AppendBody: a
-- version byte, a flags byte, then the type, its uvarint length first);
-- nil for a body it cannot read.
local function body_type(body)
  if string.byte(body, 1) ~= 1 then return nil end
  local n, mul, i = 0, 1, 3
  while true do
    local c = string.byte(body, i)
    if not c or i > 6 then return nil end
    i = i + 1
    if c < 128 then
      n = n + c * mul
      break
    end
    n = n + (c - 128) * mul
    mul = mul * 128
  end
  return string.sub(body, i, i + n - 1)
end

-- unindex_parked drops id from the parked index of its body's type (a
-- no-op for a task that is not parked), and the type from ptypes when
-- that empties the index.
local function unindex_parked(due_key, id, body)
  local typ = body_type(body)
  if not typ then return end
  local prefix = string.sub(due_key, 1, -4)
  local ikey = prefix .. 'parked:' .. typ
  if redis.call('ZREM', ikey, id) == 1 and redis.call('EXISTS', ikey) == 0 then
    redis.call('SREM', prefix .. 'ptypes', typ)
  end
end

-- Execution claims (claim.lua): one hash per
-- shard, prefix .. 'runs', field "<id>:<gen>", value "<deadline ms>|<owner>".
-- A claim is held while its deadline is after Redis' clock; an expired one
-- is the same as none. One hash instead of a key with a TTL per claim: a
-- call reads and writes the claims of all its tasks in one command each
-- (HMGET, HSET, HDEL) instead of two or three per task, and creates no key.
-- The hash keeps a field claim_pad (not a claim: claim fields end in
-- ":<gen>") with a value longer than any hash-max-listpack-value in use, so
-- that Redis keeps the hash in its hashtable encoding: in the compact
-- listpack encoding every HMGET, HSET and HDEL field is a linear scan of up
-- to hash-max-listpack-entries entries, which made the claims cost more
-- than the records they guard. A claim call that finds the pad missing
-- (a new hash: nothing deletes it) writes it with its
-- claims: Redis picks the encoding from the whole command, and a
-- hashtable never goes back to a listpack. Written on every call, the
-- 8 KiB would also go to the AOF and the replicas each time.
local claim_pad = '~pad'
local function claim_pad_value()
  return string.rep('-', 8192)
end

-- claim_field names the claim of generation g of id.
local function claim_field(id, g)
  return id .. ':' .. g
end

-- drop_claim deletes the claim of generation g of id, whoever holds it:
-- what a script does that changes a record without holding its claim (see
-- lean success above).
local function drop_claim(runs_key, id, g)
  redis.call('HDEL', runs_key, claim_field(id, string.format('%d', g)))
end

-- Delivered (settle.lua): a waiting-state record out of the due set and
-- out of the done set whose receipt (the shard's receipts hash, prefix ..
-- 'rcpt') says 'd' for the record's generation, and no claim of that
-- generation exists: a claim means a work process of its topic runs it
-- (fired), and its outcome then decides (a lean success puts it into the
-- done set: succeeded). Nothing is written to make a task delivered but
-- its receipt; the settle keeps the take's lease key as the purge list of
-- its tasks (delivered_list), under the retention's expiry in the shard's
-- delivered index (prefix .. 'dlx').
local function delivered_list(prefix, seq)
  return prefix .. 'dl:' .. seq
end

-- is_delivered tells whether record v of id, waiting-state and out of the
-- due and done sets (the caller checked), is delivered.
local function is_delivered(prefix, id, v)
  local r = redis.call('HGET', prefix .. 'rcpt', id)
  if not r or string.sub(r, 1, 1) ~= 'd' or string.sub(r, 2, 5) ~= string.sub(v, 2, 5) then return false end
  local g = string.format('%d', struct.unpack('>I4', v, 2))
  return redis.call('HEXISTS', prefix .. 'runs', claim_field(id, g)) == 0
end

-- taken_state is the state a by-id script answers for a waiting-state
-- record v of id out of the due set: 'S' after a lean success, 'D' when
-- it was delivered (is_delivered), else 'F' (fired). The shard's key
-- prefix is done_key's.
local function taken_state(done_key, id, v)
  if lean_done(done_key, id) then return 'S' end
  if is_delivered(string.sub(done_key, 1, -5), id, v) then return 'D' end
  return 'F'
end

-- claim_holder is the owner of a claim value that is still held at now,
-- nil when v is absent or expired.
local function claim_holder(v, now)
  if not v then return nil end
  local sep = string.find(v, '|', 1, true)
  if not sep or tonumber(string.sub(v, 1, sep - 1)) <= now then return nil end
  return string.sub(v, sep + 1)
end

-- release_claims deletes the claims fields[i] whose value names owners[i]
-- (expired or not: the owner is done with it either way), in one HMGET and
-- one HDEL, and returns how many it deleted.
local function release_claims(runs_key, fields, owners)
  if #fields == 0 then return 0 end
  local cur = redis.call('HMGET', runs_key, unpack(fields))
  local del = {}
  for i = 1, #fields do
    local v = cur[i]
    if v then
      local sep = string.find(v, '|', 1, true)
      if sep and string.sub(v, sep + 1) == owners[i] then del[#del + 1] = fields[i] end
    end
  end
  if #del > 0 then redis.call('HDEL', runs_key, unpack(del)) end
  return #del
end

-- sweep_claims drops expired claims a few at a time, sampled at random the
-- way Redis expires keys: a claim is normally deleted by its owner's
-- outcome, or overwritten by the next claim of the same copy; what is left
-- is the claim of a worker that died and whose copy was never delivered
-- again (the topic's retention passed).
-- Best effort: a Redis user whose ACL predates the sweep (no +hrandfield)
-- still claims; its claims left behind are then dropped only by the next
-- claim of their copy.
local function sweep_claims(runs_key, now)
  local s = redis.pcall('HRANDFIELD', runs_key, 4)
  if type(s) ~= 'table' or s.err then return end
  -- the sampled claims' values, never the pad's: Redis' Lua hashes every
  -- byte of a string it makes, and the pad's 8 KiB (sampled nearly always
  -- from a hash of a few claims) cost more than the rest of a small claim
  -- call
  local fields = {}
  for i = 1, #s do
    if s[i] ~= claim_pad then fields[#fields + 1] = s[i] end
  end
  if #fields == 0 then return end
  local v = redis.call('HMGET', runs_key, unpack(fields))
  local del = {}
  for i = 1, #fields do
    if not claim_holder(v[i], now) then del[#del + 1] = fields[i] end
  end
  if #del > 0 then redis.call('HDEL', runs_key, unpack(del)) end
end

-- Attempt history (history.go reads it). The shard's err hash (prefix ..
-- 'err', field = task id) holds each task's ended attempts (finish.lua:
-- retries and deaths always, a success when a history exists;
-- firepoison.lua: deaths), so that every
-- script that already moves or deletes a task's last error (the purges of
-- take.lua and purgedead.lua, the moves, probe) carries its history too:
--   value = \1 <count: uint8> <dropped: uint32> <entry> ...
--   entry = <attempt: uint16> <started ms: uint48, 0 unknown>
--           <ended ms: uint48, Redis' clock> <outcome: r retry | d dead |
--           S succeeded> <error length: uint16> <error>
-- (integers big-endian), oldest first. A value that does not start with
-- \1 is the plain last error written before the history existed: it
-- becomes one entry (a retry of the attempt before the new one, at least
-- 1, no times) when something is appended to it. At most history_max entries
-- and, beyond the newest, history_max_bytes of them are kept: the oldest
-- go first, counted in dropped.
local history_max = 16
local history_max_bytes = 8192

-- history_entry packs an entry: run is the worker's 8 bytes (attempt,
-- started ms; see Finish in finish.go), whose attempt att replaces when
-- given (the record's, where the script read it); ended the 6 packed
-- bytes of the end time.
local function history_entry(run, att, ended, outcome, err)
  local started = '\0\0\0\0\0\0'
  if #run == 8 then started = string.sub(run, 3) end
  if att == nil then
    if #run == 8 then return run .. ended .. outcome .. struct.pack('>I2', #err) .. err end
    att = 0
  end
  return struct.pack('>I2', att) .. started .. ended .. outcome .. struct.pack('>I2', #err) .. err
end

-- history_append is old (the err hash's value, false or nil for none) with
-- entry appended.
local function history_append(old, entry)
  if not old then return '\1\1\0\0\0\0' .. entry end
  local count, dropped, body
  if string.byte(old, 1) == 1 and #old >= 6 then
    count, dropped = struct.unpack('>BI4', old, 2)
    body = string.sub(old, 7) .. entry
  else
    local att = math.max(struct.unpack('>I2', entry) - 1, 1)
    count, dropped = 1, 0
    body = struct.pack('>I2', att) .. string.rep('\0', 12) .. 'r' .. struct.pack('>I2', #old) .. old .. entry
  end
  count = count + 1
  while count > history_max or (count > 1 and #body - #entry > history_max_bytes) do
    body = string.sub(body, 18 + struct.unpack('>I2', body, 16))
    count, dropped = count - 1, dropped + 1
  end
  return '\1' .. string.char(count) .. struct.pack('>I4', dropped) .. body
end
