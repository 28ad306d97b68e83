-- unclaim: a worker gives up execution claims of one shard, each only if
-- it still holds it.
-- KEYS[1] the shard's claims hash (see claim_holder in common.lua)
-- ARGV[2i-1] the field of claim i ("<id>:<gen>"), ARGV[2i] the owner it
-- was claimed with
-- Returns the number of claims deleted.
local fields, owners = {}, {}
for i = 1, #ARGV / 2 do
  fields[i], owners[i] = ARGV[2 * i - 1], ARGV[2 * i]
end
return release_claims(KEYS[1], fields, owners)
