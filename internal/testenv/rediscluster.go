package testenv

import (
	"context"
	"fmt"
	"os/exec"
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
}

// StartRedisCluster starts three cluster-enabled redis-server processes,
// each in its own temp dir, joins them with redis-cli --cluster create and
// waits until every node reports cluster_state:ok and knows all three
// nodes. The nodes are killed at cleanup.
//
// Each node runs with the same settings as StartRedis (see redisBaseArgs)
// plus cluster-enabled yes, cluster-config-file nodes.conf,
// cluster-node-timeout 5000 and an explicit free cluster-port (the default
// port+10000 could be taken or exceed 65535).
func StartRedisCluster(tb testing.TB) *RedisCluster {
	tb.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		tb.Fatalf("testenv: redis-cli not found in PATH: apt-get install redis-server (redis-tools) (%v)", err)
	}
	c := &RedisCluster{}
	for range clusterSize {
		r := &Redis{Dir: tb.TempDir()}
		r.start(tb, func(port int) []string {
			return append(redisBaseArgs(port, r.Dir, RedisOptions{}),
				"--cluster-enabled", "yes",
				"--cluster-config-file", "nodes.conf",
				"--cluster-node-timeout", "5000",
				"--cluster-port", strconv.Itoa(FreePort(tb)),
			)
		})
		c.Nodes = append(c.Nodes, r)
		c.Addrs = append(c.Addrs, r.Addr)
	}

	ctx, cancel := context.WithTimeout(tb.Context(), 30*time.Second)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	create := exec.CommandContext(ctx, cli, args...)
	create.WaitDelay = time.Second
	out, err := create.CombinedOutput()
	if err != nil {
		tb.Fatalf("testenv: redis-cli %s: %v\n--- output ---\n%s", strings.Join(args, " "), err, out)
	}

	var last string
	ready := poll(startTimeout, func() bool {
		for _, r := range c.Nodes {
			info, err := clusterInfo(ctx, r.Addr)
			if err != nil {
				last = fmt.Sprintf("%s: %v", r.Addr, err)
				return false
			}
			if !strings.Contains(info, "cluster_state:ok") ||
				!strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(clusterSize)) {
				last = fmt.Sprintf("%s: %s", r.Addr, info)
				return false
			}
		}
		return true
	})
	if !ready {
		tb.Fatalf("testenv: redis cluster %v not ok within %v; last CLUSTER INFO:\n%s", c.Addrs, startTimeout, last)
	}
	return c
}

// clusterInfo returns CLUSTER INFO of one node.
func clusterInfo(ctx context.Context, addr string) (string, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return c.ClusterInfo(ctx).Result()
}

// Client returns a go-redis cluster client for the cluster, closed at
// cleanup.
func (c *RedisCluster) Client(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
	tb.Cleanup(func() { _ = cc.Close() })
	return cc
}
