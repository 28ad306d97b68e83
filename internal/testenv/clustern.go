package testenv

import (
	"context"
	"slices"
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

// KeySlot is Redis Cluster's hash slot of key (CRC16/XMODEM of the key, or
// of its hash tag: the part between the first '{' and the next '}' when
// not empty), what CLUSTER KEYSLOT answers.
func KeySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % clusterSlots
}

// KeySlotRanges splits the hash slots among masters so that each master
// serves as many of keys as can be (len(keys)/masters, give or take one,
// unless keys share a slot): contiguous ranges in order, like
// ClusterSlotRanges, with their bounds between the keys' slots. Even ranges
// leave a few dozen keys (delayq's shards) unevenly spread: with 128 shards
// over 8 masters, 24–25 on some and 7–8 on others.
func KeySlotRanges(masters int, keys []string) [][2]int {
	if len(keys) < masters {
		return ClusterSlotRanges(masters)
	}
	slots := make([]int, len(keys))
	for i, k := range keys {
		slots[i] = KeySlot(k)
	}
	slices.Sort(slots)
	out := make([][2]int, masters)
	lo := 0
	for i := range masters {
		hi := clusterSlots - 1
		if i < masters-1 {
			// the next master starts at its first key's slot (or right
			// after this one's, if keys share slots across the bound)
			hi = max(slots[(i+1)*len(keys)/masters]-1, lo)
		}
		out[i] = [2]int{lo, hi}
		lo = hi + 1
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
	return StartRedisClusterRanges(tb, ClusterSlotRanges(masters), opts...)
}

// StartRedisClusterRanges is StartRedisClusterN with the slot ranges given:
// master i serves ranges[i], and the ranges must cover the 16384 slots in
// order, without gaps (KeySlotRanges makes such ranges).
func StartRedisClusterRanges(tb testing.TB, ranges [][2]int, opts ...RedisOptions) *RedisCluster {
	tb.Helper()
	masters := len(ranges)
	if masters < 1 {
		tb.Fatalf("testenv: StartRedisClusterRanges: no ranges")
	}
	for i, r := range ranges {
		want := 0
		if i > 0 {
			want = ranges[i-1][1] + 1
		}
		if r[0] != want || r[1] < r[0] || (i == masters-1 && r[1] != clusterSlots-1) {
			tb.Fatalf("testenv: StartRedisClusterRanges: ranges %v do not cover the %d slots in order", ranges, clusterSlots)
		}
	}
	c := startClusterNodes(tb, masters, opts)

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
	for i, rng := range ranges {
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

	if last, ok := c.waitOK(ctx, 3*startTimeout); !ok {
		tb.Fatalf("testenv: redis cluster of %d masters %v not ok within %v; last CLUSTER INFO:\n%s", masters, c.Addrs, 3*startTimeout, last)
	}
	return c
}
