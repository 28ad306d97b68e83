package testenv

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// replicasNodeTimeout is the cluster-node-timeout of a cluster with
// replicas: a dead master is flagged failing after it, and its replica
// promoted about a second later.
const replicasNodeTimeout = 2 * time.Second

// clusterHA is what StartRedisClusterReplicas knows of its masters and
// replicas: as created, then as WaitPromoted saw the cluster change.
type clusterHA struct {
	mu      sync.Mutex
	masters []*Redis             // in slot order
	replica map[*Redis]*Redis    // master -> its replica; absent once it has none
	slots   map[*Redis][][2]int  // master -> the slot ranges it serves
	killed  map[*Redis]time.Time // master -> when KillMaster killed it
}

// nodeArgs are the settings a node of a cluster with replicas adds to
// StartRedisCluster's:
//
//   - cluster-replica-validity-factor 0: a replica whose link to its master
//     is down (CutReplication) may still be elected; with the default 10 it
//     may not once the link has been down for 10 node timeouts.
//   - masteruser/masterauth: the replica logs in to its master as testenv
//     does (the admin user with Users, requirepass with Password).
//   - repl-diskless-sync-delay 0: a replica's first sync starts at once, not
//     after 5 s of waiting for more replicas.
func (h *clusterHA) nodeArgs(r *Redis) []string {
	args := []string{"--cluster-replica-validity-factor", "0", "--repl-diskless-sync-delay", "0"}
	return append(args, replicationAuthArgs(r)...)
}

// replicationAuthArgs make r, as a replica, log in to its master as
// testenv logs in to r (every node of a cluster or a SentinelSet shares
// those credentials).
func replicationAuthArgs(r *Redis) []string {
	var args []string
	if r.adminUser != "" {
		args = append(args, "--masteruser", r.adminUser)
	}
	if r.adminPassword != "" {
		args = append(args, "--masterauth", r.adminPassword)
	}
	return args
}

// StartRedisClusterReplicas starts a Redis Cluster of masters masters
// (at least 3: a failover needs the votes of a majority of the masters),
// each with one replica, created with `redis-cli --cluster create ...
// --cluster-replicas 1`, and waits until every node reports
// cluster_state:ok and every replica's link to its master is up
// (master_link_status:up). The nodes are StartRedisCluster's with
// cluster-node-timeout 2000 (RedisOptions.ClusterNodeTimeout overrides
// it) and the settings of clusterHA.nodeArgs; RedisOptions.AOF and
// AppendFsync choose the persistence ("everysec" is delayq's lighter
// production setting). Nodes and Addrs list every node, masters and
// replicas; Masters and ReplicaOf tell them apart. The nodes are killed at
// cleanup.
func StartRedisClusterReplicas(tb testing.TB, masters int, opts ...RedisOptions) *RedisCluster {
	tb.Helper()
	if masters < 3 {
		tb.Fatalf("testenv: StartRedisClusterReplicas: %d masters, want at least 3 (a failover needs a majority of masters to vote)", masters)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		tb.Fatalf("testenv: redis-cli not found in PATH: apt-get install redis-server (redis-tools) (%v)", err)
	}
	ha := &clusterHA{replica: map[*Redis]*Redis{}, slots: map[*Redis][][2]int{}, killed: map[*Redis]time.Time{}}
	c := startClusterNodesHA(tb, 2*masters, opts, replicasNodeTimeout, ha)

	ctx, cancel := context.WithTimeout(tb.Context(), 60*time.Second)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	args = append(args, c.Nodes[0].cliArgs()...)
	create := exec.CommandContext(ctx, cli, args...)
	create.WaitDelay = time.Second
	if out, err := create.CombinedOutput(); err != nil {
		tb.Fatalf("testenv: redis-cli %s: %v\n--- output ---\n%s", strings.Join(args, " "), err, out)
	}
	if last, ok := c.waitOK(ctx, 3*startTimeout); !ok {
		tb.Fatalf("testenv: redis cluster %v not ok within %v; last CLUSTER INFO:\n%s", c.Addrs, 3*startTimeout, last)
	}
	var last string
	if !poll(3*startTimeout, func() bool {
		var ok bool
		last, ok = c.learnReplicas(ctx, masters)
		return ok
	}) {
		tb.Fatalf("testenv: redis cluster %v: %d masters with one connected replica each not seen within %v; last: %s",
			c.Addrs, masters, 3*startTimeout, last)
	}
	return c
}

