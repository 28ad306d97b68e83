package shardmap

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/delayq/delayq/internal/testenv"
)

func TestShardOfGolden(t *testing.T) {
	// pinned: every process of a namespace must agree, across versions
	for id, want := range map[string][2]int{"order-123": {ShardOf("order-123", 16), ShardOf("order-123", 64)}} {
		if ShardOf(id, 16) != want[0] || ShardOf(id, 64) != want[1] {
			t.Fatal("ShardOf not deterministic")
		}
	}
	if ShardOf("a", 16) != 12 {
		t.Fatalf("ShardOf(a, 16) = %d, want 12 (FNV-1a 32)", ShardOf("a", 16))
	}
}

// TestSplitIsAMultiple is the property the protocol rests on: under a
// count k*M, a task of old shard o lands on o + j*M.
func TestSplitIsAMultiple(t *testing.T) {
	for i := range 20000 {
		id := fmt.Sprintf("t-%d", i)
		o, n := ShardOf(id, 16), ShardOf(id, 64)
		if n%16 != o {
			t.Fatalf("%s: old %d, new %d: not a split of its old shard", id, o, n)
		}
	}
}

func TestCheckGrowAndOld(t *testing.T) {
	m := Initial(16)
	for _, c := range []struct {
		n    int
		want error
	}{{32, nil}, {64, nil}, {4096, nil}, {16, ErrInvalidCount}, {8, ErrInvalidCount}, {40, ErrInvalidCount}, {8192, ErrInvalidCount}} {
		if err := m.CheckGrow(c.n); !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("grow 16 -> %d: %v, want %v", c.n, err, c.want)
		}
	}
	g := m.Grown(64)
	if g.Count != 64 || g.Previous != 16 || !g.Migrating() || g.Epoch != 1 || g.Validate() != nil {
		t.Fatalf("grown: %+v", g)
	}
	if err := g.CheckGrow(128); !errors.Is(err, ErrMigrating) {
		t.Fatalf("grow while migrating: %v", err)
	}
	if !g.Newer(m) || m.Newer(g) || !g.Settled().Newer(g) || g.Newer(g.Settled()) {
		t.Fatal("Newer: epochs, then settled after migrating")
	}
	moving := 0
	for i := range 1000 {
		id := fmt.Sprintf("x-%d", i)
		o, ok := g.Old(id)
		if ok != (ShardOf(id, 16) != ShardOf(id, 64)) || (ok && o != ShardOf(id, 16)) {
			t.Fatalf("Old(%s) = %d, %v", id, o, ok)
		}
		if ok {
			moving++
		}
		if _, ok := g.Settled().Old(id); ok {
			t.Fatal("a settled map has no old shard")
		}
	}
	if moving < 650 || moving > 850 {
		t.Fatalf("%d of 1000 ids move from 16 to 64 shards, want about 750", moving)
	}
}

// TestEtcdGrowAndSettle: concurrent growths, exactly one wins; the map
// settles only when every old shard is marked done, exactly once.
func TestEtcdGrowAndSettle(t *testing.T) {
	e := testenv.StartEtcd(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	me := Etcd{Client: cli, Namespace: "ns"}
	ctx := t.Context()
	if _, err := me.Grow(ctx, 8); err == nil {
		t.Fatal("grow of a namespace without a map")
	}
	m, err := me.Ensure(ctx, Initial(4))
	if err != nil || m != Initial(4) {
		t.Fatalf("ensure: %+v %v", m, err)
	}
	if m, err := me.Ensure(ctx, Initial(16)); err != nil || m.Count != 4 {
		t.Fatalf("a second Ensure must return the existing map: %+v %v", m, err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins, conflicts := 0, 0
	for range 8 {
		wg.Go(func() {
			_, err := me.Grow(ctx, 16)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case errors.Is(err, ErrMigrating):
				conflicts++
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if wins != 1 || conflicts != 7 {
		t.Fatalf("%d growths won, %d refused; want 1 and 7", wins, conflicts)
	}
	g, _, _, err := me.Load(ctx)
	if err != nil || g.Count != 16 || g.Previous != 4 || !g.Migrating() {
		t.Fatalf("after grow: %+v %v", g, err)
	}
	settled := 0
	for o := range 4 {
		for range 2 { // marking twice (a mover's retry) is harmless
			s, err := me.MarkDone(ctx, g, o)
			if err != nil {
				t.Fatal(err)
			}
			if s {
				settled++
			}
		}
		if o < 3 {
			if cur, _, _, _ := me.Load(ctx); cur.State != Migrating {
				t.Fatalf("settled after %d of 4 old shards", o+1)
			}
		}
	}
	if settled != 1 {
		t.Fatalf("settled %d times", settled)
	}
	if cur, _, _, _ := me.Load(ctx); cur != g.Settled() {
		t.Fatalf("final map %+v", cur)
	}
}
