// Package redisstore keeps delayq's tasks in Redis: N shards of sorted sets
// keyed by due time, moved between states by one Lua script per transition,
// with "now" taken from Redis TIME so that every process shares one clock.
//
// Every key of a shard shares one hash tag, so each script touches a single
// slot and the store works unchanged on Redis Cluster. keys.go names every
// key; each *.lua file is one atomic transition and sits next to the Go
// method that runs it.
package redisstore
