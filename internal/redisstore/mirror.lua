-- mirror: write the namespace's shard map into its meta hash unless the
-- hash holds the same or a newer one (a higher epoch, or the same epoch
-- settled). A hash without "previous" predates the map: it never grew.
-- KEYS[1] meta hash; ARGV count, previous, state, epoch
if redis.call('HEXISTS', KEYS[1], 'previous') == 1 then
  local cur = tonumber(redis.call('HGET', KEYS[1], 'epoch'))
  local ep = tonumber(ARGV[4])
  if ep < cur then return 0 end
  if ep == cur and (redis.call('HGET', KEYS[1], 'state') == 'stable' or ARGV[3] ~= 'stable') then return 0 end
end
redis.call('HSET', KEYS[1], 'shards', ARGV[1], 'previous', ARGV[2], 'state', ARGV[3], 'epoch', ARGV[4])
return 1
