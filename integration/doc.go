// Package integration is delayq's end-to-end scenario suite: the real
// daemon, event and work binaries against real Redis, etcd and a
// Kafka-protocol broker, driven only through the pinned HTTP API, the
// webhook contract and the Kafka record contract.
//
// The scenarios are written once against a Provisioner (start the
// infrastructure and N instances of each binary; kill, stop, restart one;
// take Redis away; cut one off the network) and run by two tiers:
//
//   - TestLocal: local processes. redis-server children, embedded etcd and
//     kfake from internal/testenv in the test process, and the binaries
//     built from this tree (go build in TestMain), started as processes.
//   - TestContainers: testcontainers-go. The images are built from this
//     tree first (deploy/build-images.sh: delayq, delayq-dev, delayq-redis);
//     nothing is pulled, the Ryuk reaper is disabled (its image cannot be
//     pulled either) and every container and network is removed in cleanup.
//     The services, commands and environment come from
//     deploy/compose/compose.yaml with compose.local.yaml, so the tier runs
//     the compose stack's own definitions. Without a Docker engine the tier
//     is skipped with the named reason "container tier: no Docker engine",
//     unless DQ_REQUIRE_DOCKER is set (CI), when it fails.
//
// Scenarios without a fault count a duplicate Kafka record as a defect,
// with one exception they check rather than assume: an event process whose
// etcd session ran out (2 s TTL here; a loaded CI box once missed its
// keep-alives without any process being killed) hands its shards to the
// next leader, which fires its unsettled takes again. Such copies come
// from one shard under another dq-token and are logged, not failed
// (checkDuplicates); any other duplicate still fails the scenario.
//
// The test files hold everything; this file only documents the package.
package integration
