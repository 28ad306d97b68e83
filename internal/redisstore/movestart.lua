-- movestart: the first step of moving tasks out of an old shard (the
-- shard's leader, fenced). Each record leaves its set and becomes a moving
-- record (see is_moving in common.lua) that keeps everything movein needs:
-- no take of this shard can fire it any more, and every by-id script
-- answers "moved". A task in flight (taken, not finished) is left alone:
-- its worker finishes it here; it moves once finished or retried. A taken
-- task with a lean success (see common.lua) moves as a succeeded one, with
-- its done-set score. A waiting task loses the claim of its generation (a
-- worker may run a copy of it that Kafka did not confirm).
-- KEYS[1] due, KEYS[2] done, KEYS[3] dead, KEYS[4] err hash, KEYS[5] fence,
-- KEYS[6] claims hash, KEYS[7] receipts hash, KEYS[7+i] bucket hash of
-- task i
-- ARGV[1] token, ARGV[1+i] id of task i
-- Returns {-1, stored token} when fenced, else per id {code, moving value
-- or false, last error or false, fire receipt or false}: 1 moving (now or
-- already), 0 gone, 3 in flight. A delivered task (is_delivered in
-- common.lua) moves with its receipt (kind 'v'): no worker would finish
-- it, so a growth must not wait for it.
local stale = fence(KEYS[5], tonumber(ARGV[1]))
if stale then return {-1, stale} end
local out = {}
for i = 2, #ARGV do
  local id, bkey = ARGV[i], KEYS[6 + i]
  local v = redis.call('HGET', bkey, id)
  local code, mv = 0, false
  if v and is_moving(v) then
    code, mv = 1, v
  elseif v then
    local st = string.sub(v, 1, 1)
    local kind, score = '-', nil
    if is_waiting(st) then
      score = redis.call('ZSCORE', KEYS[1], id)
      if score then
        kind = 'q'
        redis.call('ZREM', KEYS[1], id)
        drop_claim(KEYS[6], id, struct.unpack('>I4', v, 2))
      else
        score = redis.call('ZSCORE', KEYS[2], id)
        if score then
          kind = 'o'
          redis.call('ZREM', KEYS[2], id)
        elseif is_delivered(string.sub(KEYS[7], 1, -5), id, v) then
          -- its old shard's purge list then finds it gone
          kind, score = 'v', '0'
        end
      end
    elseif st == 'S' or st == 'c' then
      score = redis.call('ZSCORE', KEYS[2], id)
      if score then
        kind = 'o'
        redis.call('ZREM', KEYS[2], id)
      end
    elseif st == 'd' then
      score = redis.call('ZSCORE', KEYS[3], id)
      if score then
        kind = 'x'
        redis.call('ZREM', KEYS[3], id)
      end
    end
    if (is_waiting(st) and not score) or st == 'F' or st == 'f' then
      code = 3
    else
      code = 1
      mv = 'M' .. kind .. struct.pack('>I6', math.floor(tonumber(score or '0'))) .. v
      redis.call('HSET', bkey, id, mv)
    end
  end
  out[#out + 1] = code
  out[#out + 1] = mv
  out[#out + 1] = (code == 1 and redis.call('HGET', KEYS[4], id)) or false
  out[#out + 1] = (code == 1 and redis.call('HGET', KEYS[7], id)) or false
end
return out
