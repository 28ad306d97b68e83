// Package election is the etcd key layout of the shard elections of a
// namespace: the one contract between the event processes that campaign
// (internal/event/leader) and the daemon that reads who leads each shard
// (GET /v1/cluster).
//
// Layout (ns = namespace):
//
//	/<ns>/members/<process id>     value: process id, bound to the session lease
//	/<ns>/shards/<i>/<lease hex>   election candidates of shard i; the lowest
//	                               create revision leads; value: process id
//
// The trailing slash of the election prefix keeps shard 1's prefix from
// being a prefix of shard 10's (etcd#6278).
package election
