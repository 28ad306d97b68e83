-- listafter reads the next entries of a sorted set after a position
-- (score, member), in the set's order (score, then member bytewise), also
-- when that member has left the set or changed its score since: ties at
-- the position's score are searched by rank (binary search), so a walk
-- resumes exactly where it stopped, with bounded work. Read only.
-- KEYS[1] the sorted set
-- ARGV[1] the position's score ('-inf': the start), ARGV[2] its member
-- ('' : before every member of that score), ARGV[3] count
-- Returns up to count members after the position: {member, score, ...}.
local function greater(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x > y end
  end
  return #a > #b
end
local key, sc, id, count = KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3])
local r = nil
if id ~= '' then
  local cur = redis.call('ZSCORE', key, id)
  if cur and tonumber(cur) == tonumber(sc) then r = redis.call('ZRANK', key, id) + 1 end
end
if not r then
  local lo = redis.call('ZCOUNT', key, '-inf', '(' .. sc)
  local hi = redis.call('ZCOUNT', key, '-inf', sc)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if greater(redis.call('ZRANGE', key, mid, mid)[1], id) then hi = mid else lo = mid + 1 end
  end
  r = lo
end
return redis.call('ZRANGE', key, r, r + count - 1, 'WITHSCORES')
