package testenv

import (
	"strconv"
	"testing"
)

// A fourth master joins, one slot moves to it key batch by key batch, and
// a cluster client created before the join finds every key there.
func TestRedisClusterAddMasterAndMigrate(t *testing.T) {
	t.Parallel()
	c := StartRedisCluster(t)
	cc := c.Client(t)
	ctx := t.Context()
	const n = 25
	for i := range n {
		if err := cc.Set(ctx, "{mig}:"+strconv.Itoa(i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	m := c.AddMaster(t)
	if len(c.Nodes) != 4 || c.Addrs[3] != m.Addr {
		t.Fatalf("nodes %v: the new master %s is not the fourth", c.Addrs, m.Addr)
	}
	slot := c.SlotOf(t, "{mig}")
	st, err := c.MigrateSlots(ctx, m, []int{slot}, MigrateOptions{Batch: 10})
	if err != nil {
		t.Fatal(err)
	}
	if st.Slots != 1 || st.Keys != n || st.Batches != 3 {
		t.Fatalf("moved %+v, want 1 slot, %d keys in 3 batches", st, n)
	}
	// moving a slot the target already serves is a no-op
	if st, err := c.MigrateSlots(ctx, m, []int{slot}, MigrateOptions{}); err != nil || st.Slots != 0 {
		t.Fatalf("second move: %+v %v, want nothing moved", st, err)
	}
	if got := m.Client(t).DBSize(ctx).Val(); got != n {
		t.Fatalf("the new master holds %d keys, want %d", got, n)
	}
	for _, node := range c.Nodes {
		owner, err := slotOwner(ctx, node.Client(t), slot)
		if err != nil || owner != m.Addr {
			t.Fatalf("%s says slot %d is served by %q (%v), want %s", node.Addr, slot, owner, err, m.Addr)
		}
	}
	for i := range n {
		if v, err := cc.Get(ctx, "{mig}:"+strconv.Itoa(i)).Int(); err != nil || v != i {
			t.Fatalf("GET {mig}:%d through the cluster client: %d %v", i, v, err)
		}
	}
}
