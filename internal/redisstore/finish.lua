-- finish: workers report the outcomes of fired tasks of one shard.
-- KEYS[1] (unused), KEYS[2] due, KEYS[3] done, KEYS[4] dead, KEYS[5] err hash,
-- KEYS[4+2i] bucket hash of task i, KEYS[5+2i] run marker of task i
-- ARGV[1] retention ms, ARGV[2] wake channel, ARGV[3] shard, then per task
-- 6 values: id, gen, outcome (S succeeded | r retry (attempt+1) |
-- w wait (defer without using an attempt) | d dead), due for r/w (absolute
-- ms, or "+<ms>" from Redis TIME), error text, owner of the run marker
-- ('' none): the marker is deleted if it holds owner, whatever the code
-- (the worker is done with its claim either way).
-- Returns per task {code, state, due}: 1 done, 0 not found, 5 stale
-- generation, 6 not in a fired state (already finished).
-- One call per shard and batch: the fixed cost of a script call is paid
-- once for all the outcomes a worker has ready, and the done-set and error
-- writes of successes go out in one command each.
-- A fired task's record is in state s or r (see common.lua; f and F are
-- accepted from records written before). A retry or a deferral goes back
-- to the due set with the next generation, so that a Kafka copy of this
-- firing is stale from then on. A task that a stray copy finished while it
-- waited in the due set to fire again is dropped from there by the take.
-- the due set's head before this call, read only when a retry or a
-- deferral is about to change it (most calls store successes only)
local old_head, head_read = nil, false
local now = nil
local min_new = nil
local out = {}
local done, ndone = {}, 0
local cleared = {}
local n = (#ARGV - 3) / 6
for i = 1, n do
  local a = 6 * i - 2
  local id, g, outcome, spec, errtext, owner = ARGV[a], tonumber(ARGV[a + 1]), ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5]
  local bkey = KEYS[4 + 2 * i]
  if owner ~= '' and redis.call('GET', KEYS[5 + 2 * i]) == owner then
    redis.call('DEL', KEYS[5 + 2 * i])
  end
  local code, state, rdue = 1, '', 0
  local v = redis.call('HGET', bkey, id)
  if not v then
    code = 0
  else
    local st, gen, att, due, body = parse(v)
    state, rdue = st, due
    if gen ~= g then
      code = 5
    elseif not is_fired(st) then
      code = 6
    else
      now = now or now_ms()
      if outcome == 'S' then
        state = 'S'
        redis.call('HSET', bkey, id, record('S', gen, att, due, body))
        done[ndone + 1] = now + tonumber(ARGV[1])
        done[ndone + 2] = id
        ndone = ndone + 2
        cleared[#cleared + 1] = id
      elseif outcome == 'd' then
        state = 'd'
        redis.call('HSET', bkey, id, record('d', gen, att, due, body))
        redis.call('ZADD', KEYS[4], now, id)
        redis.call('HSET', KEYS[5], id, errtext)
      else
        local ndue
        if string.sub(spec, 1, 1) == '+' then
          ndue = now + tonumber(string.sub(spec, 2))
        else
          ndue = tonumber(spec)
        end
        if outcome == 'r' then
          att = att + 1
          redis.call('HSET', KEYS[5], id, errtext)
        end
        state, rdue = waiting(att), ndue
        redis.call('HSET', bkey, id, record(state, gen + 1, att, ndue, body))
        if not head_read then old_head, head_read = head(KEYS[2]), true end
        redis.call('ZADD', KEYS[2], due_score(ndue, bkey), id)
        if min_new == nil or ndue < min_new then min_new = ndue end
      end
    end
  end
  out[#out + 1] = code
  out[#out + 1] = state
  out[#out + 1] = rdue
end
if ndone > 0 then
  zadd_all(KEYS[3], done)
  redis.call('HDEL', KEYS[5], unpack(cleared))
end
if min_new ~= nil then wake(KEYS[2], ARGV[2], ARGV[3], min_new, old_head) end
return out
