// Package testenv starts real infrastructure — redis-server, a Redis Cluster,
// embedded etcd and a kfake Kafka broker — on free loopback ports for tests.
//
// Every helper takes a [testing.TB], calls Helper, registers its teardown
// with Cleanup (child processes are killed even when the test failed) and
// fails the test with a clear message when a dependency is missing; nothing
// is ever skipped silently. Readiness is polled with a bounded loop, never
// waited for with time.Sleep.
//
//   - [StartRedis]: one redis-server child process (optionally with AOF or a
//     password) that can be stopped, killed and restarted on the same port and
//     data directory.
//   - [StartRedisCluster]: a 3-master Redis Cluster built with
//     redis-cli --cluster create.
//   - [StartEtcd] and [StartEtcdCluster]: in-process etcd servers
//     (go.etcd.io/etcd/server/v3/embed) that can be stopped and restarted to
//     simulate outages and quorum loss.
//   - [StartKafka]: an in-process Kafka-protocol broker
//     (github.com/twmb/franz-go/pkg/kfake); see kafka.go for what
//     segmentio/kafka-go can and cannot do against it.
//
// Each can run in its secured mode (issue #18): [NewPKI] makes a throwaway CA
// with server and client certificates; [RedisOptions] TLS and Users (ACL
// users, default user off), [EtcdOptions] (client TLS with client
// certificates, auth with root and per-prefix users) and [KafkaOptions]
// (TLS, SASL PLAIN and SCRAM users, ACLs) use it. The helpers' own clients
// (Client, CreateTopic, the readiness checks) log in as an admin user.
//
// redis-server and redis-cli must be in PATH (apt-get install redis-server).
package testenv
