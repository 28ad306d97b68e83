-- hold: keep the place of a task that failed and goes to retry in its
-- value's queue (an ordered rule with a key or header scope), so that the
-- value's later tasks wait behind it until it is back (admitkeyed.lua: it
-- leaves the queue when admitted; it is dropped when it is not back grace
-- after its retry is due).
-- KEYS[1] :qs
-- ARGV[1] base, ARGV[2] value, ARGV[3] id, ARGV[4] due ms (its place),
-- ARGV[5] retry due ms (its expected return), ARGV[6] grace ms
-- Returns 1.
local now = now_ms()
local vk, v, id = value_key(ARGV[1], ARGV[2]), ARGV[2], ARGV[3]
local back = math.max(tonumber(ARGV[5]), now)
local grace = tonumber(ARGV[6])
local existed = redis.call('EXISTS', vk .. 'q') == 1
redis.call('ZADD', vk .. 'q', 'NX', ARGV[4], id)
redis.call('HSET', vk .. 'qt', id, int(back))
queue_expire(vk, back + grace - now, existed)
redis.call('ZADD', KEYS[1], 'GT', int(back + grace), v)
expire_at_least(KEYS[1], back + grace - now)
return 1
