package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/delayq/delayq/internal/testenv"
)

var nsSeq atomic.Int64

func testNS(t *testing.T) string {
	return fmt.Sprintf("t%d-%s", nsSeq.Add(1), strings.ReplaceAll(t.Name(), "/", "-"))
}

// readiness is a ReadyFunc the test steers.
type readiness struct {
	mu     sync.Mutex
	ready  bool
	reason string
}

func (r *readiness) set(ready bool, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ready, r.reason = ready, reason
}

func (r *readiness) get(context.Context) (bool, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ready, r.reason
}

// run runs a Registrar until the returned stop, which waits for Run (or
// the test's end).
func run(t *testing.T, cfg Config) (*Registrar, func()) {
	t.Helper()
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Registrar.Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return r, stop
}

func find(ps []Proc, kind, id string) (Proc, bool) {
	for _, p := range ps {
		if p.Kind == kind && p.ID == id {
			return p, true
		}
	}
	return Proc{}, false
}

func listed(t *testing.T, cli *clientv3.Client, ns, kind, id string, cond func(Proc) bool) func() bool {
	return func() bool {
		ps, err := List(t.Context(), cli, ns)
		if err != nil {
			return false
		}
		p, ok := find(ps, kind, id)
		return ok && cond(p)
	}
}

func TestRegisterAndList(t *testing.T) {
	cli := testenv.StartEtcd(t).Client(t)
	ns := testNS(t)
	started := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rd := &readiness{}
	rd.set(false, "redis: connection refused\nkafka: ok")
	run(t, Config{Client: cli, Namespace: ns, Ready: rd.get, Poll: 20 * time.Millisecond,
		Proc: Proc{ID: "w-1", Kind: KindWork, Addr: "10.0.0.1:9102", StartedAt: started}})
	run(t, Config{Client: cli, Namespace: ns,
		Proc: Proc{ID: "e-2", Kind: KindEvent, Addr: "10.0.0.2:9101", Version: "v9.9.9"}})
	run(t, Config{Client: cli, Namespace: ns,
		Proc: Proc{ID: "e-1", Kind: KindEvent, Addr: "10.0.0.3:9101"}})
	var ps []Proc
	testenv.WaitFor(t, 5*time.Second, "three processes listed", func() bool {
		var err error
		ps, err = List(t.Context(), cli, ns)
		return err == nil && len(ps) == 3
	})
	var order []string
	for _, p := range ps {
		order = append(order, p.Kind+"/"+p.ID)
	}
	if got := strings.Join(order, " "); got != "event/e-1 event/e-2 work/w-1" {
		t.Fatalf("List order: %s", got)
	}
	w := ps[2]
	if w.Addr != "10.0.0.1:9102" || !w.StartedAt.Equal(started) || w.Ready || w.Reason != "redis: connection refused; kafka: ok" || w.Version == "" {
		t.Fatalf("work process: %+v", w)
	}
	if ps[1].Version != "v9.9.9" || !ps[1].Ready || ps[1].Reason != "" || ps[1].StartedAt.IsZero() {
		t.Fatalf("event process: %+v", ps[1])
	}
	// the stored value is the documented JSON, under a lease
	resp, err := cli.Get(t.Context(), "/"+ns+"/procs/work/w-1")
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease == 0 {
		t.Fatalf("stored key: %v %v", resp, err)
	}
	var raw map[string]any
	if err := json.Unmarshal(resp.Kvs[0].Value, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"id", "kind", "version", "addr", "started_at", "ready", "reason"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("stored value %s lacks %q", resp.Kvs[0].Value, k)
		}
	}
	// a value that does not decode is left out; another namespace is separate
	if _, err := cli.Put(t.Context(), Prefix(ns)+"work/junk", "not json"); err != nil {
		t.Fatal(err)
	}
	if ps, err := List(t.Context(), cli, ns); err != nil || len(ps) != 3 {
		t.Fatalf("List with a foreign value: %v %v", ps, err)
	}
	if ps, err := List(t.Context(), cli, ns+"x"); err != nil || len(ps) != 0 {
		t.Fatalf("List of another namespace: %v %v", ps, err)
	}
	if _, err := List(t.Context(), cli, "a/b"); err == nil {
		t.Fatal("List of a bad namespace succeeded")
	}
}

// A readiness change is in etcd within a second, without waiting for the
// refresh.
func TestReadinessChangeVisibleWithinASecond(t *testing.T) {
	cli := testenv.StartEtcd(t).Client(t)
	ns := testNS(t)
	rd := &readiness{}
	rd.set(true, "")
	run(t, Config{Client: cli, Namespace: ns, Ready: rd.get, Refresh: time.Minute,
		Proc: Proc{ID: "d-1", Kind: KindDaemon, Addr: "127.0.0.1:8080"}})
	testenv.WaitFor(t, 5*time.Second, "registered ready", listed(t, cli, ns, KindDaemon, "d-1", func(p Proc) bool { return p.Ready }))

	rd.set(false, "redis: degraded: unreachable")
	testenv.WaitFor(t, time.Second, "not ready within a second", listed(t, cli, ns, KindDaemon, "d-1", func(p Proc) bool {
		return !p.Ready && p.Reason == "redis: degraded: unreachable"
	}))
	rd.set(true, "")
	testenv.WaitFor(t, time.Second, "ready again within a second", listed(t, cli, ns, KindDaemon, "d-1", func(p Proc) bool {
		return p.Ready && p.Reason == ""
	}))
}

