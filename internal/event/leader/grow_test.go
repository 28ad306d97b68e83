package leader

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/delayq/delayq/internal/testenv"
)

// snapshot is who works on which shard, and how often each shard's work
// has started so far.
func (tr *tracker) snapshot() (active map[int]string, starts map[int]int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return maps.Clone(tr.active), maps.Clone(tr.starts)
}

// started is how many leaderships have started so far.
func (tr *tracker) started() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.acquired
}

// checkKept fails the test unless every shard of before is still worked on
// by the same process, without a restart since (starts unchanged).
func checkKept(t *testing.T, tr *tracker, before map[int]string, startsBefore map[int]int) {
	t.Helper()
	now, starts := tr.snapshot()
	for s, id := range before {
		if now[s] != id || starts[s] != startsBefore[s] {
			t.Errorf("shard %d: led by %q before the growth, by %q after, started %d times more",
				s, id, now[s], starts[s]-startsBefore[s])
		}
	}
}

// growTTL is the session TTL of the growth tests. Growth does not wait for
// it (SetShards wakes the loop); a long one keeps a keep-alive starved on a
// loaded machine from ending a session, which moves shards for reasons
// that are not the growth and would defeat the no-churn checks.
const growTTL = 5 * time.Second

// TestSetShardsGrowsEveryManager: two managers lead 4 shards; both learn of
// 16. All 16 are led, 8 each, never two leaders at once, and the original 4
// stay where they were without a restart.
func TestSetShardsGrowsEveryManager(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t)
	tr := newTracker(t)
	const ns = "grow"
	a := startProcN(t, e, ns, "a", tr, 4, growTTL)
	b := startProcN(t, e, ns, "b", tr, 4, growTTL)
	waitSpread(t, tr, 4, 10*time.Second, "a", "b")
	before, startsBefore := tr.snapshot()

	start := time.Now()
	a.mgr.SetShards(16)
	b.mgr.SetShards(16)
	got := waitSpread(t, tr, 16, 10*time.Second, "a", "b")
	t.Logf("16 shards led %v after the growth (TTL %v): %v", time.Since(start), growTTL, got)
	checkKept(t, tr, before, startsBefore)
	for _, p := range []*proc{a, b} {
		if n, l := p.mgr.Shards(), len(p.mgr.Leading()); n != 16 || l != 8 {
			t.Errorf("%s: Shards() %d, leads %d shards; want 16 and 8", p.id, n, l)
		}
	}
	if l := leadersInEtcd(t, e.Client(t), ns); len(l) != 16 {
		t.Errorf("etcd shows %d led shards: %v", len(l), l)
	}
	// Settled: no shard moves any more.
	acquired := tr.started()
	time.Sleep(time.Second)
	if _, n := tr.counts(); n != 16 || tr.started() != acquired {
		t.Errorf("after balancing: %d shards led, %d more leaderships started", n, tr.started()-acquired)
	}
	tr.check()
}

// TestSetShardsWhileAnotherKnowsFewer: one manager learns of 16 shards while
// the other still balances over 4. The first takes its share (8) of the 16,
// the other keeps its 2 and touches no shard it does not know of; when it
// learns of 16 too it takes the 6 left, knowing which of the new shards the
// first one leads already (their election keys came before its growth).
func TestSetShardsWhileAnotherKnowsFewer(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t)
	tr := newTracker(t)
	const ns = "growlag"
	a := startProcN(t, e, ns, "a", tr, 4, growTTL)
	b := startProcN(t, e, ns, "b", tr, 4, growTTL)
	waitSpread(t, tr, 4, 10*time.Second, "a", "b")
	before, startsBefore := tr.snapshot()

	a.mgr.SetShards(16)
	testenv.WaitFor(t, 10*time.Second, "a leads 8 of 16 shards, b still 2 of 4", func() bool {
		c, n := tr.counts()
		return c["a"] == 8 && c["b"] == 2 && n == 10
	})
	for _, s := range b.mgr.Leading() {
		if s >= 4 {
			t.Errorf("b leads shard %d while it balances over 4", s)
		}
	}
	checkKept(t, tr, before, startsBefore)
	tr.check()

	start := time.Now()
	b.mgr.SetShards(16)
	got := waitSpread(t, tr, 16, 10*time.Second, "a", "b")
	t.Logf("b learnt of 16 shards: balanced %v later: %v", time.Since(start), got)
	checkKept(t, tr, before, startsBefore)
	tr.check()
}

// TestSetShardsNeverShrinks: a count that is not larger than the current
// one changes nothing, before Run and while running; a larger one set
// before Run is the count Run starts with.
func TestSetShardsNeverShrinks(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t)
	tr := newTracker(t)
	met := NewMetrics(prometheus.NewRegistry())
	m, err := New(Config{Client: e.Client(t), Namespace: "shrink", Shards: 4, ID: "a", TTL: growTTL, Lead: tr.lead("a"), Metrics: met})
	if err != nil {
		t.Fatal(err)
	}
	want := func(n int) {
		t.Helper()
		if got, g := m.Shards(), gaugeValue(t, met.ShardCount); got != n || g != float64(n) {
			t.Fatalf("Shards() %d, event_shard_count %v; want %d", got, g, n)
		}
	}
	want(4)
	m.SetShards(2)
	m.SetShards(4)
	want(4)
	m.SetShards(6)
	want(6)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = m.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Errorf("manager did not stop")
		}
	})
	waitSpread(t, tr, 6, 10*time.Second, "a")
	before, startsBefore := tr.snapshot()

	m.SetShards(5)
	m.SetShards(1)
	want(6)
	// A shrink would give shard 5 back at once (the loop is woken); give
	// the loop time to act on a wrong wake-up before looking.
	time.Sleep(500 * time.Millisecond)
	if l := m.Leading(); len(l) != 6 {
		t.Errorf("leads %v after SetShards(5) and SetShards(1); want 6 shards", l)
	}
	checkKept(t, tr, before, startsBefore)

	m.SetShards(8)
	want(8)
	waitSpread(t, tr, 8, 10*time.Second, "a")
	checkKept(t, tr, before, startsBefore)
	tr.check()
}
