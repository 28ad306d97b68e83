package pause

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/delayq/delayq/internal/testenv"
)

// runWatcher runs w until the test ends and waits for its first list.
func runWatcher(t *testing.T, w *Watcher) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watcher.Run: %v", err)
		}
	})
	select {
	case <-w.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("pause watcher not ready after 5s")
	}
}

func newWatcher(t *testing.T, cli *clientv3.Client, ns string) *Watcher {
	t.Helper()
	w, err := NewWatcher(cli, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestWatcherFollowsPauseAndResume(t *testing.T) {
	e := testenv.StartEtcd(t)
	ctx := t.Context()
	ns := testNS(t)
	cli := e.Client(t)
	if _, err := Pause(ctx, cli, ns, "before"); err != nil {
		t.Fatal(err)
	}
	w := newWatcher(t, e.Client(t), ns)
	if w.Paused("before") || w.Synced() || len(w.Types()) != 0 {
		t.Fatal("paused types known before the watcher ran")
	}
	runWatcher(t, w)
	if !w.Paused("before") || !reflect.DeepEqual(w.Types(), []string{"before"}) {
		t.Fatalf("initial list: %v", w.Types())
	}
	testenv.WaitFor(t, time.Second, "synced", w.Synced)

	if _, err := Pause(ctx, cli, ns, "mail"); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Second, "pause seen", func() bool { return w.Paused("mail") })
	if _, err := Resume(ctx, cli, ns, "before"); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Second, "resume seen", func() bool { return !w.Paused("before") })
	if got := w.Types(); !reflect.DeepEqual(got, []string{"mail"}) {
		t.Fatalf("Types: %v", got)
	}
	// a foreign key naming no valid type is not a paused type
	if _, err := cli.Put(ctx, Key(ns, "x/y"), "{}"); err != nil {
		t.Fatal(err)
	}
	if _, err := Pause(ctx, cli, ns, "sms"); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Second, "second pause seen", func() bool { return w.Paused("sms") })
	if got := w.Types(); !reflect.DeepEqual(got, []string{"mail", "sms"}) {
		t.Fatalf("Types: %v", got)
	}
	// snapshots are copies
	snap := w.Snapshot()
	delete(snap, "mail")
	if !w.Paused("mail") {
		t.Fatal("caller changed the view")
	}

	// etcd goes away and comes back: the view stays, then catches up
	rev := w.Revision()
	e.Stop(t)
	if !w.Paused("mail") {
		t.Fatal("readers lost the view while etcd is down")
	}
	e.Restart(t)
	if _, err := Resume(ctx, cli, ns, "mail"); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "resume after an etcd restart seen", func() bool { return !w.Paused("mail") })
	if w.Revision() <= rev {
		t.Fatalf("revision %d did not move past %d", w.Revision(), rev)
	}
	testenv.WaitFor(t, 10*time.Second, "synced again", w.Synced)
}

// A watch from a compacted revision fails (Run then lists again).
func TestWatcherCompacted(t *testing.T) {
	cli := testenv.StartEtcd(t).Client(t)
	ctx := t.Context()
	ns := testNS(t)
	w := newWatcher(t, cli, ns)
	if _, err := Pause(ctx, cli, ns, "a"); err != nil {
		t.Fatal(err)
	}
	_, old, err := list(ctx, cli, Prefix(ns))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Pause(ctx, cli, ns, "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := Resume(ctx, cli, ns, "a"); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := w.watch(wctx, old+1); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("watch from a compacted revision: %v, want ErrCompacted", err)
	}
	runWatcher(t, w)
	if got := w.Types(); !reflect.DeepEqual(got, []string{"b"}) {
		t.Fatalf("after compaction: %v", got)
	}
}
