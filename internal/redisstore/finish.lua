-- finish: workers report the outcomes of fired tasks of one shard.
-- KEYS[1] the shard's claims hash (see claim_holder in common.lua),
-- KEYS[2] due, KEYS[3] done, KEYS[4] dead, KEYS[5] err hash,
-- KEYS[5+i] bucket hash of task i
-- ARGV[1] retention ms, ARGV[2] wake channel, ARGV[3] shard, then per task
-- 6 values: id, gen, outcome (S succeeded | r retry (attempt+1) |
-- w wait (defer without using an attempt) | d dead), due for r/w (absolute
-- ms, or "+<ms>" from Redis TIME), error text, owner of the execution
-- claim ('' none): the claim is deleted if it holds owner, whatever the
-- code (the worker is done with its claim either way).
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
local now, expiry = nil, nil
local min_new = nil
local out = {}
local done, ndone = {}, 0
local cleared = {}
local n = (#ARGV - 3) / 6
local rfields, rowners = {}, {}
for i = 1, n do
  local a = 6 * i - 2
  if ARGV[a + 5] ~= '' then
    rfields[#rfields + 1] = claim_field(ARGV[a], ARGV[a + 1])
    rowners[#rowners + 1] = ARGV[a + 5]
  end
end
release_claims(KEYS[1], rfields, rowners)
for i = 1, n do
  local a = 6 * i - 2
  local id, g, outcome, spec, errtext = ARGV[a], tonumber(ARGV[a + 1]), ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]
  local bkey = KEYS[5 + i]
  local code, state, rdue = 1, '', 0
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
    else
      if not now then
        now = now_ms()
        -- the done set's score, formatted once: a Lua number passed to
        -- redis.call is printed with %.17g, which costs more than the ZADD
        expiry = string.format('%d', now + tonumber(ARGV[1]))
      end
      if outcome == 'S' then
        state = 'S'
        redis.call('HSET', bkey, id, 'S' .. string.sub(v, 2))
        done[ndone + 1] = expiry
        done[ndone + 2] = id
        ndone = ndone + 2
        cleared[#cleared + 1] = id
      elseif outcome == 'd' then
        state = 'd'
        redis.call('HSET', bkey, id, 'd' .. string.sub(v, 2))
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
        redis.call('HSET', bkey, id, record(state, gen + 1, att, ndue, string.sub(v, 14)))
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
