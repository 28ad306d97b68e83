// Package chaos is delayq's seeded, Jepsen-style fault suite: it runs the
// real daemon, event and work binaries against redis-server (AOF on), a
// 3-member embedded etcd cluster and kfake, drives an open-loop workload of
// uniquely identified tasks through the daemons' HTTP API while a seeded
// nemesis kills, pauses, partitions and skews the processes and their
// dependencies, then checks the recorded history against every record in
// Kafka and every webhook delivery.
//
// The checkers: lost (an accepted, non-cancelled task never fired or never
// handled), early (a record fired before the due time in force, by its
// dq-fired-at header, by the time the test's own consumer saw it, or by the
// time the webhook received it), fired after a successful cancel,
// unexpected (fired although the schedule was refused), stale-leader
// writes (a record of a shard whose dq-token is lower than one that shard
// had already fired with at an earlier dq-fired-at), and duplicates
// (counted, not a failure).
//
//	go test -count=1 ./integration/chaos -run TestChaos                      # 2 minutes, random seed
//	DQ_CHAOS_SEED=42 DQ_CHAOS_DURATION=20m go test -count=1 -timeout 40m ./integration/chaos -run 'TestChaos$'
//
// TestChaosCatchesPlantedBugs builds the event binary with -tags dqplant and
// shows that each checker fails on the bug it exists for (see
// internal/fault). docs/reliability.md describes every fault, every
// checker, the limits of the local setup and the recorded runs.
//
// Everything lives in the test files; this file only documents the package.
package chaos
