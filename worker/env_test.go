package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
	"github.com/delayq/delayq/internal/testenv/worktest"
	"github.com/delayq/delayq/worker"
)

// env is one test's infrastructure (worktest.Env: a redis-server, a kfake
// broker with the task and dead topics, a store in a namespace of its own,
// and a firer playing the event side) and the worker tests' helpers on it.
type env struct{ *worktest.Env }

const shards = 4

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvTopics(t, task.DefaultTopic, "dq.dead")
}

// newEnvTopics is newEnv with a broker holding only the given topics.
func newEnvTopics(t *testing.T, topics ...string) *env {
	t.Helper()
	return &env{worktest.NewEnv(t, shards, topics...)}
}

// config is a worker configuration for tests: fast group timing, small
// backoff, its own metrics registry.
func (e *env) config(t *testing.T, name string) (worker.Config, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	level := slog.LevelWarn
	if os.Getenv("DQ_TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	return worker.Config{
		Brokers:           e.Kafka.Brokers,
		Group:             e.Group,
		Redis:             e.RDB,
		Namespace:         e.NS,
		Shards:            shards,
		Concurrency:       8,
		DefaultTimeout:    5 * time.Second,
		Backoff:           worker.Backoff{Min: 100 * time.Millisecond, Max: 2 * time.Second, Jitter: 0.2}, // attempt delays 80-100ms, 160-200ms, ...
		ClaimMargin:       time.Second,
		CommitInterval:    50 * time.Millisecond,
		ShutdownTimeout:   5 * time.Second,
		SessionTimeout:    time.Second,
		HeartbeatInterval: 100 * time.Millisecond,
		RebalanceTimeout:  2 * time.Second,
		Registerer:        reg,
		InstanceID:        name,
		Logger:            slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("worker", name),
	}, reg
}

// running is a worker started by start.
type running struct {
	w    *worker.Worker
	reg  *prometheus.Registry
	stop func() // cancels Run and waits for it
}

// start runs a worker until stop or the end of the test.
func start(t *testing.T, cfg worker.Config, reg *prometheus.Registry, setup func(w *worker.Worker)) *running {
	t.Helper()
	w, err := worker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	setup(w)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	r := &running{w: w, reg: reg}
	r.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("worker %s: Run: %v", cfg.InstanceID, err)
			}
		})
	}
	t.Cleanup(r.stop)
	testenv.WaitFor(t, 10*time.Second, "worker ready", func() bool { return w.Ready(t.Context()) == nil })
	return r
}

// counter reads delayq_work_handled_total{outcome} summed over types.
func (r *running) handled(t *testing.T, outcome string) float64 {
	t.Helper()
	return metricSum(t, r.reg, "delayq_work_handled_total", map[string]string{"outcome": outcome})
}

func metricSum(t testing.TB, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !matches(m, labels) {
				continue
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return sum
}

func matches(m *dto.Metric, labels map[string]string) bool {
	for k, v := range labels {
		ok := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == k && lp.GetValue() == v {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// ledger counts handler runs per task id and keeps when each started.
type ledger struct {
	mu     sync.Mutex
	runs   map[string][]time.Time
	dues   map[string][]time.Time
	lag    []time.Duration
	byWork map[string]int
}

func newLedger() *ledger {
	return &ledger{runs: map[string][]time.Time{}, dues: map[string][]time.Time{}, byWork: map[string]int{}}
}

func (l *ledger) record(name string, t *worker.Task) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	l.runs[t.ID] = append(l.runs[t.ID], now)
	l.dues[t.ID] = append(l.dues[t.ID], t.DueAt)
	l.lag = append(l.lag, now.Sub(t.DueAt))
	l.byWork[name]++
	return len(l.runs[t.ID])
}

func (l *ledger) count(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.runs[id])
}

func (l *ledger) distinct() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.runs)
}

// twice lists ids that ran more than once.
func (l *ledger) twice() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for id, r := range l.runs {
		if len(r) > 1 {
			out = append(out, fmt.Sprintf("%s×%d", id, len(r)))
		}
	}
	sort.Strings(out)
	return out
}

func (l *ledger) lagPercentiles() (p50, p99, maxLag time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := append([]time.Duration(nil), l.lag...)
	if len(s) == 0 {
		return 0, 0, 0
	}
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)*50/100], s[min(len(s)*99/100, len(s)-1)], s[len(s)-1]
}

// waitState waits until every id has state want in the store.
func newTask(id, typ string) *task.Task {
	return &task.Task{ID: id, Type: typ, Payload: []byte(`{"id":"` + id + `"}`), PayloadJSON: true}
}

var errBoom = errors.New("boom")

func newStore(t *testing.T, e *env) (*redisstore.Store, error) {
	return redisstore.New(t.Context(), e.RDB, redisstore.Options{Namespace: e.NS, Shards: shards})
}

type redisClient = *redis.Client

// fireByHand takes every due task of the store (as a leader would) and
// returns their Kafka records without writing them.
func (e *env) fireByHand(t *testing.T) []kafka.Message {
	t.Helper()
	var msgs []kafka.Message
	for sh := range shards {
		tk, err := e.Store.Take(t.Context(), sh, 1, 1000, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, ft := range tk.Tasks {
			msgs = append(msgs, worktest.Message(ft, tk.Now))
		}
		if len(tk.Tasks) > 0 {
			if _, _, err := e.Store.Settle(t.Context(), sh, 1, tk.Lease, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	return msgs
}

// committedTotal sums the committed offsets of the group on the task topic.
func (e *env) committedTotal(t *testing.T) int64 {
	t.Helper()
	total := int64(0)
	for _, off := range worktest.Committed(t, e.Kafka, e.Group, task.DefaultTopic) {
		total += max(off, 0)
	}
	return total
}
