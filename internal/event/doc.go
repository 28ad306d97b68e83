// Package event is the event binary: it leads a fair share of the shards
// (package leader) and, for each led shard, runs a poller (package fire)
// that writes due tasks to Kafka within milliseconds of their due time.
package event
