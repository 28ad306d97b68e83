package event

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// pollerWatch is a test-only instrument shared by every process of a test:
// which pollers run per shard, checked on every take. A second poller of a
// shard, or a token that does not grow, is a violation.
type pollerWatch struct {
	mu         sync.Mutex
	active     map[int]map[int64]bool // shard -> running tokens
	last       map[int]int64
	takes      atomic.Int64
	violations []string
}

func newPollerWatch() *pollerWatch {
	return &pollerWatch{active: map[int]map[int64]bool{}, last: map[int]int64{}}
}

func (pw *pollerWatch) hooks() *pollerHooks {
	return &pollerHooks{
		Started: func(shard int, token int64) {
			pw.mu.Lock()
			defer pw.mu.Unlock()
			if pw.active[shard] == nil {
				pw.active[shard] = map[int64]bool{}
			}
			if len(pw.active[shard]) > 0 {
				pw.violations = append(pw.violations, fmt.Sprintf("shard %d: poller %d starts while %v run", shard, token, pw.active[shard]))
			}
			if token <= pw.last[shard] {
				pw.violations = append(pw.violations, fmt.Sprintf("shard %d: token %d after %d", shard, token, pw.last[shard]))
			}
			pw.active[shard][token] = true
			pw.last[shard] = token
		},
		BeforeTake: func(shard int, token int64) {
			pw.takes.Add(1)
			pw.mu.Lock()
			defer pw.mu.Unlock()
			if n := len(pw.active[shard]); n != 1 || !pw.active[shard][token] {
				pw.violations = append(pw.violations, fmt.Sprintf("shard %d: take by %d while running %v", shard, token, pw.active[shard]))
			}
		},
		Stopped: func(shard int, token int64, _ error) {
			pw.mu.Lock()
			defer pw.mu.Unlock()
			delete(pw.active[shard], token)
		},
	}
}

func (pw *pollerWatch) check(t *testing.T) {
	t.Helper()
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if len(pw.violations) > 0 {
		t.Errorf("%d violations of one poller per shard:\n%s", len(pw.violations), strings.Join(pw.violations[:min(10, len(pw.violations))], "\n"))
	}
}

func (pw *pollerWatch) running() int {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	n := 0
	for _, m := range pw.active {
		n += len(m)
	}
	return n
}

// firstFiredAfter is the earliest dq-fired-at after t among the records.
func firstFiredAfter(c *testenv.Collector, at time.Time) (time.Duration, bool) {
	best, found := time.Duration(0), false
	for _, rs := range c.ByID() {
		for _, r := range rs {
			f := time.UnixMilli(hdrInt(r, record.HeaderFiredAt))
			if f.After(at) && (!found || f.Sub(at) < best) {
				best, found = f.Sub(at), true
			}
		}
	}
	return best, found
}

// TestOutagesKafkaThenEtcd: Kafka refuses every produce for 10s, then etcd
// is down for 10s, while tasks fall due all along. Nothing is lost, nothing
// fires early, firing resumes by itself after each outage, and no shard
// ever has two running pollers.
func TestOutagesKafkaThenEtcd(t *testing.T) {
	t.Parallel() // runs alongside the other parallel scenarios, after the sequential ones
	const (
		n      = 6000
		outage = 10 * time.Second
	)
	w := newWorld(t, 16)
	recs := w.collect(task.DefaultTopic)
	pw := newPollerWatch()
	a := w.startApp("out-a", withPollerHooks(pw.hooks()))
	b := w.startApp("out-b", withPollerHooks(pw.hooks()))
	w.waitBalanced(15*time.Second, a, b)

	t0 := time.Now().Add(time.Second)
	tasks := w.scheduleSpread("outage", n, t0, 30*time.Second)

	// Kafka: every produce request closes its connection (the outcome of
	// what was sent is unknown to the writer).
	var kafkaDown atomic.Bool
	var refused atomic.Int64
	w.kafka.Cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		w.kafka.Cluster.KeepControl()
		if kafkaDown.Load() {
			refused.Add(1)
			return nil, errors.New("broker down"), true
		}
		return nil, nil, false
	})
	waitUntil(t0.Add(2 * time.Second))
	kafkaDown.Store(true)
	downAt := time.Now()
	waitUntil(downAt.Add(outage))
	kafkaDown.Store(false)
	kafkaUp := time.Now()
	say(t, "kafka refused %d produce requests during %v", refused.Load(), kafkaUp.Sub(downAt).Round(time.Millisecond))
	if refused.Load() == 0 {
		t.Fatal("the Kafka outage refused nothing")
	}
	if !poll(15*time.Second, func() bool { _, ok := firstFiredAfter(recs, kafkaUp); return ok }) {
		t.Fatal("firing did not resume after the Kafka outage")
	}
	d, _ := firstFiredAfter(recs, kafkaUp)
	say(t, "firing resumed %v after Kafka came back", d)

	// etcd: down for 10s. Every poller stops within the TTL (+1s for the
	// client's deadline check); leadership comes back after the restart.
	waitUntil(kafkaUp.Add(2 * time.Second))
	w.etcd.Stop(t)
	etcdDown := time.Now()
	if !poll(10*time.Second, func() bool { return pw.running() == 0 }) {
		t.Fatalf("%d pollers still run %v after etcd went away", pw.running(), time.Since(etcdDown))
	}
	say(t, "all pollers stopped %v after etcd went away (session TTL 3s)", time.Since(etcdDown).Round(time.Millisecond))
	takes := pw.takes.Load()
	waitUntil(etcdDown.Add(outage))
	if n := pw.takes.Load() - takes; n != 0 {
		t.Errorf("%d takes while etcd was down and no session existed", n)
	}
	w.etcd.Restart(t)
	etcdUp := time.Now()
	if !poll(20*time.Second, func() bool { _, ok := firstFiredAfter(recs, etcdUp); return ok }) {
		t.Fatal("firing did not resume after the etcd outage")
	}
	d, _ = firstFiredAfter(recs, etcdUp)
	say(t, "firing resumed %v after etcd came back", d)
	w.waitBalanced(15*time.Second, a, b)

	waitAll(t, recs, tasks, 45*time.Second)
	r := check(tasks, recs.ByID())
	r.fail(t)
	pw.check(t)
	p50, p99, mx := quantiles(r.lags)
	say(t, "outages: %d tasks, %d records, %d duplicates, lost 0; lag p50=%v p99=%v max=%v (tasks due during the outages wait for them)",
		r.tasks, r.records, r.dups, p50, p99, mx)
	say(t, "produce errors a=%v b=%v, lease reclaims a=%v b=%v",
		metric(t, a.Addr(), "delayq_produce_errors_total"), metric(t, b.Addr(), "delayq_produce_errors_total"),
		metric(t, a.Addr(), "delayq_lease_reclaims_total"), metric(t, b.Addr(), "delayq_lease_reclaims_total"))
}

// waitUntil blocks until the wall clock reaches at (a scenario's timeline,
// not a wait for a condition).
func waitUntil(at time.Time) {
	if d := time.Until(at); d > 0 {
		timer := time.NewTimer(d)
		<-timer.C
	}
}
