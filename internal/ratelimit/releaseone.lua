-- releaseone: free slots of a keyed rule with a limit of 1 (Done,
-- release.go): a value leaves :k1 only while its expiry is the one its
-- holder set last (admitkeyed.lua, refresh.lua), so a holder whose slot
-- expired and was taken by another task frees nothing of the other's.
-- KEYS[1] :k1
-- ARGV the n values, then their holders' expiries (ms) in the same order
-- Returns how many were freed.
local n = #ARGV / 2
local sc = redis.call('ZMSCORE', KEYS[1], unpack(ARGV, 1, n))
local gone = {}
for k = 1, n do
  if sc[k] and tonumber(sc[k]) == tonumber(ARGV[n + k]) then gone[#gone + 1] = ARGV[k] end
end
if #gone > 0 then
  redis.call('ZREM', KEYS[1], unpack(gone))
  -- no holder left: the set goes (its pad alone, common.lua)
  if redis.call('ZCARD', KEYS[1]) == 1 and redis.call('ZSCORE', KEYS[1], skiplist_pad) then redis.call('DEL', KEYS[1]) end
end
return #gone
