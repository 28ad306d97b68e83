// The etcd keys of a namespace (the layout is in the package comment).

package leader

import (
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
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

// campaignKey is the candidate key concurrency.Election creates for a lease.
func campaignKey(ns string, shard int, lease clientv3.LeaseID) string {
	return ElectionPrefix(ns, shard) + fmt.Sprintf("%x", int64(lease))
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
