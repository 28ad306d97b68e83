-- movedone: the last step of a move, on the old shard: the moving record
-- is deleted, only if it is still exactly the one moved in (compare and
-- delete, so repeating it is harmless), and the shard's moved counter rises.
-- KEYS[1] err hash, KEYS[2] progress hash, KEYS[3] receipts hash,
-- KEYS[3+i] bucket hash of task i
-- ARGV pairs: id, moving value
-- Returns how many were deleted.
local n = 0
for i = 1, #ARGV, 2 do
  local bkey = KEYS[3 + (i + 1) / 2]
  if redis.call('HGET', bkey, ARGV[i]) == ARGV[i + 1] then
    redis.call('HDEL', bkey, ARGV[i])
    redis.call('HDEL', KEYS[1], ARGV[i])
    redis.call('HDEL', KEYS[3], ARGV[i])
    n = n + 1
  end
end
if n > 0 then redis.call('HINCRBY', KEYS[2], 'moved', n) end
return n
