-- stamp: raise a shard's map stamp to ARGV[1] (never lowering it; see
-- check_map in common.lua), refused with a stale-map error when the shard
-- holds a higher one (StampShards).
-- KEYS[1] the shard's stamp
-- ARGV[1] the stamp of the map the caller routes by
-- Returns 1.
check_map(KEYS[1], ARGV[1])
return 1