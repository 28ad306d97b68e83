package etcdwatch

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/delayq/delayq/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const prefix = "/t/nums/"

// decodeInt keeps names without a '.' whose value is a decimal integer.
func decodeInt(name string, value []byte) (int, bool) {
	for _, c := range name {
		if c == '.' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(string(value))
	return n, err == nil
}

// run runs m until the test ends and waits for its first list.
func run(t *testing.T, m *Map[int]) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-m.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("not ready after 5s")
	}
}

// put stores value under name and returns the revision it made.
func put(t *testing.T, cli *clientv3.Client, name, value string) int64 {
	t.Helper()
	resp, err := cli.Put(t.Context(), prefix+name, value)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

func is(m *Map[int], want map[string]int) func() bool {
	return func() bool { return maps.Equal(m.Snapshot(), want) }
}

func TestMapFollowsChanges(t *testing.T) {
	e := testenv.StartEtcd(t)
	cli := e.Client(t)
	ctx := t.Context()
	put(t, cli, "a", "1")
	put(t, cli, "bad", "x")                                  // does not decode: left out
	put(t, cli, "b.c", "2")                                  // name does not decode: left out
	if _, err := cli.Put(ctx, "/t/other", "3"); err != nil { // outside the prefix
		t.Fatal(err)
	}
	m := New(cli, prefix, decodeInt, nil, "numbers")
	if m.Snapshot() != nil || m.Synced() || m.Revision() != 0 {
		t.Fatal("view before Run")
	}
	select {
	case <-m.Ready():
		t.Fatal("ready before Run")
	default:
	}
	run(t, m)
	if got := m.Snapshot(); !maps.Equal(got, map[string]int{"a": 1}) {
		t.Fatalf("first list: %v", got)
	}
	if m.Revision() == 0 {
		t.Fatal("no revision after the first list")
	}
	testenv.WaitFor(t, time.Second, "synced", m.Synced)

	first := m.Snapshot()
	put(t, cli, "b", "2")
	testenv.WaitFor(t, time.Second, "put seen", is(m, map[string]int{"a": 1, "b": 2}))
	if !maps.Equal(first, map[string]int{"a": 1}) {
		t.Fatalf("a published snapshot changed: %v", first)
	}
	put(t, cli, "a", "x") // a PUT that does not decode removes the name
	testenv.WaitFor(t, time.Second, "undecodable put seen", is(m, map[string]int{"b": 2}))
	put(t, cli, "c.d", "4")
	put(t, cli, "c", "3")
	testenv.WaitFor(t, time.Second, "second put seen", is(m, map[string]int{"b": 2, "c": 3}))
	if _, err := cli.Delete(ctx, prefix+"b"); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Second, "delete seen", is(m, map[string]int{"c": 3}))

	// etcd goes away and comes back: the view stays, then catches up
	rev := m.Revision()
	e.Stop(t)
	if !maps.Equal(m.Snapshot(), map[string]int{"c": 3}) {
		t.Fatal("readers lost the view while etcd is down")
	}
	e.Restart(t)
	put(t, cli, "d", "4")
	testenv.WaitFor(t, 10*time.Second, "put after an etcd restart seen", is(m, map[string]int{"c": 3, "d": 4}))
	if m.Revision() <= rev {
		t.Fatalf("revision %d did not move past %d", m.Revision(), rev)
	}
	testenv.WaitFor(t, 10*time.Second, "synced again", m.Synced)
}

// A watch from a compacted revision fails; Run then lists again.
func TestMapCompacted(t *testing.T) {
	cli := testenv.StartEtcd(t).Client(t)
	m := New(cli, prefix, decodeInt, nil, "numbers", ChangeLog(0, "numbers"))
	first := put(t, cli, "a", "1")
	put(t, cli, "b", "2")
	last := put(t, cli, "a", "x")
	if _, err := cli.Compact(t.Context(), last); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	err := m.Watch(wctx, first+1)
	if !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("Watch from revision %d, compacted at %d: %v, want ErrCompacted", first+1, last, err)
	}
	run(t, m)
	if got, want := m.Snapshot(), map[string]int{"b": 2}; !maps.Equal(got, want) || m.Revision() < last {
		t.Fatalf("after compaction: %v at revision %d, want %v at %d or later", got, m.Revision(), want, last)
	}
}

// Watch returns nil when its context ends.
func TestWatchContextEnds(t *testing.T) {
	cli := testenv.StartEtcd(t).Client(t)
	m := New(cli, prefix, decodeInt, nil, "numbers")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Watch(ctx, 1) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Watch after cancel: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Watch did not return after cancel")
	}
}
