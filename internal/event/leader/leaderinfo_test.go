package leader

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/delayq/delayq/internal/testenv"
)

// leaderInfoSeries gathers reg and returns delayq_shard_leader_info as
// shard -> process; it fails the test on a value other than 1 or a shard
// reported twice by one registry.
func leaderInfoSeries(t *testing.T, reg *prometheus.Registry) map[int]string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]string{}
	for _, mf := range mfs {
		if mf.GetName() != "delayq_shard_leader_info" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var shard, process string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "shard":
					shard = l.GetValue()
				case "process":
					process = l.GetValue()
				}
			}
			s, err := strconv.Atoi(shard)
			if err != nil {
				t.Fatalf("shard label %q: %v", shard, err)
			}
			if v := m.GetGauge().GetValue(); v != 1 {
				t.Fatalf("shard %d: value %v, want 1", s, v)
			}
			if _, dup := out[s]; dup {
				t.Fatalf("shard %d reported twice", s)
			}
			out[s] = process
		}
	}
	return out
}

// TestLeaderInfoFollowsLeading: the info metric is exactly the manager's
// own view, under its process id, and empty before a manager is attached.
func TestLeaderInfoFollowsLeading(t *testing.T) {
	reg := prometheus.NewRegistry()
	met := NewMetrics(reg)
	if got := leaderInfoSeries(t, reg); len(got) != 0 {
		t.Fatalf("before a manager: %v", got)
	}
	m := &Manager{leading: map[int]int64{}, m: met}
	met.info.attach("proc-1", m.Leading)
	m.setLeading(3, 7, true)
	m.setLeading(0, 2, true)
	if got, want := leaderInfoSeries(t, reg), map[int]string{0: "proc-1", 3: "proc-1"}; !maps.Equal(got, want) {
		t.Fatalf("leading 0 and 3: %v, want %v", got, want)
	}
	m.setLeading(3, 7, false)
	if got, want := leaderInfoSeries(t, reg), map[int]string{0: "proc-1"}; !maps.Equal(got, want) {
		t.Fatalf("gave 3 back: %v, want %v", got, want)
	}
	m.clearLeading()
	if got := leaderInfoSeries(t, reg); len(got) != 0 {
		t.Fatalf("after clear: %v", got)
	}
}

// TestLeaderInfoAcrossProcesses: on real etcd, the union of every
// process' delayq_shard_leader_info names each shard exactly once with
// its leader; a process that stops drops its series and the others take
// its shards over.
func TestLeaderInfoAcrossProcesses(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t)
	tr := newTracker(t)
	const ns = "info"
	type infoProc struct {
		id   string
		reg  *prometheus.Registry
		mgr  *Manager
		stop context.CancelFunc
		done chan struct{}
	}
	start := func(id string) *infoProc {
		reg := prometheus.NewRegistry()
		m, err := New(Config{Client: e.Client(t), Namespace: ns, Shards: testShards, ID: id, TTL: 2 * time.Second,
			Lead: tr.lead(id), Metrics: NewMetrics(reg)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
		p := &infoProc{id: id, reg: reg, mgr: m, stop: cancel, done: make(chan struct{})}
		go func() { _ = m.Run(ctx); close(p.done) }()
		t.Cleanup(func() { cancel(); <-p.done })
		return p
	}
	// union merges the processes' series; ok when every shard is led
	// once, by one of want.
	union := func(ps ...*infoProc) (map[int]string, string) {
		all := map[int]string{}
		for _, p := range ps {
			for s, proc := range leaderInfoSeries(t, p.reg) {
				if other, dup := all[s]; dup {
					return nil, fmt.Sprintf("shard %d reported by %s and %s", s, other, proc)
				}
				if proc != p.id {
					return nil, fmt.Sprintf("%s reports shard %d under process %q", p.id, s, proc)
				}
				all[s] = proc
			}
		}
		if len(all) != testShards {
			return nil, fmt.Sprintf("%d of %d shards have a leader series: %v", len(all), testShards, all)
		}
		return all, ""
	}
	waitUnion := func(ps ...*infoProc) map[int]string {
		t.Helper()
		var got map[int]string
		deadline := time.Now().Add(15 * time.Second)
		for {
			var why string
			if got, why = union(ps...); got != nil {
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("leader info never covered every shard once: %s", why)
			}
			time.Sleep(10 * time.Millisecond) // poll interval of a bounded wait
		}
	}
	a, b := start("a"), start("b")
	got := waitUnion(a, b)
	for _, p := range []*infoProc{a, b} {
		led := 0
		for _, proc := range got {
			if proc == p.id {
				led++
			}
		}
		if led == 0 {
			t.Errorf("%s leads no shard in the info metric", p.id)
		}
	}

	b.stop()
	<-b.done
	if s := leaderInfoSeries(t, b.reg); len(s) != 0 {
		t.Fatalf("stopped process still reports %v", s)
	}
	got = waitUnion(a)
	if ls := a.mgr.Leading(); len(ls) != testShards {
		t.Fatalf("a leads %v, info says %v", ls, got)
	}
	tr.check()
}
