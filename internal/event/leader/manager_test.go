package leader

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/delayq/delayq/internal/election"
	"github.com/delayq/delayq/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// tracker is a LeadFunc shared by every manager of a test: it records who
// works on which shard and fails the test when two work on one at once or
// a token does not grow.
type tracker struct {
	t        *testing.T
	mu       sync.Mutex
	active   map[int]string // shard -> process
	last     map[int]int64  // shard -> last token
	starts   map[int]int    // shard -> LeadFuncs started
	acquired int
	overlaps []string
}

func newTracker(t *testing.T) *tracker {
	return &tracker{t: t, active: map[int]string{}, last: map[int]int64{}, starts: map[int]int{}}
}

func (tr *tracker) lead(id string) LeadFunc {
	return func(ctx context.Context, l Lead) error {
		tr.mu.Lock()
		if other, ok := tr.active[l.Shard]; ok {
			tr.overlaps = append(tr.overlaps, fmt.Sprintf("shard %d: %s starts while %s works", l.Shard, id, other))
		}
		if l.Token <= tr.last[l.Shard] {
			tr.overlaps = append(tr.overlaps, fmt.Sprintf("shard %d: token %d after %d", l.Shard, l.Token, tr.last[l.Shard]))
		}
		tr.active[l.Shard] = id
		tr.last[l.Shard] = l.Token
		tr.starts[l.Shard]++
		tr.acquired++
		tr.mu.Unlock()
		if time.Until(l.ValidUntil()) <= 0 {
			tr.t.Errorf("shard %d handed over with an unconfirmed lease", l.Shard)
		}
		select {
		case <-ctx.Done():
		case <-l.Stop:
		}
		tr.mu.Lock()
		if tr.active[l.Shard] == id {
			delete(tr.active, l.Shard)
		}
		tr.mu.Unlock()
		return nil
	}
}

// counts is shards per process among the working ones, and how many work.
func (tr *tracker) counts() (map[string]int, int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	c := map[string]int{}
	for _, id := range tr.active {
		c[id]++
	}
	return c, len(tr.active)
}

func (tr *tracker) check() {
	tr.t.Helper()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.overlaps) > 0 {
		tr.t.Fatalf("two leaders at once or token went backwards:\n%s", strings.Join(tr.overlaps, "\n"))
	}
}

type proc struct {
	id     string
	mgr    *Manager
	client *clientv3.Client
	cancel context.CancelFunc
	done   chan struct{}
}

func (p *proc) stop(t *testing.T) {
	t.Helper()
	p.cancel()
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("manager %s did not stop", p.id)
	}
}

const testShards = 16

func startProc(t *testing.T, e *testenv.Etcd, ns, id string, tr *tracker) *proc {
	t.Helper()
	return startProcN(t, e, ns, id, tr, testShards, 2*time.Second)
}