// learnReplicas reads every node's own view of itself (the myself line
// of CLUSTER NODES, INFO replication) and, when there are want masters
// each with one replica whose link is up, records them in c.ha. Otherwise
// it says what is missing.
func (c *RedisCluster) learnReplicas(ctx context.Context, want int) (string, bool) {
	byID := map[string]*Redis{}
	selves := map[*Redis]nodeLine{}
	for _, r := range c.Nodes {
		self, err := myself(ctx, r)
		if err != nil {
			return err.Error(), false
		}
		byID[self.id] = r
		selves[r] = self
	}
	replica := map[*Redis]*Redis{}
	slots := map[*Redis][][2]int{}
	var masters []*Redis
	for _, r := range c.Nodes {
		self := selves[r]
		switch {
		case self.master && len(self.slots) > 0:
			masters = append(masters, r)
			slots[r] = self.slots
		case !self.master && byID[self.masterID] != nil:
			m := byID[self.masterID]
			if replica[m] != nil {
				return fmt.Sprintf("master %s has two replicas, %s and %s", m.Addr, replica[m].Addr, r.Addr), false
			}
			info, err := replicationInfo(ctx, r)
			if err != nil {
				return err.Error(), false
			}
			if info["master_link_status"] != "up" {
				return fmt.Sprintf("replica %s of %s: master_link_status:%s", r.Addr, m.Addr, info["master_link_status"]), false
			}
			replica[m] = r
		default:
			return fmt.Sprintf("%s is neither a master with slots nor a replica of a known node: %+v", r.Addr, self), false
		}
	}
	if len(masters) != want || len(replica) != want {
		return fmt.Sprintf("%d masters, %d with a replica; want %d each", len(masters), len(replica), want), false
	}
	slices.SortFunc(masters, func(a, b *Redis) int { return slots[a][0][0] - slots[b][0][0] })
	c.ha.mu.Lock()
	defer c.ha.mu.Unlock()
	c.ha.masters, c.ha.replica, c.ha.slots = masters, replica, slots
	return "", true
}

// Masters are the cluster's masters in slot order. With replicas
// (StartRedisClusterReplicas) they are as testenv last saw them: as
// created, with the replica WaitPromoted returned in place of the master
// it replaced. Without replicas they are Nodes.
func (c *RedisCluster) Masters() []*Redis {
	if c.ha == nil {
		return slices.Clone(c.Nodes)
	}
	c.ha.mu.Lock()
	defer c.ha.mu.Unlock()
	return slices.Clone(c.ha.masters)
}

// ReplicaOf is master's replica, nil when it has none (a cluster without
// replicas, a master promoted by WaitPromoted: its old master is dead).
func (c *RedisCluster) ReplicaOf(master *Redis) *Redis {
	if c.ha == nil {
		return nil
	}
	c.ha.mu.Lock()
	defer c.ha.mu.Unlock()
	return c.ha.replica[master]
}

// SlotRanges are the slot ranges master serves, as testenv last saw them
// (see Masters); nil for a cluster without replicas.
func (c *RedisCluster) SlotRanges(master *Redis) [][2]int {
	if c.ha == nil {
		return nil
	}
	c.ha.mu.Lock()
	defer c.ha.mu.Unlock()
	return slices.Clone(c.ha.slots[master])
}

