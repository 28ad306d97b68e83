package testenv

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterSize is the number of masters in a RedisCluster.
const clusterSize = 3

// RedisCluster is a 3-master Redis Cluster (no replicas) of redis-server
// processes, created with `redis-cli --cluster create ... --cluster-yes`.
type RedisCluster struct {
	// Addrs are the nodes' "127.0.0.1:port" addresses.
	Addrs []string
	// Nodes are the servers, in Addrs order; Kill/Restart one to test a
	// node failure (there are no replicas, so its slots are down meanwhile).
	Nodes []*Redis

	opts          RedisOptions // every node's, AddMaster's too
	adminPassword string       // of RedisAdminUser on every node, with opts.Users
	nodeTimeout   time.Duration
	ha            *clusterHA // masters and replicas; nil without replicas
}

// StartRedisCluster starts three cluster-enabled redis-server processes,
// each in its own temp dir, joins them with redis-cli --cluster create and
// waits until every node reports cluster_state:ok and knows all three
// nodes. The nodes are killed at cleanup.
//
// Each node runs with the same settings as StartRedis (see redisBaseArgs)
// plus cluster-enabled yes, cluster-config-file nodes.conf,
// cluster-node-timeout 5000 (or RedisOptions.ClusterNodeTimeout) and an
// explicit free cluster-port (the default port+10000 could be taken or
// exceed 65535).
//
// At most one RedisOptions is used; it applies to every node. With TLS the
// nodes listen on TLS only (Addrs are the TLS ports) and talk TLS on the
// cluster bus too (tls-cluster, tls-replication), all with the PKI's server
// certificate. With Users every node has the same ACL users, the default
// user off, and testenv sets the cluster up as RedisAdminUser.
func StartRedisCluster(tb testing.TB, opts ...RedisOptions) *RedisCluster {
	tb.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		tb.Fatalf("testenv: redis-cli not found in PATH: apt-get install redis-server (redis-tools) (%v)", err)
	}
	c := startClusterNodes(tb, clusterSize, opts)

	ctx, cancel := context.WithTimeout(tb.Context(), 30*time.Second)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	args = append(args, c.Nodes[0].cliArgs()...)
	create := exec.CommandContext(ctx, cli, args...)
	create.WaitDelay = time.Second
	out, err := create.CombinedOutput()
	if err != nil {
		tb.Fatalf("testenv: redis-cli %s: %v\n--- output ---\n%s", strings.Join(args, " "), err, out)
	}

	if last, ok := c.waitOK(ctx, startTimeout); !ok {
		tb.Fatalf("testenv: redis cluster %v not ok within %v; last CLUSTER INFO:\n%s", c.Addrs, startTimeout, last)
	}
	return c
}

// defaultNodeTimeout is the cluster-node-timeout of a cluster without
// replicas: no failover to speed up, and no node flagged failing while a
// loaded test box stalls it.
const defaultNodeTimeout = 5 * time.Second

// startClusterNodes starts n cluster-enabled nodes, not yet a cluster
// (no slots, no MEET), with the first of opts.
func startClusterNodes(tb testing.TB, n int, opts []RedisOptions) *RedisCluster {
	tb.Helper()
	return startClusterNodesHA(tb, n, opts, defaultNodeTimeout, nil)
}

// startClusterNodesHA is startClusterNodes with nodeTimeout the
// cluster-node-timeout unless opts set one, and ha the replicas' state of
// StartRedisClusterReplicas (nil otherwise).
func startClusterNodesHA(tb testing.TB, n int, opts []RedisOptions, nodeTimeout time.Duration, ha *clusterHA) *RedisCluster {
	tb.Helper()
	c := &RedisCluster{adminPassword: randomSecret(), nodeTimeout: nodeTimeout, ha: ha}
	if len(opts) > 0 {
		c.opts = opts[0]
	}
	if c.opts.ClusterNodeTimeout > 0 {
		c.nodeTimeout = c.opts.ClusterNodeTimeout
	}
	for range n {
		r := c.startNode(tb)
		c.Nodes = append(c.Nodes, r)
		c.Addrs = append(c.Addrs, r.Addr)
	}
	return c
}

