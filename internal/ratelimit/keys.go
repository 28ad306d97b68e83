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

// Keys of a rule with a key or header scope (Rule.Scope). They share the
// type's hash tag, so that one admit script decides every value of a
// batch's type group in one call, on Redis Cluster too. The state of each
// value is a field or member of a few keys of the type — one command reads
// a batch's values, one writes them, so a task costs about what it costs
// under the type scope (a few commands per value, on keys of their own,
// cost 6 µs of Redis CPU a task more; BenchmarkAdmitKeyed):
//
//	dq:{<ns>:rl:<type>}:keys  the values with window or bucket state (zset value -> last
//	                          activity ms), pruned past an idle horizon together with
//	                          their fields below
//	dq:{<ns>:rl:<type>}:kw    window quota counters (hash value -> "<window start> <count>")
//	dq:{<ns>:rl:<type>}:kb    token buckets (hash value -> "<tokens> <ms>")
//	dq:{<ns>:rl:<type>}:ks    every slot of the type (zset "<slot prefix><i>:<value>" ->
//	                          expiry ms), where Done and Refresh find them, as in the
//	                          type's :run, and how many each value holds ("#<value>" ->
//	                          minus that count; a value holding none has no member)
//	dq:{<ns>:rl:<type>}:k1    with a limit of 1, the values holding their slot instead
//	                          (zset value -> expiry ms, the holder's claim)
//	dq:{<ns>:rl:<type>}:qs    the values with waiting tasks (zset value -> when its queue
//	                          expires): one ZMSCORE tells a batch which values to look at
//
// and, only while a value has tasks waiting in order, keys of its own, its
// value length-prefixed (its length in bytes, decimal) so that no value can
// end where another one's suffix begins:
//
//	dq:{<ns>:rl:<type>}:k:<len>:<value>:q   its waiting tasks in order (zset id -> first due ms)
//	dq:{<ns>:rl:<type>}:k:<len>:<value>:qt  their expected return (hash id -> ms)
//
// The type scope's keys (typeKeys) are ":w", ":tb" and ":run" after the
// tag; none is one of these, so the two layouts never meet, even when a
// rule changes scope live.
func keyedBase(ns, typ string) string { return "dq:{" + ns + ":rl:" + typ + "}:" }

// keyedKeys are the declared keys of the keyed scripts (common.lua).
func keyedKeys(base string) []string {
	return []string{base + "keys", base + "qs", base + "kw", base + "kb", base + sfxSlots, base + sfxOne}
}

// Suffixes of a keyed rule's slot sets: its slots with a limit above 1,
// with a limit of 1.
const (
	sfxSlots = "ks"
	sfxOne   = "k1"
)