// CutReplication makes master's replica fall behind: once it returns, the
// writes master acknowledges are not on the replica, which stays up, in
// the cluster and electable. After KillMaster(master) the replica is
// promoted without them: the loss of RELIABILITY.md 8a, made certain.
//
// How (Redis 7.0): CONFIG SET masterauth on the replica to a password
// that master refuses, then CLIENT KILL TYPE replica on master, then it
// waits until the replica reports master_link_status:down and master no
// connected replica. The replica notices the closed link at once and
// reconnects every second, but its AUTH fails before PSYNC, so master
// never streams to it again. What master had written to the socket
// before the kill still arrives; what it acknowledges afterwards never
// does.
//
// Why not SIGKILL alone or SIGSTOP: on loopback, a master killed with
// SIGKILL leaves its last writes in the kernel's socket buffers, which
// the replica still reads, so nothing is lost; and a replica held with
// SIGSTOP cannot answer the cluster bus, so it cannot be elected until
// continued, and continued while its master lives it resyncs everything.
// Nodes run with cluster-replica-validity-factor 0, so a replica whose
// link has been down for long can still win the election.
func (c *RedisCluster) CutReplication(tb testing.TB, master *Redis) {
	tb.Helper()
	rep := c.ReplicaOf(master)
	if rep == nil {
		tb.Fatalf("testenv: CutReplication: %s has no replica", master.Addr)
	}
	ctx, cancel := context.WithTimeout(tb.Context(), startTimeout)
	defer cancel()
	rc := redis.NewClient(rep.adminOptions())
	defer rc.Close()
	mc := redis.NewClient(master.adminOptions())
	defer mc.Close()
	if err := rc.ConfigSet(ctx, "masterauth", "cut-"+randomSecret()).Err(); err != nil {
		tb.Fatalf("testenv: CutReplication: CONFIG SET masterauth on replica %s: %v", rep.Addr, err)
	}
	if err := mc.Do(ctx, "client", "kill", "type", "replica").Err(); err != nil {
		tb.Fatalf("testenv: CutReplication: CLIENT KILL TYPE replica on %s: %v", master.Addr, err)
	}
	var last string
	if !poll(startTimeout, func() bool {
		ri, err := replicationInfo(ctx, rep)
		if err != nil {
			last = err.Error()
			return false
		}
		mi, err := replicationInfo(ctx, master)
		if err != nil {
			last = err.Error()
			return false
		}
		last = fmt.Sprintf("replica master_link_status:%s, master connected_slaves:%s", ri["master_link_status"], mi["connected_slaves"])
		return ri["master_link_status"] == "down" && mi["connected_slaves"] == "0"
	}) {
		tb.Fatalf("testenv: CutReplication of %s from %s: not cut within %v: %s", rep.Addr, master.Addr, startTimeout, last)
	}
}

// KillMaster kills master with SIGKILL (a crash) and notes the instant,
// from which WaitPromoted measures the failover.
func (c *RedisCluster) KillMaster(tb testing.TB, master *Redis) {
	tb.Helper()
	if c.ha != nil {
		c.ha.mu.Lock()
		c.ha.killed[master] = time.Now()
		c.ha.mu.Unlock()
	}
	master.Kill(tb)
}

// WaitPromoted waits until every running node but oldMaster reports
// cluster_state:ok and one same other master for each of oldMaster's slot
// ranges, and returns that master and the time since KillMaster (or since
// the call, without KillMaster). It records the promotion (see Masters).
// ctx bounds the wait; the error says what the nodes reported last.
func (c *RedisCluster) WaitPromoted(ctx context.Context, oldMaster *Redis) (*Redis, time.Duration, error) {
	began := time.Now()
	if c.ha == nil {
		return nil, 0, fmt.Errorf("WaitPromoted: the cluster %v has no replicas", c.Addrs)
	}
	c.ha.mu.Lock()
	ranges := slices.Clone(c.ha.slots[oldMaster])
	if t, ok := c.ha.killed[oldMaster]; ok {
		began = t
	}
	c.ha.mu.Unlock()
	if len(ranges) == 0 {
		return nil, 0, fmt.Errorf("WaitPromoted: %s serves no slots as far as testenv knows", oldMaster.Addr)
	}
	clients := map[*Redis]*redis.Client{}
	defer func() {
		for _, cl := range clients {
			_ = cl.Close()
		}
	}()
	for _, r := range c.Nodes {
		if r != oldMaster && r.running() {
			clients[r] = redis.NewClient(r.adminOptions())
		}
	}
	var last string
	check := func() string {
		owner := ""
		for r, cl := range clients {
			info, err := cl.ClusterInfo(ctx).Result()
			if err != nil {
				last = fmt.Sprintf("%s: CLUSTER INFO: %v", r.Addr, err)
				return ""
			}
			if !strings.Contains(info, "cluster_state:ok") {
				last = fmt.Sprintf("%s: not cluster_state:ok", r.Addr)
				return ""
			}
			for _, rng := range ranges {
				for _, slot := range rng {
					addr, err := slotOwner(ctx, cl, slot)
					if err != nil {
						last = err.Error()
						return ""
					}
					if addr == oldMaster.Addr || (owner != "" && addr != owner) {
						last = fmt.Sprintf("%s: slot %d served by %s", r.Addr, slot, addr)
						return ""
					}
					owner = addr
				}
			}
		}
		return owner
	}
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		if addr := check(); addr != "" {
			took := time.Since(began)
			i := slices.IndexFunc(c.Nodes, func(r *Redis) bool { return r.Addr == addr })
			if i < 0 {
				return nil, took, fmt.Errorf("WaitPromoted: slots of %s served by %s, not a node of %v", oldMaster.Addr, addr, c.Addrs)
			}
			nw := c.Nodes[i]
			c.ha.mu.Lock()
			if j := slices.Index(c.ha.masters, oldMaster); j >= 0 {
				c.ha.masters[j] = nw
			}
			c.ha.slots[nw] = ranges
			delete(c.ha.slots, oldMaster)
			delete(c.ha.replica, oldMaster)
			delete(c.ha.replica, nw)
			c.ha.mu.Unlock()
			return nw, took, nil
		}
		select {
		case <-ctx.Done():
			return nil, time.Since(began), fmt.Errorf("WaitPromoted: no new master for the slots %v of %s after %v: %w; last: %s",
				ranges, oldMaster.Addr, time.Since(began).Round(time.Millisecond), ctx.Err(), last)
		case <-tick.C:
		}
	}
}