// waitOK waits up to timeout until every node reports cluster_state:ok and
// knows all of c's nodes; last is the CLUSTER INFO (or error) of the node
// that was not ready yet.
func (c *RedisCluster) waitOK(ctx context.Context, timeout time.Duration) (last string, ok bool) {
	want := "cluster_known_nodes:" + strconv.Itoa(len(c.Nodes))
	ok = poll(timeout, func() bool {
		for _, r := range c.Nodes {
			info, err := clusterInfo(ctx, r)
			if err != nil {
				last = fmt.Sprintf("%s: %v", r.Addr, err)
				return false
			}
			if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, want) {
				last = fmt.Sprintf("%s: %s", r.Addr, info)
				return false
			}
		}
		return true
	})
	return last, ok
}

// cliArgs are redis-cli's options to log in to r as testenv does: --tls
// with the PKI's files, --user and --pass (or -a).
func (r *Redis) cliArgs() []string {
	var args []string
	if t := r.opts.TLS; t != nil {
		args = append(args, "--tls", "--cacert", t.Client.CA, "--cert", t.Client.Cert, "--key", t.Client.Key)
	}
	if r.adminUser != "" {
		args = append(args, "--user", r.adminUser)
	}
	if r.adminPassword != "" {
		args = append(args, "--pass", r.adminPassword, "--no-auth-warning")
	}
	return args
}

// clusterInfo returns CLUSTER INFO of one node.
func clusterInfo(ctx context.Context, r *Redis) (string, error) {
	c := redis.NewClient(r.adminOptions())
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return c.ClusterInfo(ctx).Result()
}

// Client returns a go-redis cluster client for the cluster, closed at
// cleanup. With RedisOptions.Users it logs in as Users[0], with
// RedisOptions.TLS it connects over TLS with the PKI's client certificate.
func (c *RedisCluster) Client(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	// a copy: go-redis appends the nodes it discovers to the slice it was
	// given, and AddMaster appends to c.Addrs
	o := &redis.ClusterOptions{Addrs: slices.Clone(c.Addrs), Password: c.opts.Password}
	if len(c.opts.Users) > 0 {
		o.Username, o.Password = c.opts.Users[0].Name, c.opts.Users[0].Password
	}
	if c.opts.TLS != nil {
		o.TLSConfig = c.opts.TLS.ClientTLS(tb)
	}
	cc := redis.NewClusterClient(o)
	tb.Cleanup(func() { _ = cc.Close() })
	return cc
}

// startNode starts one cluster-enabled redis-server with the settings of
// StartRedisCluster's nodes; it knows no other node yet.
func (c *RedisCluster) startNode(tb testing.TB) *Redis {
	tb.Helper()
	r := &Redis{Dir: redisDir(tb, c.opts), opts: c.opts}
	r.secure(tb, c.adminPassword)
	r.start(tb, func(port int) []string {
		args := append(redisBaseArgs(port, r.Dir, c.opts),
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.FormatInt(c.nodeTimeout.Milliseconds(), 10),
			"--cluster-port", strconv.Itoa(FreePort(tb)),
		)
		if c.ha != nil {
			args = append(args, c.ha.nodeArgs(r)...)
		}
		if c.opts.TLS != nil {
			args = append(args, "--tls-cluster", "yes", "--tls-replication", "yes")
		}
		return args
	})
	return r
}

// AddMaster starts one more cluster-enabled redis-server with the same
// settings as the cluster's nodes, introduces it with CLUSTER MEET (what
// `redis-cli --cluster add-node` does) and waits until every node knows
// every other one and reports cluster_state:ok. The new master holds no
// slots until MigrateSlots moves some to it. It is appended to c.Nodes and
// c.Addrs (so no other goroutine may read those meanwhile; clients from
// Client keep their own copy) and killed at cleanup. It takes the cluster's
// RedisOptions (TLS, Users) and logs in as RedisAdminUser.
func (c *RedisCluster) AddMaster(tb testing.TB) *Redis {
	tb.Helper()
	r := c.startNode(tb)
	ctx, cancel := context.WithTimeout(tb.Context(), 30*time.Second)
	defer cancel()
	host, port, bus, err := busAddr(ctx, c.Nodes[0])
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	nc := redis.NewClient(r.adminOptions())
	defer nc.Close()
	// the bus port is not port+10000 (see StartRedisCluster): name it
	if err := nc.Do(ctx, "cluster", "meet", host, port, bus).Err(); err != nil {
		tb.Fatalf("testenv: CLUSTER MEET %s (bus port %s) from %s: %v", c.Addrs[0], bus, r.Addr, err)
	}
	c.Nodes = append(c.Nodes, r)
	c.Addrs = append(slices.Clip(c.Addrs), r.Addr) // never into an array a client may share

	if last, ok := c.waitOK(ctx, startTimeout); !ok {
		tb.Fatalf("testenv: new master %s not known to the cluster %v within %v; last CLUSTER INFO:\n%s",
			r.Addr, c.Addrs, startTimeout, last)
	}
	return r
}