// startProcN starts a manager that balances over the given shard count,
// with the given session TTL.
func startProcN(t *testing.T, e *testenv.Etcd, ns, id string, tr *tracker, shards int, ttl time.Duration) *proc {
	t.Helper()
	cl := e.Client(t)
	var log *slog.Logger
	if os.Getenv("DQ_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("proc", id)
	}
	m, err := New(Config{Client: cl, Namespace: ns, Shards: shards, ID: id, TTL: ttl, Lead: tr.lead(id), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &proc{id: id, mgr: m, client: cl, cancel: cancel, done: make(chan struct{})}
	go func() { _ = m.Run(ctx); close(p.done) }()
	t.Cleanup(func() { p.stop(t) })
	return p
}

// waitBalanced waits until every shard is worked on by exactly the given
// processes, within one shard of each other.
func waitBalanced(t *testing.T, tr *tracker, timeout time.Duration, ids ...string) map[string]int {
	t.Helper()
	return waitSpread(t, tr, testShards, timeout, ids...)
}

// waitSpread waits until shards 0..n-1 are worked on by exactly the given
// processes, within one shard of each other.
func waitSpread(t *testing.T, tr *tracker, n int, timeout time.Duration, ids ...string) map[string]int {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		c, total := tr.counts()
		if total == n && len(c) == len(ids) {
			lo, hi := n, 0
			for _, id := range ids {
				lo, hi = min(lo, c[id]), max(hi, c[id])
			}
			if hi-lo <= 1 {
				return c
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d shards not balanced over %v within %v: %v (%d led)", n, ids, timeout, c, total)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func leadersInEtcd(t *testing.T, cl *clientv3.Client, ns string) map[int]string {
	t.Helper()
	resp, err := cl.Get(t.Context(), election.ShardsPrefix(ns), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]string{}
	for _, kv := range resp.Kvs {
		s, ok := election.ParseElectionKey(ns, string(kv.Key))
		if !ok {
			t.Fatalf("unexpected key %s", kv.Key)
		}
		if _, seen := out[s]; !seen {
			out[s] = string(kv.Value)
		}
	}
	return out
}

func TestManagersBalanceHandOverAndRebalance(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t)
	tr := newTracker(t)
	const ns = "bal"
	a := startProc(t, e, ns, "a", tr)
	b := startProc(t, e, ns, "b", tr)
	c := startProc(t, e, ns, "c", tr)
	got := waitBalanced(t, tr, 10*time.Second, "a", "b", "c")
	tr.check()
	t.Logf("3 processes: %v", got)
	if l := leadersInEtcd(t, e.Client(t), ns); len(l) != testShards {
		t.Fatalf("etcd shows %d led shards", len(l))
	}
	if n := len(a.mgr.Leading()) + len(b.mgr.Leading()) + len(c.mgr.Leading()); n != testShards {
		t.Fatalf("Leading() over the three managers: %d shards", n)
	}
	if err := a.mgr.Ready(); err != nil {
		t.Fatal(err)
	}

	// Graceful stop: the shards move at once, not after the TTL.
	start := time.Now()
	c.stop(t)
	got = waitBalanced(t, tr, 10*time.Second, "a", "b")
	handover := time.Since(start)
	t.Logf("c stopped: %v after %v", got, handover)
	if handover > 2*time.Second {
		t.Errorf("graceful hand-over took %v, longer than the TTL", handover)
	}

	before := tr.acquired
	startProc(t, e, ns, "d", tr)
	got = waitBalanced(t, tr, 10*time.Second, "a", "b", "d")
	t.Logf("d joined: %v, %d shards moved", got, tr.acquired-before)
	if moved := tr.acquired - before; moved > 6 {
		t.Errorf("%d shards moved for a newcomer that needs 5", moved)
	}
	tr.check()
}

func TestSessionRevokedFromOutsideStopsWorkAndComesBack(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t)
	tr := newTracker(t)
	const ns = "rev"
	a := startProc(t, e, ns, "a", tr)
	waitBalanced(t, tr, 10*time.Second, "a")
	lease := a.mgr.Lease()
	if lease == 0 {
		t.Fatal("no lease")
	}
	start := time.Now()
	if _, err := e.Client(t).Revoke(t.Context(), lease); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 5*time.Second, "work stopped after the revoke", func() bool {
		_, n := tr.counts()
		return n < testShards || a.mgr.Lease() != lease
	})
	t.Logf("work stopped %v after the revoke", time.Since(start))
	testenv.WaitFor(t, 10*time.Second, "a new session leads everything again", func() bool {
		_, n := tr.counts()
		return n == testShards && a.mgr.Lease() != lease && a.mgr.Lease() != 0
	})
	tr.check()
}

func TestCrashedProcessShardsTakenOverWithinTTL(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t)
	tr := newTracker(t)
	const ns = "crash"
	a := startProc(t, e, ns, "a", tr)
	startProc(t, e, ns, "b", tr)
	waitBalanced(t, tr, 10*time.Second, "a", "b")
	// A crash: the process' connection goes away, its lease stays on the
	// server until the TTL runs out.
	start := time.Now()
	_ = a.client.Close()
	waitBalanced(t, tr, 10*time.Second, "b")
	took := time.Since(start)
	t.Logf("b leads all 16 shards %v after a's connection closed (TTL 2s)", took)
	if took > 2*time.Second+1500*time.Millisecond {
		t.Errorf("take-over took %v, want within TTL + 1.5s", took)
	}
	a.stop(t)
	tr.check()
}

func TestEtcdOutageStopsWorkAndLeadershipComesBack(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t)
	tr := newTracker(t)
	const ns = "outage"
	a := startProc(t, e, ns, "a", tr)
	b := startProc(t, e, ns, "b", tr)
	waitBalanced(t, tr, 10*time.Second, "a", "b")
	start := time.Now()
	e.Stop(t)
	testenv.WaitFor(t, 6*time.Second, "all work stopped without etcd", func() bool {
		_, n := tr.counts()
		return n == 0
	})
	t.Logf("all work stopped %v after etcd went away (TTL 2s)", time.Since(start))
	if a.mgr.Ready() == nil || b.mgr.Ready() == nil {
		t.Error("ready without an etcd session")
	}
	e.Restart(t)
	start = time.Now()
	waitBalanced(t, tr, 15*time.Second, "a", "b")
	t.Logf("balanced again %v after etcd came back", time.Since(start))
	tr.check()
}
