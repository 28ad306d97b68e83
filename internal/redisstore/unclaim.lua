-- unclaim: a worker gives up execution claims (run markers) of one shard,
-- each only if it still holds it.
-- KEYS[i] run marker i (dq:{<ns>:<shard>}:run:<id>:<gen>)
-- ARGV[i] the owner value marker i was claimed with
-- Returns the number of markers deleted.
local n = 0
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[i] then
    redis.call('DEL', KEYS[i])
    n = n + 1
  end
end
return n
