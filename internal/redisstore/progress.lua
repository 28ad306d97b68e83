-- progress: a mover's count of tasks still to move out of an old shard
-- (SetGrowProgress); the first call of a growth (another epoch) resets the
-- shard's figures, its moved counter among them.
-- KEYS[1] the old shard's progress hash
-- ARGV[1] the growth's epoch, ARGV[2] tasks still to move
-- Returns 1.
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'epoch', ARGV[1], 'moved', 0)
end
redis.call('HSET', KEYS[1], 'remaining', ARGV[2])
return 1
