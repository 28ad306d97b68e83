package testenv

import (
	"strconv"
	"testing"
)

// A cluster of one and of two masters built with ADDSLOTSRANGE and MEET
// serves every slot from the node ClusterSlotRanges names, and a cluster
// client reads back what it wrote across the nodes.
func TestStartRedisClusterN(t *testing.T) {
	t.Parallel()
	for _, masters := range []int{1, 2} {
		t.Run(strconv.Itoa(masters), func(t *testing.T) {
			t.Parallel()
			c := StartRedisClusterN(t, masters)
			if len(c.Nodes) != masters {
				t.Fatalf("%d nodes, want %d", len(c.Nodes), masters)
			}
			ranges := ClusterSlotRanges(masters)
			if ranges[0][0] != 0 || ranges[masters-1][1] != clusterSlots-1 {
				t.Fatalf("ranges %v do not cover 0..%d", ranges, clusterSlots-1)
			}
			for i, rng := range ranges {
				for _, slot := range []int{rng[0], rng[1]} {
					if owner := c.SlotOwner(t, slot); owner != c.Addrs[i] {
						t.Fatalf("slot %d served by %s, want node %d %s", slot, owner, i, c.Addrs[i])
					}
				}
			}
			cc := c.Client(t)
			ctx := t.Context()
			for i := range 20 {
				if err := cc.Set(ctx, "k"+strconv.Itoa(i), i, 0).Err(); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 20 {
				if v, err := cc.Get(ctx, "k"+strconv.Itoa(i)).Int(); err != nil || v != i {
					t.Fatalf("GET k%d: %d %v", i, v, err)
				}
			}
		})
	}
}

// KeySlot answers what CLUSTER KEYSLOT does, and KeySlotRanges gives each
// master an equal share of the keys: a cluster started with them serves
// 16 of 128 shard tags from each of 8 masters (even ranges: 24–25 on some,
// 7–8 on others).
func TestKeySlotRangesBalanceShards(t *testing.T) {
	t.Parallel()
	const masters, shards = 8, 128
	keys := make([]string, shards)
	for i := range keys {
		keys[i] = "{scale:" + strconv.Itoa(i) + "}"
	}
	c := StartRedisClusterRanges(t, KeySlotRanges(masters, keys))
	node := c.Client(t)
	ctx := t.Context()
	for _, k := range append(keys, "plain", "a{b}c", "{}x", "x{}{y}", "{y}") {
		want, err := node.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := KeySlot(k); got != int(want) {
			t.Fatalf("KeySlot(%q) = %d, CLUSTER KEYSLOT %d", k, got, want)
		}
	}
	per := map[string]int{}
	for _, k := range keys {
		per[c.SlotOwner(t, KeySlot(k))]++
	}
	for i, a := range c.Addrs {
		if per[a] != shards/masters {
			t.Fatalf("master %d serves %d of the %d shards, want %d (all: %v)", i, per[a], shards, shards/masters, per)
		}
	}
}