// A lost lease (revoked here; expired after etcd was unreachable for its
// TTL alike) is granted again and the key written again.
func TestLeaseLossRegistersAgain(t *testing.T) {
	cli := testenv.StartEtcd(t).Client(t)
	ns := testNS(t)
	r, _ := run(t, Config{Client: cli, Namespace: ns,
		Proc: Proc{ID: "e-1", Kind: KindEvent, Addr: "127.0.0.1:9101"}})
	lease := func() clientv3.LeaseID {
		resp, err := cli.Get(t.Context(), r.Key())
		if err != nil || len(resp.Kvs) == 0 {
			return 0
		}
		return clientv3.LeaseID(resp.Kvs[0].Lease)
	}
	testenv.WaitFor(t, 5*time.Second, "registered", func() bool { return lease() != 0 })
	first := lease()
	if _, err := cli.Revoke(t.Context(), first); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 5*time.Second, "registered again under a new lease", func() bool {
		l := lease()
		return l != 0 && l != first
	})
	ttl, err := cli.TimeToLive(t.Context(), lease())
	if err != nil || ttl.TTL <= 0 || ttl.GrantedTTL != int64(DefaultTTL/time.Second) {
		t.Fatalf("new lease: %+v %v", ttl, err)
	}
}

// etcd down longer than the TTL: the client gives the lease up, and the
// process registers again under a new lease once etcd is back.
func TestEtcdOutageRegistersAgain(t *testing.T) {
	e := testenv.StartEtcd(t)
	cli := e.Client(t)
	ns := testNS(t)
	lost := &lostLeases{}
	r, _ := run(t, Config{Client: cli, Namespace: ns, TTL: 2 * time.Second, Refresh: time.Second,
		Proc: Proc{ID: "w-1", Kind: KindWork, Addr: "127.0.0.1:9102"}, Log: slog.New(lost)})
	lease := func() clientv3.LeaseID {
		resp, err := cli.Get(t.Context(), r.Key())
		if err != nil || len(resp.Kvs) == 0 {
			return 0
		}
		return clientv3.LeaseID(resp.Kvs[0].Lease)
	}
	testenv.WaitFor(t, 5*time.Second, "registered", func() bool { return lease() != 0 })
	first := lease()
	e.Stop(t)
	// the client gives a lease up about a TTL (2s) after its last answer;
	// the bounds are generous because CI runs this beside the browser and
	// chaos suites on 2 cores
	testenv.WaitFor(t, 30*time.Second, "lease given up while etcd is down", func() bool { return lost.n.Load() > 0 })
	e.Restart(t)
	testenv.WaitFor(t, 30*time.Second, "registered again under a new lease", func() bool {
		l := lease()
		return l != 0 && l != first
	})
}

// Run deletes the key when its context ends.
func TestShutdownDeletesKey(t *testing.T) {
	cli := testenv.StartEtcd(t).Client(t)
	ns := testNS(t)
	r, stop := run(t, Config{Client: cli, Namespace: ns,
		Proc: Proc{ID: "w-1", Kind: KindWork, Addr: "127.0.0.1:9102"}})
	testenv.WaitFor(t, 5*time.Second, "registered", listed(t, cli, ns, KindWork, "w-1", func(Proc) bool { return true }))
	stop()
	resp, err := cli.Get(t.Context(), r.Key())
	if err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("key after shutdown: %v %v", resp.Kvs, err)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	cli := testenv.StartEtcd(t).Client(t)
	ok := Proc{ID: "a", Kind: KindWork, Addr: "x:1"}
	for name, cfg := range map[string]Config{
		"no client":    {Namespace: "ns", Proc: ok},
		"namespace":    {Client: cli, Namespace: "a/b", Proc: ok},
		"no id":        {Client: cli, Namespace: "ns", Proc: Proc{Kind: KindWork}},
		"id with /":    {Client: cli, Namespace: "ns", Proc: Proc{ID: "a/b", Kind: KindWork}},
		"no kind":      {Client: cli, Namespace: "ns", Proc: Proc{ID: "a"}},
		"short TTL":    {Client: cli, Namespace: "ns", Proc: ok, TTL: time.Second},
		"negative TTL": {Client: cli, Namespace: "ns", Proc: ok, Poll: -1},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestAdvertiseAddr(t *testing.T) {
	host, _ := os.Hostname()
	for _, c := range []struct{ configured, bound, want string }{
		{"127.0.0.1:0", "127.0.0.1:41234", "127.0.0.1:41234"},
		{"localhost:9102", "127.0.0.1:9102", "localhost:9102"},
		{":9102", "[::]:9102", net.JoinHostPort(host, "9102")},
		{"0.0.0.0:0", "0.0.0.0:5555", net.JoinHostPort(host, "5555")},
		{"[::]:9101", "[::]:9101", net.JoinHostPort(host, "9101")},
		{"[::1]:0", "[::1]:7000", "[::1]:7000"},
	} {
		if got := AdvertiseAddr(c.configured, c.bound); got != c.want {
			t.Errorf("AdvertiseAddr(%q, %q) = %q, want %q", c.configured, c.bound, got, c.want)
		}
	}
}

// lostLeases is a log handler that counts the registrations interrupted
// because the lease was lost (Run logs each one with its error).
type lostLeases struct{ n atomic.Int64 }

func (*lostLeases) Enabled(context.Context, slog.Level) bool { return true }
func (l *lostLeases) WithAttrs([]slog.Attr) slog.Handler     { return l }
func (l *lostLeases) WithGroup(string) slog.Handler          { return l }

func (l *lostLeases) Handle(_ context.Context, rec slog.Record) error {
	rec.Attrs(func(a slog.Attr) bool {
		if err, ok := a.Value.Any().(error); ok && a.Key == "err" && errors.Is(err, errLeaseLost) {
			l.n.Add(1)
		}
		return true
	})
	return nil
}
