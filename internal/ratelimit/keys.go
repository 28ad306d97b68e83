package ratelimit

// Redis keys of one task type's limits. All share the hash tag
// {<ns>:rl:<type>}, so each script touches one slot and works unchanged on
// Redis Cluster. The layout of each key is described in common.lua.
//
//	dq:{<ns>:rl:<type>}:w    window quota counter (hash s, n)
//	dq:{<ns>:rl:<type>}:tb   token bucket (hash t, ts)
//	dq:{<ns>:rl:<type>}:run  concurrency slots (zset slot id -> expiry ms)
//
// A type containing '}' still works: every key of the type begins with the
// same "dq:{<ns>:rl:" prefix, so Redis cuts the same hash tag from all of
// them.
func typeKeys(ns, typ string) []string {
	base := "dq:{" + ns + ":rl:" + typ + "}:"
	return []string{base + "w", base + "tb", base + "run"}
}

// Indexes into typeKeys' result.
const (
	keyWindow  = 0
	keyBucket  = 1
	keyRunning = 2
)
