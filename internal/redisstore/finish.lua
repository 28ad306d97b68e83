-- finish: workers report the outcomes of fired tasks of one or more
-- shards of one Redis node (a call of several shards only where one
-- redis-server holds every shard; a Redis Cluster call is always one
-- shard: its keys share a slot).
-- ARGV[1] retention ms, ARGV[2] wake channel, then one section per shard:
-- shard, the shard's key prefix (bucket hashes are named from it, see
-- bucket), n, then per task: id, gen, owner of the execution claim ('' none), outcome
-- (S succeeded | r retry (attempt+1) | w wait (defer without using an
-- attempt) | d dead), run (the attempt the worker ran, uint16, and when it
-- started, uint48 ms, 0 unknown: 8 bytes, or '' for none), and for r, w
-- and d two more: due for r/w (absolute ms, or "+<ms>" from Redis TIME;
-- '' for d) and error text.
-- KEYS, per section: the shard's claims hash (see claim_holder in
-- common.lua), due, done, dead, err hash (the attempt history, see
-- history_append in common.lua: a retry and a death append an entry, a
-- success one to a history that exists, a deferral none). The claim is
-- deleted if it holds owner, whatever the code (the worker is done with
-- its claim either way).
-- Returns per task, in order, {code, state, due}: 1 done, 0 not found, 5 stale
-- generation, 6 not in a fired state (already finished); due is 0 for a
-- lean success (the record is not read).
-- One call per batch (and per shard on a Redis Cluster): the fixed cost of
-- a script call is paid once for all the outcomes a worker has ready, and
-- a shard's done-set and history writes of successes go out in one
-- command each (an HMGET and an HSET of the err hash).
-- A fired task's record is in state s or r (see common.lua; f and F are
-- accepted from records written before). A retry or a deferral goes back
-- to the due set with the next generation, so that a Kafka copy of this
-- firing is stale from then on. A task that a stray copy finished while it
-- waited in the due set to fire again is dropped from there by the take.
-- A success whose claim the caller still holds is a lean success (see
-- common.lua): the claim proves the record's generation and that it has
-- no outcome yet, so the record is neither read nor rewritten; the id goes
-- into the done set and out of the due set. Every other outcome reads the
-- record (its bucket named here, see bucket: a success needs no key per
-- task), and drops the claim of that generation whoever holds it.
local now, expiry, ended = nil, nil, nil
local function stamp()
  if not now then
    now = now_ms()
    -- the done set's score, formatted once: a Lua number passed to
    -- redis.call is printed with %.17g, which costs more than the ZADD
    expiry = string.format('%d', now + tonumber(ARGV[1]))
    -- the history entries' end time, packed once
    ended = struct.pack('>I6', now)
  end
end
local out = {}