// nodeLine is one line of CLUSTER NODES.
type nodeLine struct {
	id       string
	master   bool
	masterID string   // of a replica
	slots    [][2]int // of a master
}

// myself is r's own line of CLUSTER NODES.
func myself(ctx context.Context, r *Redis) (nodeLine, error) {
	cl := redis.NewClient(r.adminOptions())
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	nodes, err := cl.ClusterNodes(ctx).Result()
	if err != nil {
		return nodeLine{}, fmt.Errorf("CLUSTER NODES on %s: %w", r.Addr, err)
	}
	for line := range strings.Lines(nodes) {
		f := strings.Fields(line)
		if len(f) < 8 || !slices.Contains(strings.Split(f[2], ","), "myself") {
			continue
		}
		n := nodeLine{id: f[0], master: slices.Contains(strings.Split(f[2], ","), "master")}
		if f[3] != "-" {
			n.masterID = f[3]
		}
		slots, err := ParseSlotRanges(f[8:])
		if err != nil {
			return nodeLine{}, fmt.Errorf("CLUSTER NODES on %s: %w", r.Addr, err)
		}
		n.slots = slots
		return n, nil
	}
	return nodeLine{}, fmt.Errorf("CLUSTER NODES on %s: no myself line:\n%s", r.Addr, nodes)
}

// replicationInfo is r's INFO replication as fields.
func replicationInfo(ctx context.Context, r *Redis) (map[string]string, error) {
	cl := redis.NewClient(r.adminOptions())
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	info, err := cl.Info(ctx, "replication").Result()
	if err != nil {
		return nil, fmt.Errorf("INFO replication on %s: %w", r.Addr, err)
	}
	out := map[string]string{}
	for line := range strings.Lines(info) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			out[k] = v
		}
	}
	return out, nil
}

// running reports whether r's process runs (started, not killed or
// stopped).
func (r *Redis) running() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cmd != nil && !r.cmd.exited()
}

// ParseSlotRanges reads the slot fields of a CLUSTER NODES line (from the
// ninth field: "0-5460", "5461", and "[...]" for a slot migrating or
// importing, which is skipped) as inclusive ranges.
func ParseSlotRanges(fields []string) ([][2]int, error) {
	var out [][2]int
	for _, s := range fields {
		if strings.HasPrefix(s, "[") {
			continue
		}
		lo, hi, _ := strings.Cut(s, "-")
		a, err1 := strconv.Atoi(lo)
		b, err2 := a, error(nil)
		if hi != "" {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("slots %q", s)
		}
		out = append(out, [2]int{a, b})
	}
	return out, nil
}
