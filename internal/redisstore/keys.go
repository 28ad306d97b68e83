package redisstore

import (
	"strconv"

	"github.com/delayq/delayq/internal/shardmap"
)

// BucketsPerShard is how many small hashes hold one shard's task records.
// Small hashes stay in Redis' compact listpack encoding (given
// hash-max-listpack-value >= 512), which is what keeps a pending task under
// 300 bytes; see docs/design.md "Memory".
const BucketsPerShard = 1024

// keys names every Redis key and channel of one namespace. All keys of a
// shard share the hash tag {<ns>:<shard>}; namespace-wide keys use {<ns>}.
// Prefixes exist for every shard a namespace can grow to.
type keys struct {
	ns     string
	prefix []string // per shard: "dq:{<ns>:<i>}:"
	meta   string
	wake   string
	limits string
}

func newKeys(ns string) keys {
	k := keys{ns: ns, prefix: make([]string, shardmap.MaxShards)}
	for i := range shardmap.MaxShards {
		k.prefix[i] = "dq:{" + ns + ":" + strconv.Itoa(i) + "}:"
	}
	k.meta = "dq:{" + ns + "}:meta"
	k.wake = "dq:{" + ns + "}:wake"
	k.limits = "dq:{" + ns + "}:limits"
	return k
}

func (k keys) due(shard int) string      { return k.prefix[shard] + "due" }
func (k keys) inflight(shard int) string { return k.prefix[shard] + "inflight" }
func (k keys) done(shard int) string     { return k.prefix[shard] + "done" }
func (k keys) dead(shard int) string     { return k.prefix[shard] + "dead" }
func (k keys) fence(shard int) string    { return k.prefix[shard] + "fence" }
func (k keys) errs(shard int) string     { return k.prefix[shard] + "err" }
func (k keys) leaseSeq(shard int) string { return k.prefix[shard] + "leaseq" }

// replayMarks is the shard's zset of the journal entries daemons replayed
// into it (member the entry's token, score when; a day's worth: see
// Submit.Replay and schedule.lua, mode 'j').
func (k keys) replayMarks(shard int) string { return k.prefix[shard] + "jr" }

// parked is the index of the tasks of type typ parked on the shard (member
// id, score the task's due time); ptypes is the set of types whose index
// is not empty. See park.go.
func (k keys) parked(shard int, typ string) string { return k.prefix[shard] + "parked:" + typ }
func (k keys) ptypes(shard int) string             { return k.prefix[shard] + "ptypes" }

// stamp is the highest shard count a writer of this shard routed by (see
// check_map in common.lua); progress holds a growth's figures of an old
// shard (moved, remaining, epoch).
func (k keys) stamp(shard int) string    { return k.prefix[shard] + "map" }
func (k keys) progress(shard int) string { return k.prefix[shard] + "grow" }

// runs is the shard's hash of execution claims (see claim_holder in
// common.lua); claimField names the claim of generation gen of task id in it.
func (k keys) runs(shard int) string { return k.prefix[shard] + "runs" }

// receipts is the shard's fire receipts: id -> the packed receipt of the
// task's latest fired copy (receipt.go).
func (k keys) receipts(shard int) string { return k.prefix[shard] + "rcpt" }

// delivered is the shard's delivered index: the purge lists of delivered
// tasks (a settled take's lease value, copied to deliveredList) -> the
// retention's expiry (ms). See settle.lua.
func (k keys) delivered(shard int) string { return k.prefix[shard] + "dlx" }

func claimField(id string, gen uint64) string { return id + ":" + strconv.FormatUint(gen, 10) }

// bucket is the hash that holds the record of id. The Lua scripts compute
// the same function (see bucketLua) when they only know the id.
func (k keys) bucket(shard int, id string) string {
	return k.bucketKey(shard, bucketOf(id))
}

// bucketKey names bucket hash b of a shard.
func (k keys) bucketKey(shard, b int) string {
	return k.prefix[shard] + "t:" + strconv.Itoa(b)
}

// ShardOf is the shard of a task id among n (see shardmap.ShardOf).
func ShardOf(id string, n int) int { return shardmap.ShardOf(id, n) }

// bucketOf is a polynomial hash small enough to stay exact in Lua's doubles.
func bucketOf(id string) int {
	var h uint64
	for i := 0; i < len(id); i++ {
		h = (h*31 + uint64(id[i])) % 2147483647
	}
	return int(h % BucketsPerShard)
}
