// The etcd keys of a namespace: the layout is package election's, shared
// with the daemon (GET /v1/cluster reads who leads each shard).

package leader

import (
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/delayq/delayq/internal/election"
)

// campaignKey is the candidate key concurrency.Election creates for a lease.
func campaignKey(ns string, shard int, lease clientv3.LeaseID) string {
	return election.CandidateKey(ns, shard, int64(lease))
}