-- finish_shard stores a section's outcomes: KEYS from k, ARGV from a (its
-- shard); it returns where the next section's ARGV start.
local function finish_shard(k, a)
  local shard = ARGV[a]
  local prefix = ARGV[a + 1]
  -- the outcomes, one entry per task
  local ids, gens, owners, outcomes, runs, specs, errtexts = {}, {}, {}, {}, {}, {}, {}
  local n = tonumber(ARGV[a + 2])
  a = a + 3
  for t = 1, n do
    ids[t], gens[t], owners[t], outcomes[t], runs[t] = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]
    if outcomes[t] == 'S' then
      a = a + 5
    else
      specs[t], errtexts[t] = ARGV[a + 5], ARGV[a + 6]
      a = a + 7
    end
  end
  -- the claims the callers hold: one HMGET for the section
  local cfields, cidx = {}, {}
  local field = {}
  for i = 1, n do
    if owners[i] ~= '' then
      local f = claim_field(ids[i], gens[i])
      field[i] = f
      cfields[#cfields + 1] = f
      cidx[#cidx + 1] = i
    end
  end
  local mine = {}
  local drop, del = {}, {} -- the claim fields to delete: as a set, and a list
  if #cfields > 0 then
    local cur = redis.call('HMGET', KEYS[k], unpack(cfields))
    for j = 1, #cfields do
      local v = cur[j]
      if v then
        local sep = string.find(v, '|', 1, true)
        local i = cidx[j]
        if sep and string.sub(v, sep + 1) == owners[i] then
          mine[i] = true
          drop[cfields[j]] = true
          del[#del + 1] = cfields[j]
        end
      end
    end
  end
  -- the ids a retry or a deferral put back into the due set (see wake)
  local added = {}
  local min_new = nil
  local done, ndone = {}, 0
  -- the successes: ids, runs and attempts (false: the run's, see
  -- history_entry) for their history entries
  local cleared, sruns, satts = {}, {}, {}
  local lean, lz = {}, {} -- the lean successes: as a set of claim fields, and their ids
  for i = 1, n do
    local id, outcome = ids[i], outcomes[i]
    local code, state, rdue = 1, '', 0
    if outcome == 'S' and mine[i] then
      -- a second copy of the same claim in this section finds it finished
      local f = field[i]
      if lean[f] then
        code, state = 6, 'S'
      else
        lean[f] = true
        lz[#lz + 1] = id
        stamp()
        state = 'S'
        done[ndone + 1] = expiry
        done[ndone + 2] = id
        ndone = ndone + 2
        -- the worker's attempt (the record is not read); a success at
        -- the first attempt ('' run) writes no history
        if runs[i] ~= '' then
          cleared[#cleared + 1] = id
          sruns[#cleared], satts[#cleared] = runs[i], false
        end
      end
    else
      local g = tonumber(gens[i])
      local bkey = bucket(prefix, id)
      local v = redis.call('HGET', bkey, id)
      if not v then
        code = 0
      else
        -- the header only: the body is copied only when the record is
        -- rewritten with a new header (a success or a death changes only the
        -- state byte)
        local st = string.sub(v, 1, 1)
        local gen, att, due = struct.unpack('>I4I2I6', v, 2)
        state, rdue = st, due
        if gen ~= g then
          code = 5
        elseif not is_fired(st) then
          code = 6
        elseif is_waiting(st) and lean_done(KEYS[k + 2], id) then
          code, state = 6, 'S'
        else
          stamp()
          local f = field[i] or claim_field(id, gens[i])
          if not drop[f] then
            drop[f] = true
            del[#del + 1] = f
          end
          if outcome == 'S' then
            state = 'S'
            redis.call('HSET', bkey, id, 'S' .. string.sub(v, 2))
            done[ndone + 1] = expiry
            done[ndone + 2] = id
            ndone = ndone + 2
            cleared[#cleared + 1] = id
            sruns[#cleared], satts[#cleared] = runs[i], att
          elseif outcome == 'd' then
            state = 'd'
            redis.call('HSET', bkey, id, 'd' .. string.sub(v, 2))
            redis.call('ZADD', KEYS[k + 3], now, id)
            redis.call('HSET', KEYS[k + 4], id, history_append(redis.call('HGET', KEYS[k + 4], id),
              history_entry(runs[i], att, ended, 'd', errtexts[i])))
          else
            local spec, ndue = specs[i], nil
            if string.sub(spec, 1, 1) == '+' then
              ndue = now + tonumber(string.sub(spec, 2))
            else
              ndue = tonumber(spec)
            end
            if outcome == 'r' then
              redis.call('HSET', KEYS[k + 4], id, history_append(redis.call('HGET', KEYS[k + 4], id),
                history_entry(runs[i], att, ended, 'r', errtexts[i])))
              att = att + 1
            end
            state, rdue = waiting(att), ndue
            redis.call('HSET', bkey, id, record(state, gen + 1, att, ndue, string.sub(v, 14)))
            redis.call('ZADD', KEYS[k + 1], due_score(ndue, bkey), id)
            if min_new == nil or ndue < min_new then min_new = ndue end
            added[id] = true
          end
        end
      end
    end
    out[#out + 1] = code
    out[#out + 1] = state
    out[#out + 1] = rdue
  end
  -- the claims the callers held, and those of the records changed here
  if #del > 0 then redis.call('HDEL', KEYS[k], unpack(del)) end
  if ndone > 0 then
    zadd_all(KEYS[k + 2], done)
  end
  if #cleared > 0 then
    -- the successes' history entries, appended to the histories that
    -- exist (of tasks that failed before) only: one HMGET, and one HSET
    -- when there are any. A lean success at the first attempt is not
    -- among them and writes nothing (GET shows its entry without
    -- times): an entry for every success cost the hot path a quarter to a
    -- third more Redis CPU and every succeeded task a hash field until
    -- its purge, and an HMGET for every success still 5-13% (see
    -- docs/design.md). The done set's purge deletes a history with the
    -- record (take.lua).
    local old = redis.call('HMGET', KEYS[k + 4], unpack(cleared))
    local set = {}
    for j = 1, #cleared do
      if old[j] then
        set[#set + 1] = cleared[j]
        set[#set + 1] = history_append(old[j], history_entry(sruns[j], satts[j] or nil, ended, 'S', ''))
      end
    end
    if #set > 0 then redis.call('HSET', KEYS[k + 4], unpack(set)) end
  end
  -- a lean success leaves the due set: its record may have been put back
  -- there (a take Kafka did not confirm, whose copy the worker ran)
  if #lz > 0 then redis.call('ZREM', KEYS[k + 1], unpack(lz)) end
  if min_new ~= nil then wake(KEYS[k + 1], ARGV[2], shard, min_new, added) end
  return a
end

local k, a = 1, 3
while a <= #ARGV do
  a = finish_shard(k, a)
  k = k + 5
end
return out
