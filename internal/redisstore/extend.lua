-- extend: a worker sets the TTL of its execution claim (run marker) again,
-- only if it still holds it (a marker that expired and was taken by another
-- run is not touched).
-- KEYS[1] run marker (dq:{<ns>:<shard>}:run:<id>:<gen>)
-- ARGV[1] the owner value the marker was claimed with, ARGV[2] TTL ms
-- Returns 1 when the TTL was set, 0 when the marker is not ours (or gone).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
