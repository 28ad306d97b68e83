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
//	go test -count=1 ./integration/chaos -run 'TestChaos$'                   # 2 minutes, random seed
//	DQ_CHAOS_SEED=42 DQ_CHAOS_DURATION=20m go test -count=1 -timeout 50m ./integration/chaos -run 'TestChaos$'
//	DQ_CHAOS_REDIS=cluster go test -count=1 ./integration/chaos -run 'TestChaos$'  # on a Redis Cluster with replicas
//	go test -count=1 ./integration/chaos -run 'TestChaosFailover$'           # 1 minute of primary failovers (cluster)
//	DQ_CHAOS_LOG_DIR=/tmp/chaos ...                                          # keep every process' whole output
//	DQ_CHAOS_LOG_DIR=/tmp/chaos DQ_CHAOS_LOG_LEVEL=debug ...                 # ... at debug level (one task's path)
//
// In cluster mode (DQ_CHAOS_REDIS=cluster, and TestChaosFailover) Redis is
// a Redis Cluster of 3 masters with one replica each (AOF always), the
// binaries run with DQ_REDIS_REPLICA_ACKS=1 (DQ_CHAOS_REPLICA_ACKS=0 shows
// what a failover loses without it), and the nemesis adds the primary
// failover: a master's replication link cut, the master SIGKILLed, its
// lagging replica promoted, the old master restarted as the new one's
// replica.
//
// No hang may eat go test's timeout: every step of the nemesis, the heal,
// the restore and the teardown that can block runs under a time limit and
// fails the test naming the step, with every goroutine's stack; a watchdog
// per test (the faults' duration plus 5 minutes, and 30s before go test's
// -timeout at the latest) prints what the test was doing, the seed and the
// stacks, then ends the test binary (guard_test.go).
//
// TestChaosCatchesPlantedBugs builds the event binary with -tags dqplant and
// shows that each checker fails on the bug it exists for (see
// internal/fault). docs/reliability.md describes every fault, every
// checker, the limits of the local setup and the recorded runs.
//
// Everything lives in the test files; this file only documents the package.
package chaos