// MigrateOptions pace MigrateSlots.
type MigrateOptions struct {
	// Batch is how many keys one MIGRATE moves; default 10, the batch of
	// `redis-cli --cluster reshard` (its --cluster-pipeline).
	Batch int
	// Pause is the wait after each batch (default none). It makes a
	// migration slow enough that clients meet the half-moved slot: the
	// window in which multi-key commands get TRYAGAIN and ASK.
	Pause time.Duration
	// Timeout is MIGRATE's own timeout; default 5s.
	Timeout time.Duration
}

// MigrateStats is what MigrateSlots did.
type MigrateStats struct {
	Slots   int           // slots moved (slots already on the target are skipped)
	Keys    int           // keys moved
	Batches int           // MIGRATE calls
	Longest time.Duration // the longest time one slot spent migrating
}

// MigrateSlots moves each slot, one after the other, to the master to (a
// node of c, e.g. from AddMaster) with the protocol `redis-cli --cluster
// reshard` follows:
//
//  1. CLUSTER SETSLOT <slot> IMPORTING <source id> on the target, then
//     CLUSTER SETSLOT <slot> MIGRATING <target id> on the source;
//  2. CLUSTER GETKEYSINSLOT on the source and MIGRATE ... KEYS of that batch
//     to the target, o.Pause after each batch, until the source holds no
//     key of the slot;
//  3. CLUSTER SETSLOT <slot> NODE <target id> on the target, the source and
//     then every other master.
//
// Meanwhile the slot is split between two nodes: a command whose keys are
// all on the source is served there, one whose keys are all gone gets ASK,
// a multi-key one with keys on both sides gets TRYAGAIN. It reports errors
// instead of failing the test so that it can run in a goroutine beside the
// clients it disturbs; ctx stops it between two batches (the slot is then
// left migrating). On a cluster with TLS and Users it logs in as
// RedisAdminUser, and MIGRATE does too (AUTH2) over the nodes' TLS.
func (c *RedisCluster) MigrateSlots(ctx context.Context, to *Redis, slots []int, o MigrateOptions) (MigrateStats, error) {
	if o.Batch <= 0 {
		o.Batch = 10
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	var st MigrateStats
	clients := make(map[string]*redis.Client, len(c.Nodes))
	ids := make(map[string]string, len(c.Nodes))
	defer func() {
		for _, cl := range clients {
			_ = cl.Close()
		}
	}()
	for _, n := range c.Nodes {
		cl := redis.NewClient(n.adminOptions())
		clients[n.Addr] = cl
		id, err := cl.ClusterMyID(ctx).Result()
		if err != nil {
			return st, fmt.Errorf("CLUSTER MYID of %s: %w", n.Addr, err)
		}
		ids[n.Addr] = id
	}
	dst := clients[to.Addr]
	if dst == nil {
		return st, fmt.Errorf("migrate to %s: not a node of the cluster %v", to.Addr, c.Addrs)
	}
	host, port, err := splitAddr(to.Addr)
	if err != nil {
		return st, err
	}
	setslot := func(addr string, slot int, args ...any) error {
		a := append([]any{"cluster", "setslot", slot}, args...)
		if err := clients[addr].Do(ctx, a...).Err(); err != nil {
			return fmt.Errorf("%s on %s: %w", fmt.Sprint(a...), addr, err)
		}
		return nil
	}
	for _, slot := range slots {
		from, err := slotOwner(ctx, dst, slot)
		if err != nil {
			return st, err
		}
		if from == to.Addr {
			continue
		}
		if clients[from] == nil {
			return st, fmt.Errorf("slot %d is served by %s, not a node of %v", slot, from, c.Addrs)
		}
		began := time.Now()
		if err := setslot(to.Addr, slot, "importing", ids[from]); err != nil {
			return st, err
		}
		if err := setslot(from, slot, "migrating", ids[to.Addr]); err != nil {
			return st, err
		}
		src := clients[from]
		for {
			keys, err := src.ClusterGetKeysInSlot(ctx, slot, o.Batch).Result()
			if err != nil {
				return st, fmt.Errorf("CLUSTER GETKEYSINSLOT %d on %s: %w", slot, from, err)
			}
			if len(keys) == 0 {
				break
			}
			args := []any{"migrate", host, port, "", 0, o.Timeout.Milliseconds()}
			switch {
			case to.adminUser != "":
				args = append(args, "auth2", to.adminUser, to.adminPassword)
			case to.adminPassword != "":
				args = append(args, "auth", to.adminPassword)
			}
			args = append(args, "keys")
			for _, k := range keys {
				args = append(args, k)
			}
			if err := src.Do(ctx, args...).Err(); err != nil {
				return st, fmt.Errorf("MIGRATE %d keys of slot %d from %s to %s: %w", len(keys), slot, from, to.Addr, err)
			}
			st.Keys += len(keys)
			st.Batches++
			if o.Pause > 0 {
				select {
				case <-ctx.Done():
					return st, ctx.Err()
				case <-time.After(o.Pause):
				}
			}
		}
		// the target first: once the source lets go, clients that follow
		// its MOVED must find the target owning the slot
		for _, addr := range append([]string{to.Addr, from}, c.otherAddrs(to.Addr, from)...) {
			if err := setslot(addr, slot, "node", ids[to.Addr]); err != nil {
				return st, err
			}
		}
		st.Slots++
		st.Longest = max(st.Longest, time.Since(began))
	}
	return st, nil
}

// otherAddrs are the nodes' addresses except a and b.
func (c *RedisCluster) otherAddrs(a, b string) []string {
	var out []string
	for _, addr := range c.Addrs {
		if addr != a && addr != b {
			out = append(out, addr)
		}
	}
	return out
}

// slotOwner is the address of the master that serves slot, as the node
// behind cl sees the cluster.
func slotOwner(ctx context.Context, cl *redis.Client, slot int) (string, error) {
	ranges, err := cl.ClusterSlots(ctx).Result() //nolint:staticcheck // SA1019: CLUSTER SLOTS names each range's master address directly; CLUSTER SHARDS would need node ids mapped back
	if err != nil {
		return "", fmt.Errorf("CLUSTER SLOTS on %s: %w", cl.Options().Addr, err)
	}
	for _, r := range ranges {
		if slot >= r.Start && slot <= r.End && len(r.Nodes) > 0 {
			return r.Nodes[0].Addr, nil
		}
	}
	return "", fmt.Errorf("slot %d is not served by any node (CLUSTER SLOTS on %s)", slot, cl.Options().Addr)
}

// SlotOwner is the address of the master that serves slot, as the first
// node sees the cluster (CLUSTER SLOTS).
func (c *RedisCluster) SlotOwner(tb testing.TB, slot int) string {
	tb.Helper()
	cl := redis.NewClient(c.Nodes[0].adminOptions())
	defer cl.Close()
	addr, err := slotOwner(tb.Context(), cl, slot)
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	return addr
}

// SlotOf is the hash slot of key (CLUSTER KEYSLOT).
func (c *RedisCluster) SlotOf(tb testing.TB, key string) int {
	tb.Helper()
	cl := redis.NewClient(c.Nodes[0].adminOptions())
	defer cl.Close()
	n, err := cl.ClusterKeySlot(tb.Context(), key).Result()
	if err != nil {
		tb.Fatalf("testenv: CLUSTER KEYSLOT %q: %v", key, err)
	}
	return int(n)
}

// busAddr returns the host, port and cluster bus port of the node at addr,
// from the "myself" line of its CLUSTER NODES ("<id> ip:port@cport ...").
func busAddr(ctx context.Context, r *Redis) (host, port, bus string, err error) {
	addr := r.Addr
	cl := redis.NewClient(r.adminOptions())
	defer cl.Close()
	nodes, err := cl.ClusterNodes(ctx).Result()
	if err != nil {
		return "", "", "", fmt.Errorf("CLUSTER NODES on %s: %w", addr, err)
	}
	for line := range strings.Lines(nodes) {
		f := strings.Fields(line)
		if len(f) < 3 || !strings.Contains(f[2], "myself") {
			continue
		}
		hp, cport, ok := strings.Cut(f[1], "@")
		if !ok {
			break
		}
		cport, _, _ = strings.Cut(cport, ",") // "cport,hostname" since Redis 7
		host, port, err := splitAddr(hp)
		return host, port, cport, err
	}
	return "", "", "", fmt.Errorf("CLUSTER NODES on %s: no myself line with a bus port:\n%s", addr, nodes)
}

// splitAddr splits "host:port".
func splitAddr(addr string) (string, string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", "", fmt.Errorf("address %q: %w", addr, err)
	}
	return host, port, nil
}
