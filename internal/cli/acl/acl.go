// Package acl provides the least privileges a delayq namespace needs in
// Redis, etcd and Kafka: the Redis ACL rules of its user, the etcd key
// prefix of its role, and its Kafka ACLs. `dq acl` prints them as the
// commands an operator runs; the secured tests and `dq dev --tls` apply
// exactly these, so the recipes are tested on every run.
package acl

import (
	"fmt"
	"sort"
	"strings"
)

// RedisCommands are the commands a delayq process sends to Redis, its
// scripts' redis.call()s included (Redis checks those against the user's
// ACL too). The connection: HELLO, AUTH, PING (config.RedisClient turns
// go-redis' CLIENT SETINFO off); Redis Cluster: CLUSTER SLOTS, COMMAND
// (go-redis learns the cluster's routing from them) and ASKING (a slot
// migration's redirect). TestRedisCommandsCoverScripts keeps the list
// complete.
var RedisCommands = []string{
	// connection and cluster routing
	"hello", "auth", "ping", "cluster|slots", "command", "asking",
	// scripts: every transition is one script (EVALSHA, EVAL after NOSCRIPT)
	"evalsha", "eval",
	// durable writes (DQ_REDIS_REPLICA_ACKS): the replicas' confirmation
	// after a script. DQ_REDIS_WAIT_AOF also needs +waitaof, which Redis
	// before 7.2 refuses in an ACL rule: add it by hand there.
	"wait",
	// wake-ups
	"publish", "subscribe", "unsubscribe",
	// keys, hashes and sorted sets, read by the store and the scripts
	"get", "set", "del", "exists", "incr", "pexpire", "pttl", "time",
	"hget", "hset", "hsetnx", "hdel", "hgetall", "hmget", "hexists", "hkeys", "hincrby",
	// the sweep of expired execution claims (claim.lua)
	"hrandfield",
	"zadd", "zrem", "zrange", "zrevrange", "zscore", "zmscore", "zcard", "zcount",
	"zremrangebyrank", "zremrangebyscore", "zrank",
	// task listing (the fired state has no index: the bucket hashes are
	// scanned) and the id search (GET /v1/search: HSCAN, HLEN per bucket)
	"hscan", "hlen",
	// parked types (sets)
	"sadd", "srem", "smembers",
}

// RedisKeyPatterns are the key patterns of a namespace: every key is
// dq:{<ns>:<shard>}:…, dq:{<ns>}:… (the namespace's meta hash and wake-up
// channel) or dq:{<ns>:rl:<type>}:… (rate limits).
func RedisKeyPatterns(ns string) []string {
	e := globEscape(ns)
	return []string{"dq:{" + e + ":*", "dq:{" + e + "}:*"}
}

// RedisChannels are the pub/sub channels of a namespace (the wake-up
// channel dq:{<ns>}:wake).
func RedisChannels(ns string) []string {
	return []string{"dq:{" + globEscape(ns) + "}:*"}
}

// RedisRules are the ACL SETUSER rules of a delayq user for namespace ns,
// after "on >password": its keys, its channels and its commands, nothing
// else.
func RedisRules(ns string) []string {
	rules := []string{"resetkeys", "resetchannels", "-@all"}
	for _, k := range RedisKeyPatterns(ns) {
		rules = append(rules, "~"+k)
	}
	for _, c := range RedisChannels(ns) {
		rules = append(rules, "&"+c)
	}
	for _, c := range RedisCommands {
		rules = append(rules, "+"+c)
	}
	return rules
}

// RedisSetUser is the redis-cli command that creates the user, its
// arguments quoted for a shell (">" and "*" are shell syntax).
func RedisSetUser(user, ns string) string {
	rules := RedisRules(ns)
	for i, r := range rules {
		if strings.ContainsAny(r, "*?[]{}>&~|") {
			rules[i] = "'" + r + "'"
		}
	}
	return fmt.Sprintf("redis-cli ACL SETUSER %s reset on '>PASSWORD' %s", user, strings.Join(rules, " "))
}

// globEscape escapes Redis glob characters (a namespace may hold them).
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// EtcdPrefix is the one key prefix of a namespace in etcd: shard
// elections and members, the shard map, the rate-limit rules. A role
// needs readwrite on it; leases (the event process' session) need no
// permission of their own.
func EtcdPrefix(ns string) string { return "/" + ns + "/" }

