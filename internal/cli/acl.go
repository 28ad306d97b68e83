package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/delayq/delayq/internal/cli/acl"
	"github.com/delayq/delayq/internal/config"
)

// runACL is dq acl: the least privileges of a namespace in Redis, etcd and
// Kafka, printed as the commands that grant them (internal/acl).
func runACL(_ context.Context, env Env, args []string) error {
	fs := newFlagSet("acl", env)
	withUsage(fs, `Usage: dq acl [--namespace NS] [--user U] [flags]

Prints the least privileges of a namespace: the Redis ACL, the etcd role
and the Kafka ACLs to grant.`)
	ns := fs.String("namespace", envOr(env, "DQ_NAMESPACE", "dq"), "namespace (env DQ_NAMESPACE)")
	user := fs.String("user", "delayq", "user name in Redis and etcd, principal User:<name> in Kafka")
	topics := fs.String("topics", envOr(env, "DQ_TOPICS", "dq.tasks"), "every topic tasks fire to, comma-separated (env DQ_TOPICS)")
	dead := fs.String("dead-topic", envOr(env, "DQ_DEAD_TOPIC", "dq.dead"), "dead-letter topic (env DQ_DEAD_TOPIC)")
	group := fs.String("group", envOr(env, "DQ_GROUP", "delayq-work"), "the work processes' consumer group (env DQ_GROUP)")
	outcomes := fs.String("outcomes-topic", envOr(env, "DQ_OUTCOMES_TOPIC", "dq.outcomes"), "outcome events topic, empty when off (env DQ_OUTCOMES_TOPIC)")
	hooks := fs.Bool("hooks", false, "the work processes call on_success/on_failure hooks: adds reading the outcomes topic in the group <group>.hooks")
	create := fs.Bool("auto-create", false, "the processes create missing topics (DQ_KAFKA_AUTO_CREATE): adds Create on the cluster")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	c := config.Common{Namespace: *ns, RedisAddrs: []string{"x"}, Shards: 1, Retention: 1e9, LogLevel: "info", LogFormat: "json"}
	if err := c.Validate(); err != nil {
		return err
	}
	w := env.Stdout
	fmt.Fprintf(w, "# Redis (as an admin, with your --tls/--user options; PASSWORD is the user's password; ACLs are per node: on Redis Cluster run it on every node, then ACL SAVE or CONFIG REWRITE)\n")
	fmt.Fprintln(w, acl.RedisSetUser(*user, *ns))
	fmt.Fprintf(w, "\n# etcd (etcdctl as root, with auth enabled; a client certificate whose CN is %q logs in as the user without a password)\n", *user)
	for _, l := range acl.EtcdCommands(*user, *ns) {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintf(w, "\n# Kafka (admin.properties: an admin's SASL/TLS client settings)\n")
	for _, l := range acl.KafkaCommands(*user, acl.KafkaACLs(acl.KafkaOptions{
		Topics: config.Split(*topics), DeadTopic: *dead, Group: *group, OutcomesTopic: *outcomes, Hooks: *hooks, AutoCreate: *create})) {
		fmt.Fprintln(w, l)
	}
	_, err := fmt.Fprintf(w, "\n# %s\n", strings.Join([]string{"Redis: the namespace's keys and channels, only the commands delayq sends", "etcd: readwrite on " + acl.EtcdPrefix(*ns), "Kafka: write and read the task topics, write the dead and outcomes topics, read in the group"}, "; "))
	return err
}
