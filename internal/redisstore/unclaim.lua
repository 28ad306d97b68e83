-- unclaim: a worker gives up execution claims, each only if it still holds
-- it, of one or more shards of one Redis node (a call of several shards
-- only where one redis-server holds every shard, see packCalls).
-- KEYS, per section: the shard's claims hash (see claim_holder in
-- common.lua)
-- ARGV, per section: n, then n pairs: the field of a claim ("<id>:<gen>"),
-- the owner it was claimed with
-- Returns the number of claims deleted.
local deleted = 0
local k, a = 1, 1
while a <= #ARGV do
  local n = tonumber(ARGV[a])
  local fields, owners = {}, {}
  for i = 1, n do
    fields[i], owners[i] = ARGV[a + 2 * i - 1], ARGV[a + 2 * i]
  end
  deleted = deleted + release_claims(KEYS[k], fields, owners)
  k, a = k + 1, a + 1 + 2 * n
end
return deleted
