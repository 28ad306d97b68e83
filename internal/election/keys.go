package election

import (
	"strconv"
	"strings"
)

// MembersPrefix is the etcd prefix of the live members of a namespace.
func MembersPrefix(ns string) string { return "/" + ns + "/members/" }

// ShardsPrefix is the etcd prefix of every shard election of a namespace.
func ShardsPrefix(ns string) string { return "/" + ns + "/shards/" }

// ElectionPrefix is the key prefix of shard i's election, with the
// trailing slash.
func ElectionPrefix(ns string, shard int) string {
	return ShardsPrefix(ns) + strconv.Itoa(shard) + "/"
}

// CandidateKey is the candidate key concurrency.Election creates in shard
// i's election for a session lease (the lease id in hex).
func CandidateKey(ns string, shard int, lease int64) string {
	return ElectionPrefix(ns, shard) + strconv.FormatInt(lease, 16)
}

// ParseElectionKey returns the shard of an election key.
func ParseElectionKey(ns, key string) (int, bool) {
	rest, ok := strings.CutPrefix(key, ShardsPrefix(ns))
	if !ok {
		return 0, false
	}
	num, _, ok := strings.Cut(rest, "/")
	if !ok {
		return 0, false
	}
	s, err := strconv.Atoi(num)
	return s, err == nil && s >= 0
}
