package testenv

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// keysOf returns n keys whose slots master serves in c.
func keysOf(tb testing.TB, c *RedisCluster, master *Redis, prefix string, n int) []string {
	tb.Helper()
	var out []string
	for i := 0; len(out) < n; i++ {
		if i > 100000 {
			tb.Fatalf("no key of %s's slots found", master.Addr)
		}
		k := prefix + strconv.Itoa(i)
		for _, r := range c.SlotRanges(master) {
			if s := KeySlot(k); s >= r[0] && s <= r[1] {
				out = append(out, k)
				break
			}
		}
	}
	return out
}

// A master's replica cut off with CutReplication is promoted after
// KillMaster without the writes its master acknowledged after the cut,
// and with those it had before.
func TestRedisClusterReplicasCutKillPromote(t *testing.T) {
	t.Parallel()
	c := StartRedisClusterReplicas(t, 3, RedisOptions{AOF: true, AppendFsync: "everysec"})
	ctx := t.Context()
	masters := c.Masters()
	if len(masters) != 3 || len(c.Nodes) != 6 {
		t.Fatalf("masters %d nodes %d, want 3 and 6", len(masters), len(c.Nodes))
	}
	for _, m := range masters {
		rep := c.ReplicaOf(m)
		if rep == nil || rep == m {
			t.Fatalf("master %s: replica %v", m.Addr, rep)
		}
		for k, want := range map[string]string{
			"appendfsync": "everysec", "cluster-node-timeout": "2000", "cluster-replica-validity-factor": "0",
		} {
			if got := rep.Client(t).ConfigGet(ctx, k).Val()[k]; got != want {
				t.Errorf("%s: CONFIG GET %s = %q, want %q", rep.Addr, k, got, want)
			}
		}
	}

	m := masters[0]
	rep := c.ReplicaOf(m)
	mc := m.Client(t)
	before := keysOf(t, c, m, "before:", 20)
	after := keysOf(t, c, m, "after:", 20)
	for _, k := range before {
		if err := mc.Set(ctx, k, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := mc.Wait(ctx, 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 before the cut: %d %v", n, err)
	}
	c.CutReplication(t, m)
	for _, k := range after {
		if err := mc.Set(ctx, k, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := mc.Wait(ctx, 1, 200*time.Millisecond).Result(); err != nil || n != 0 {
		t.Fatalf("WAIT 1 after the cut: %d replicas acknowledged (%v), want 0", n, err)
	}

	c.KillMaster(t, m)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	nw, took, err := c.WaitPromoted(wctx, m)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("replica %s promoted %v after the kill of %s", nw.Addr, took.Round(time.Millisecond), m.Addr)
	if nw != rep {
		t.Fatalf("promoted %s, want the replica %s", nw.Addr, rep.Addr)
	}
	if got := c.Masters()[0]; got != nw {
		t.Fatalf("Masters()[0] = %s after the promotion, want %s", got.Addr, nw.Addr)
	}
	nc := nw.Client(t)
	for _, k := range before {
		if err := nc.Get(ctx, k).Err(); err != nil {
			t.Fatalf("GET %s (written before the cut) on the new master: %v", k, err)
		}
	}
	for _, k := range after {
		if err := nc.Get(ctx, k).Err(); !errors.Is(err, redis.Nil) {
			t.Fatalf("GET %s (written after the cut) on the new master: %v, want redis.Nil: the cut did not lose it", k, err)
		}
	}
	if err := c.Client(t).Set(ctx, before[0], "w", 0).Err(); err != nil {
		t.Fatalf("SET through a cluster client after the failover: %v", err)
	}
}
