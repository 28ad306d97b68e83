package event

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/delayq/delayq/internal/election"
)

// churn watches the shard elections from outside and counts how often a
// shard's leader changes.
type churn struct {
	mu      sync.Mutex
	keys    map[int]map[string]kv
	leader  map[int]string
	changes int
	rev     int64 // etcd revision the watch has reached
	ec      *clientv3.Client
}

type kv struct {
	rev int64
	id  string
}

func (w *world) watchChurn() *churn {
	t := w.t
	c := &churn{keys: map[int]map[string]kv{}, leader: map[int]string{}, ec: w.ec}
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := w.ec.Get(ctx, election.ShardsPrefix(w.ns), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range resp.Kvs {
		c.apply(w.ns, true, string(x.Key), x.CreateRevision, string(x.Value))
	}
	wch := w.ec.Watch(ctx, election.ShardsPrefix(w.ns), clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for wr := range wch {
			for _, ev := range wr.Events {
				c.apply(w.ns, ev.Type == mvccpb.PUT, string(ev.Kv.Key), ev.Kv.CreateRevision, string(ev.Kv.Value))
			}
			c.mu.Lock()
			c.rev = max(c.rev, wr.Header.Revision) // progress notifications included
			c.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return c
}

func (c *churn) apply(ns string, put bool, key string, rev int64, id string) {
	s, ok := election.ParseElectionKey(ns, key)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.keys[s] == nil {
		c.keys[s] = map[string]kv{}
	}
	if put {
		c.keys[s][key] = kv{rev, id}
	} else {
		delete(c.keys[s], key)
	}
	var best kv
	for _, k := range c.keys[s] {
		if best.rev == 0 || k.rev < best.rev {
			best = k
		}
	}
	if best.id != c.leader[s] {
		if best.id != "" {
			c.changes++ // a new leader (a shard without one is no change yet)
		}
		c.leader[s] = best.id
	}
}

// sync waits until the watch has seen every change etcd holds now. The
// processes learn their leadership from watches of their own, so when
// they report a balance the test's watch may still be behind: counting
// then would put the last changes of one step into the next (a step
// "under the minimum", then "flapping" after it settled).
func (c *churn) sync(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.ec.Get(ctx, "sync-probe") // any read: its header is the current revision
	if err != nil {
		t.Fatal(err)
	}
	for {
		c.mu.Lock()
		at := c.rev
		c.mu.Unlock()
		if at >= resp.Header.Revision {
			return
		}
		// a progress notification brings the watch to etcd's revision
		// even when nothing under its prefix changed
		if err := c.ec.RequestProgress(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("election watch at revision %d, etcd at %d after 10 s", at, resp.Header.Revision)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (c *churn) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changes
}

// TestBalanceThreeTwoThree: 3 processes share 16 shards 6/5/5; stop one,
// the two others share them 8/8; start a new one, back within one; the
// number of leadership changes stays close to the minimum.
func TestBalanceThreeTwoThree(t *testing.T) {
	t.Parallel() // runs alongside the other parallel scenarios, after the sequential ones
	w := newWorld(t, 16)
	ch := w.watchChurn()
	a := w.startApp("bal-a")
	b := w.startApp("bal-b")
	c := w.startApp("bal-c")
	got := w.waitBalanced(15*time.Second, a, b, c)
	ch.sync(t)
	start := ch.count()
	say(t, "3 processes: %v (%d leadership changes to get there, 16 is the minimum)", got, start)

	t0 := time.Now()
	c.stop(t)
	got = w.waitBalanced(15*time.Second, a, b)
	ch.sync(t)
	moved := ch.count() - start
	say(t, "c stopped: %v after %v, %d leadership changes (minimum %d)", got, time.Since(t0).Round(time.Millisecond), moved, 5)
	if moved > 7 {
		t.Errorf("%d leadership changes for 5 shards to move", moved)
	}

	before := ch.count()
	t0 = time.Now()
	d := w.startApp("bal-d")
	got = w.waitBalanced(15*time.Second, a, b, d)
	ch.sync(t)
	moved = ch.count() - before
	say(t, "d started: %v after %v, %d leadership changes (minimum 5)", got, time.Since(t0).Round(time.Millisecond), moved)
	if moved > 7 {
		t.Errorf("%d leadership changes for a newcomer that needs 5", moved)
	}
	// Settled: no flapping afterwards.
	settled := ch.count()
	window := time.NewTimer(2 * time.Second) // observation window
	<-window.C
	if extra := ch.count() - settled; extra != 0 {
		t.Errorf("%d leadership changes after balancing (flapping)", extra)
	}
	say(t, "leader_changes_total per process: a=%v b=%v d=%v",
		metric(t, a.Addr(), "delayq_leader_changes_total"), metric(t, b.Addr(), "delayq_leader_changes_total"),
		metric(t, d.Addr(), "delayq_leader_changes_total"))
}
