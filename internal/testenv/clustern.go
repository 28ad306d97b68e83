package testenv

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// ClusterSlotRanges is how StartRedisClusterN splits the hash slots among
// masters nodes: node i serves the contiguous range [lo, hi] at index i,
// every range of the same size give or take one slot.
func ClusterSlotRanges(masters int) [][2]int {
	out := make([][2]int, masters)
	for i := range masters {
		out[i] = [2]int{i * clusterSlots / masters, (i+1)*clusterSlots/masters - 1}
	}
	return out
}

// StartRedisClusterN starts a Redis Cluster of masters cluster-enabled
// redis-server processes (no replicas), the same nodes as
// StartRedisCluster's, and builds it the way `redis-cli --cluster create`
// does, without redis-cli: every node gets its own config epoch (CLUSTER
// SET-CONFIG-EPOCH i+1), announces 127.0.0.1 (CONFIG SET
// cluster-announce-ip) and gets its range of ClusterSlotRanges(masters)
// (CLUSTER ADDSLOTSRANGE), every other node meets the first (CLUSTER MEET
// with its explicit bus port), and it waits until every node reports
// cluster_state:ok and knows all the others. One master is a valid cluster
// serving all 16384 slots. The nodes are killed at cleanup; the RedisCluster
// works like StartRedisCluster's (Client, AddMaster, MigrateSlots, ...).
func StartRedisClusterN(tb testing.TB, masters int, opts ...RedisOptions) *RedisCluster {
	tb.Helper()
	if masters < 1 || masters > clusterSlots {
		tb.Fatalf("testenv: StartRedisClusterN: %d masters (want 1..%d)", masters, clusterSlots)
	}
	c := &RedisCluster{adminPassword: randomSecret()}
	if len(opts) > 0 {
		c.opts = opts[0]
	}
	for range masters {
		r := c.startNode(tb)
		c.Nodes = append(c.Nodes, r)
		c.Addrs = append(c.Addrs, r.Addr)
	}

	ctx, cancel := context.WithTimeout(tb.Context(), 30*time.Second)
	defer cancel()
	clients := make([]*redis.Client, masters)
	for i, r := range c.Nodes {
		clients[i] = redis.NewClient(r.adminOptions())
	}
	defer func() {
		for _, cl := range clients {
			_ = cl.Close()
		}
	}()
	for i, rng := range ClusterSlotRanges(masters) {
		cl := clients[i]
		// a node learns its own address from the first MEET it gets; a
		// lone master (or the first one, before any MEET) would announce
		// an empty host in CLUSTER SLOTS and NODES
		if err := cl.ConfigSet(ctx, "cluster-announce-ip", "127.0.0.1").Err(); err != nil {
			tb.Fatalf("testenv: CONFIG SET cluster-announce-ip on %s: %v", c.Addrs[i], err)
		}
		if err := cl.Do(ctx, "cluster", "set-config-epoch", i+1).Err(); err != nil {
			tb.Fatalf("testenv: CLUSTER SET-CONFIG-EPOCH %d on %s: %v", i+1, c.Addrs[i], err)
		}
		if err := cl.Do(ctx, "cluster", "addslotsrange", rng[0], rng[1]).Err(); err != nil {
			tb.Fatalf("testenv: CLUSTER ADDSLOTSRANGE %d %d on %s: %v", rng[0], rng[1], c.Addrs[i], err)
		}
	}
	if masters > 1 {
		_, _, bus, err := busAddr(ctx, c.Nodes[0])
		if err != nil {
			tb.Fatalf("testenv: %v", err)
		}
		host, port, err := splitAddr(c.Addrs[0])
		if err != nil {
			tb.Fatalf("testenv: %v", err)
		}
		for i := 1; i < masters; i++ {
			if err := clients[i].Do(ctx, "cluster", "meet", host, port, bus).Err(); err != nil {
				tb.Fatalf("testenv: CLUSTER MEET %s (bus port %s) from %s: %v", c.Addrs[0], bus, c.Addrs[i], err)
			}
		}
	}

	want := "cluster_known_nodes:" + strconv.Itoa(masters)
	var last string
	ready := poll(3*startTimeout, func() bool {
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
	if !ready {
		tb.Fatalf("testenv: redis cluster of %d masters %v not ok within %v; last CLUSTER INFO:\n%s", masters, c.Addrs, 3*startTimeout, last)
	}
	return c
}