// EtcdCommands are the etcdctl commands that create the role and the user.
func EtcdCommands(user, ns string) []string {
	return []string{
		"etcdctl role add " + user,
		fmt.Sprintf("etcdctl role grant-permission %s --prefix=true readwrite %s", user, EtcdPrefix(ns)),
		"etcdctl user add " + user + " --new-user-password=PASSWORD",
		"etcdctl user grant-role " + user + " " + user,
	}
}

// KafkaACL is one Kafka ACL (ALLOW) for the delayq principal.
type KafkaACL struct {
	Resource  string // "topic", "group", "cluster"
	Name      string // topic or group; "kafka-cluster" for the cluster
	Operation string // "Read", "Write", "Describe", "Create"
}

// KafkaOptions say what a deployment's processes use.
type KafkaOptions struct {
	Topics    []string // every topic tasks fire to (the default topic included)
	DeadTopic string   // dq.dead
	Group     string   // the work processes' consumer group
	// OutcomesTopic is DQ_OUTCOMES_TOPIC (dq.outcomes; "" when outcome
	// events are off): every process writes it.
	OutcomesTopic string
	// Hooks: the work processes call on_success/on_failure hooks, reading
	// the outcomes topic in the group "<Group>.hooks".
	Hooks bool
	// AutoCreate is DQ_KAFKA_AUTO_CREATE: the processes create missing
	// topics, which needs Create on the cluster.
	AutoCreate bool
}

// KafkaACLs are the ACLs of the delayq principal: the event processes
// write (and describe) every task topic and the dead topic; the work
// processes read the task topics in their group and write the dead
// topic; every process writes the outcomes topic, which the work processes
// read in the group "<group>.hooks" only with Hooks. Create on the cluster
// only with AutoCreate.
func KafkaACLs(o KafkaOptions) []KafkaACL {
	var out []KafkaACL
	seen := map[KafkaACL]bool{}
	add := func(a KafkaACL) {
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	topics := append([]string(nil), o.Topics...)
	sort.Strings(topics)
	for _, t := range topics {
		add(KafkaACL{"topic", t, "Describe"})
		add(KafkaACL{"topic", t, "Write"})
		add(KafkaACL{"topic", t, "Read"})
	}
	if o.DeadTopic != "" {
		add(KafkaACL{"topic", o.DeadTopic, "Describe"})
		add(KafkaACL{"topic", o.DeadTopic, "Write"})
	}
	if o.OutcomesTopic != "" {
		add(KafkaACL{"topic", o.OutcomesTopic, "Describe"})
		add(KafkaACL{"topic", o.OutcomesTopic, "Write"})
		if o.Hooks {
			add(KafkaACL{"topic", o.OutcomesTopic, "Read"})
		}
	}
	if o.Group != "" {
		add(KafkaACL{"group", o.Group, "Describe"})
		add(KafkaACL{"group", o.Group, "Read"})
		if o.Hooks && o.OutcomesTopic != "" {
			add(KafkaACL{"group", o.Group + ".hooks", "Describe"})
			add(KafkaACL{"group", o.Group + ".hooks", "Read"})
		}
	}
	if o.AutoCreate {
		add(KafkaACL{"cluster", "kafka-cluster", "Create"})
	}
	return out
}

// KafkaCommands are the kafka-acls.sh commands for the ACLs of principal
// User:<user>.
func KafkaCommands(user string, acls []KafkaACL) []string {
	out := make([]string, 0, len(acls))
	for _, a := range acls {
		res := "--" + a.Resource + " " + a.Name
		if a.Resource == "cluster" {
			res = "--cluster"
		}
		out = append(out, fmt.Sprintf("kafka-acls.sh --bootstrap-server BROKER --command-config admin.properties --add --allow-principal User:%s --operation %s %s",
			user, a.Operation, res))
	}
	return out
}

// RedisACLFileUser is the line of a Redis ACL file (the aclfile
// directive) that makes the user with password and rules ("nopass" for an
// empty password).
func RedisACLFileUser(user, password string, rules []string) string {
	pass := "nopass"
	if password != "" {
		pass = ">" + password
	}
	return strings.Join(append([]string{"user", user, "on", pass}, rules...), " ") + "\n"
}

// RedisACLFile is the ACL file of a delayq deployment: the default user
// off and the user with the namespace's rules; with health also a user
// "health" that may only PING, with any password (for redis-cli
// healthchecks, which cannot read a password file).
func RedisACLFile(user, password, ns string, health bool) string {
	s := "user default off\n" + RedisACLFileUser(user, password, RedisRules(ns))
	if health {
		s += RedisACLFileUser("health", "", []string{"resetkeys", "resetchannels", "-@all", "+ping"})
	}
	return s
}
