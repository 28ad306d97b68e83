package ratelimit

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

func newRules(t *testing.T, cli *clientv3.Client, ns string) *Rules {
	t.Helper()
	r, err := NewRules(cli, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// runRules runs r's watcher until the test ends and waits for its first
// load.
func runRules(t *testing.T, r *Rules) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Rules.Run: %v", err)
		}
	})
	select {
	case <-r.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("rules watcher not ready after 5s")
	}
}

var (
	quota10 = Rule{WindowQuota: &WindowQuota{Limit: 10, Window: dur(time.Minute)}}
	conc3   = Rule{Concurrency: &Concurrency{Limit: 3, SlotTTL: dur(10 * time.Second)}}
)

func TestRulesCRUD(t *testing.T) {
	e := testenv.StartEtcd(t)
	cli := e.Client(t)
	ctx := t.Context()
	ns := testNS(t)
	r := newRules(t, cli, ns)

	if _, err := NewRules(cli, "a/b", nil); err == nil {
		t.Fatal("namespace with '/' accepted")
	}
	if _, ok, err := r.Get(ctx, "mail"); err != nil || ok {
		t.Fatalf("Get of a missing rule: %v %v", ok, err)
	}
	if err := r.Put(ctx, "a/b", quota10); !errors.Is(err, ErrInvalidType) {
		t.Fatalf("Put with a bad type: %v", err)
	}
	if err := r.Put(ctx, "mail", Rule{WindowQuota: &WindowQuota{Limit: -1, Window: dur(time.Second)}}); !errors.Is(err, ErrInvalidRule) {
		t.Fatalf("Put of a bad rule: %v", err)
	}
	if err := r.Put(ctx, "mail", Rule{}); !errors.Is(err, ErrInvalidRule) {
		t.Fatalf("Put of an empty rule: %v", err)
	}
	if m, err := r.List(ctx); err != nil || len(m) != 0 {
		t.Fatalf("rejected Puts wrote something: %v %v", m, err)
	}

	if err := r.Put(ctx, "mail", quota10); err != nil {
		t.Fatal(err)
	}
	if err := r.Put(ctx, "sms", conc3); err != nil {
		t.Fatal(err)
	}
	raw, err := cli.Get(ctx, "/"+ns+"/limits/mail")
	if err != nil || len(raw.Kvs) != 1 || string(raw.Kvs[0].Value) != `{"window_quota":{"limit":10,"window":"1m0s"}}` {
		t.Fatalf("stored value %v %v", raw.Kvs, err)
	}
	got, ok, err := r.Get(ctx, "mail")
	if err != nil || !ok || !reflect.DeepEqual(got, quota10) {
		t.Fatalf("Get: %s %v %v", show(got), ok, err)
	}
	// values written by something else than Put are ignored by List
	for k, v := range map[string]string{"junk": "not json", "a/b": `{"concurrency":{"limit":1,"slot_ttl":"1s"}}`, "neg": `{"concurrency":{"limit":-1,"slot_ttl":"1s"}}`} {
		if _, err := cli.Put(ctx, "/"+ns+"/limits/"+k, v); err != nil {
			t.Fatal(err)
		}
	}
	m, err := r.List(ctx)
	if err != nil || len(m) != 2 || !reflect.DeepEqual(m["sms"], conc3) {
		t.Fatalf("List: %v %v", m, err)
	}
	if _, _, err := r.Get(ctx, "junk"); !errors.Is(err, ErrInvalidJSON) {
		t.Fatalf("Get of a corrupt value: %v", err)
	}
	// another namespace is separate
	other := newRules(t, cli, ns+"x")
	if m, _ := other.List(ctx); len(m) != 0 {
		t.Fatalf("namespace %sx sees %v", ns, m)
	}

	if ok, err := r.Delete(ctx, "mail"); err != nil || !ok {
		t.Fatalf("Delete: %v %v", ok, err)
	}
	if ok, err := r.Delete(ctx, "mail"); err != nil || ok {
		t.Fatalf("second Delete: %v %v", ok, err)
	}
}

func TestRulesWatch(t *testing.T) {
	e := testenv.StartEtcd(t)
	ctx := t.Context()
	ns := testNS(t)
	writer := newRules(t, e.Client(t), ns)
	if err := writer.Put(ctx, "before", conc3); err != nil {
		t.Fatal(err)
	}
	r := newRules(t, e.Client(t), ns)
	if _, ok := r.Rule("before"); ok {
		t.Fatal("rule visible before the watcher ran")
	}
	runRules(t, r)
	if got, ok := r.Rule("before"); !ok || !reflect.DeepEqual(got, conc3) {
		t.Fatalf("initial list: %s %v", show(got), ok)
	}

	seen := func(typ string, want *Rule) func() bool {
		return func() bool {
			got, ok := r.Rule(typ)
			if want == nil {
				return !ok
			}
			return ok && reflect.DeepEqual(got, *want)
		}
	}
	if err := writer.Put(ctx, "mail", quota10); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Second, "put seen by the watcher", seen("mail", &quota10))
	if _, err := writer.Delete(ctx, "before"); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Second, "delete seen by the watcher", seen("before", nil))

	// snapshots are copies
	got, _ := r.Rule("mail")
	got.WindowQuota.Limit = 999
	snap := r.Snapshot()
	snap["mail"].WindowQuota.Limit = 998
	delete(snap, "mail")
	if again, _ := r.Rule("mail"); again.WindowQuota.Limit != 10 {
		t.Fatalf("caller changed the snapshot: %d", again.WindowQuota.Limit)
	}

	// etcd goes away and comes back: the watcher catches up
	rev := r.Revision()
	e.Stop(t)
	if got, ok := r.Rule("mail"); !ok || got.WindowQuota.Limit != 10 {
		t.Fatal("readers lost the snapshot while etcd is down")
	}
	e.Restart(t)
	tight := Rule{WindowQuota: &WindowQuota{Limit: 1, Window: dur(time.Minute)}}
	if err := writer.Put(ctx, "mail", tight); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "put after an etcd restart seen by the watcher", seen("mail", &tight))
	if r.Revision() <= rev {
		t.Fatalf("revision %d did not move past %d", r.Revision(), rev)
	}
}

// A watch from a compacted revision fails (Run then lists again).
func TestRulesWatchCompacted(t *testing.T) {
	e := testenv.StartEtcd(t)
	cli := e.Client(t)
	ctx := t.Context()
	r := newRules(t, cli, testNS(t))
	if err := r.Put(ctx, "a", conc3); err != nil {
		t.Fatal(err)
	}
	_, old, err := r.list(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Put(ctx, "b", conc3); err != nil {
		t.Fatal(err)
	}
	if err := r.Put(ctx, "a", quota10); err != nil {
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
	if err := r.watch(wctx, old+1); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("watch from a compacted revision: %v, want ErrCompacted", err)
	}
	// Run recovers by listing
	runRules(t, r)
	if got, ok := r.Rule("a"); !ok || !reflect.DeepEqual(got, quota10) {
		t.Fatalf("after compaction: %s %v", show(got), ok)
	}
}
