package event

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/delayq/delayq/internal/election"
	"github.com/delayq/delayq/internal/event/fire"
	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// eventBin is the event binary built once for the tests that run real
// processes.
var eventBin string

func TestMain(m *testing.M) {
	bin, cleanup, err := testenv.BuildBinary("github.com/delayq/delayq/cmd/event")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	eventBin = bin
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	cleanup()
	os.Exit(code)
}

// world is the infrastructure of one scenario: Redis, etcd, Kafka and a
// namespace.
type world struct {
	t      testing.TB
	redis  *testenv.Redis
	etcd   *testenv.Etcd
	kafka  *testenv.Kafka
	ns     string
	shards int
	store  *redisstore.Store
	ec     *clientv3.Client
}

var nsCounter atomic.Int64

func newWorld(t testing.TB, shards int) *world {
	t.Helper()
	w := &world{
		t:      t,
		redis:  testenv.StartRedis(t),
		etcd:   testenv.StartEtcd(t),
		kafka:  testenv.StartKafka(t, task.DefaultTopic, "dq.dead"),
		ns:     fmt.Sprintf("ev%d", nsCounter.Add(1)),
		shards: shards,
	}
	s, err := redisstore.New(t.Context(), w.redis.Client(t), redisstore.Options{Namespace: w.ns, Shards: shards})
	if err != nil {
		t.Fatal(err)
	}
	w.store = s
	w.ec = w.etcd.Client(t)
	return w
}

// config is an app configuration for this world.
func (w *world) config(id string) Config {
	c := DefaultConfig()
	c.Namespace = w.ns
	c.Shards = w.shards
	c.RedisAddrs = []string{w.redis.Addr}
	c.EtcdEndpoints = w.etcd.Endpoints
	c.KafkaBrokers = w.kafka.Brokers
	c.HTTPAddr = "127.0.0.1:0"
	c.ProcessID = id
	c.ShutdownGrace = 10 * time.Second
	return c
}

func testLogger(id string) *slog.Logger {
	if os.Getenv("DQ_TEST_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("proc", id)
}

// app is an in-process event process.
type app struct {
	*App
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

func (w *world) startApp(id string, opts ...Option) *app {
	return w.startAppConfig(w.config(id), opts...)
}

func (w *world) startAppConfig(cfg Config, opts ...Option) *app {
	t := w.t
	t.Helper()
	a, err := New(t.Context(), cfg, testLogger(cfg.ProcessID))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range opts {
		o(a)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ap := &app{App: a, cancel: cancel, done: make(chan struct{})}
	go func() { ap.err = a.Run(ctx); close(ap.done) }()
	t.Cleanup(func() { ap.stop(t) })
	return ap
}

func (a *app) stop(t testing.TB) {
	t.Helper()
	a.cancel()
	select {
	case <-a.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("app %s did not stop", a.ProcessID())
	}
	if a.err != nil {
		t.Errorf("app %s: %v", a.ProcessID(), a.err)
	}
}

// leaders reads etcd: shard -> process id of its leader.
func (w *world) leaders() map[int]string {
	w.t.Helper()
	resp, err := w.ec.Get(w.t.Context(), election.ShardsPrefix(w.ns), clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		w.t.Fatal(err)
	}
	out := map[int]string{}
	for _, kv := range resp.Kvs {
		if s, ok := election.ParseElectionKey(w.ns, string(kv.Key)); ok {
			if _, seen := out[s]; !seen {
				out[s] = string(kv.Value)
			}
		}
	}
	return out
}

// countsOf is shards per process.
func countsOf(l map[int]string) map[string]int {
	c := map[string]int{}
	for _, id := range l {
		c[id]++
	}
	return c
}

// waitBalanced waits until etcd shows every shard led by the given
// processes, within one shard of each other, and each process' pollers run
// (its Leading matches).
func (w *world) waitBalanced(timeout time.Duration, apps ...interface{ Leading() []int }) map[string]int {
	w.t.Helper()
	var last map[string]int
	ok := poll(timeout, func() bool {
		l := w.leaders()
		c := countsOf(l)
		last = c
		if len(l) != w.shards || len(c) != len(apps) {
			return false
		}
		lo, hi := w.shards, 0
		for _, n := range c {
			lo, hi = min(lo, n), max(hi, n)
		}
		led := 0
		for _, a := range apps {
			led += len(a.Leading())
		}
		return hi-lo <= 1 && led == w.shards
	})
	if !ok {
		w.t.Fatalf("not balanced within %v: %v", timeout, last)
	}
	return last
}

func poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// scheduleSpread schedules n tasks "<prefix>-<i>" due evenly between from
// and from+over (absolute due times), in chunks.
func (w *world) scheduleSpread(prefix string, n int, from time.Time, over time.Duration) []*task.Task {
	w.t.Helper()
	tasks := make([]*task.Task, n)
	for i := range tasks {
		due := from.Add(time.Duration(int64(over) * int64(i) / int64(max(n, 1))))
		tasks[i] = &task.Task{
			ID:      fmt.Sprintf("%s-%06d", prefix, i),
			Type:    "test.fire",
			Payload: []byte(fmt.Sprintf(`{"i":%d,"bin":"\u00ff"}`, i)),
			DueAt:   due.Truncate(time.Millisecond),
			Headers: map[string]string{"x-test": prefix},
		}
		if i%2 == 0 {
			tasks[i].PayloadJSON = true
		} else {
			tasks[i].Payload = []byte{byte(i), 0, 0xff, byte(i >> 8)}
		}
	}
	w.schedule(tasks)
	return tasks
}

func (w *world) schedule(tasks []*task.Task) {
	w.t.Helper()
	const chunk = 2000
	for i := 0; i < len(tasks); i += chunk {
		part := tasks[i:min(i+chunk, len(tasks))]
		subs := make([]redisstore.Submit, len(part))
		for j, tk := range part {
			subs[j] = redisstore.Submit{Task: tk}
		}
		res, err := w.store.Schedule(w.t.Context(), subs)
		if err != nil {
			w.t.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				w.t.Fatalf("schedule %s: %v", r.ID, r.Err)
			}
		}
	}
}

// collect reads topics from the start with an independent franz-go client.
func (w *world) collect(topics ...string) *testenv.Collector {
	w.t.Helper()
	return w.kafka.Collect(w.t, topics...)
}

// waitAll waits until every task reached Kafka.
func waitAll(t testing.TB, c *testenv.Collector, tasks []*task.Task, timeout time.Duration) {
	t.Helper()
	if !poll(timeout, func() bool { return c.Distinct() >= len(tasks) }) {
		snap := c.ByID()
		var missing []string
		for _, tk := range tasks {
			if len(snap[tk.ID]) == 0 {
				missing = append(missing, tk.ID)
			}
		}
		t.Fatalf("%d of %d tasks never reached Kafka within %v (first: %v)", len(missing), len(tasks), timeout, missing[:min(len(missing), 10)])
	}
}

func hdr(r *kgo.Record, k string) string {
	v, _ := testenv.Header(r, k)
	return v
}

func hdrInt(r *kgo.Record, k string) int64 {
	v, _ := strconv.ParseInt(hdr(r, k), 10, 64)
	return v
}

// report is what a check of the fired records found.
type report struct {
	tasks, records, dups int
	lags                 []time.Duration // record timestamp - due, first copy of each task
	early                []string
	bad                  []string
}

// check verifies every task against its records: at least one copy, none
// before its due time (dq-fired-at and the record timestamp), the pinned
// headers, the payload unchanged.
func check(tasks []*task.Task, snap map[string][]*kgo.Record) report {
	var r report
	r.tasks = len(tasks)
	for _, tk := range tasks {
		recs := snap[tk.ID]
		r.records += len(recs)
		if len(recs) == 0 {
			r.bad = append(r.bad, tk.ID+": missing")
			continue
		}
		r.dups += len(recs) - 1
		due := task.Millis(tk.DueAt)
		first := recs[0]
		for _, rec := range recs {
			if rec.Timestamp.Before(first.Timestamp) {
				first = rec
			}
			if hdrInt(rec, record.HeaderFiredAt) < due || rec.Timestamp.UnixMilli() < due {
				r.early = append(r.early, fmt.Sprintf("%s: due %d fired-at %s ts %d", tk.ID, due, hdr(rec, record.HeaderFiredAt), rec.Timestamp.UnixMilli()))
			}
			if msg := contract(tk, rec); msg != "" {
				r.bad = append(r.bad, tk.ID+": "+msg)
			}
		}
		r.lags = append(r.lags, first.Timestamp.Sub(tk.DueAt))
	}
	return r
}

// contract checks one record against the pinned record contract.
func contract(tk *task.Task, rec *kgo.Record) string {
	switch {
	case rec.Topic != task.DefaultTopic:
		return "topic " + rec.Topic
	case string(rec.Key) != tk.KafkaKey():
		return "key " + string(rec.Key)
	case string(rec.Value) != string(tk.Payload):
		return fmt.Sprintf("payload %q, want %q", rec.Value, tk.Payload)
	case hdr(rec, record.HeaderID) != tk.ID || hdr(rec, record.HeaderType) != tk.Type:
		return "id/type headers"
	case hdrInt(rec, record.HeaderDueAt) != task.Millis(tk.DueAt):
		return "dq-due-at " + hdr(rec, record.HeaderDueAt)
	case hdr(rec, record.HeaderAttempt) != "1" || hdr(rec, record.HeaderGen) != "0": // a new task, fired (maybe again) without waiting again
		return "attempt/gen " + hdr(rec, record.HeaderAttempt) + "/" + hdr(rec, record.HeaderGen)
	case hdr(rec, record.HeaderContentType) != tk.ContentType():
		return "content type " + hdr(rec, record.HeaderContentType)
	case hdr(rec, record.HeaderMaxAttempts) != strconv.Itoa(tk.Attempts()):
		return "max attempts " + hdr(rec, record.HeaderMaxAttempts)
	case hdr(rec, "x-test") != tk.Headers["x-test"]:
		return "own header x-test"
	case rec.Timestamp.UnixMilli() != hdrInt(rec, record.HeaderFiredAt):
		return "timestamp differs from dq-fired-at"
	}
	return ""
}

func (r report) fail(t testing.TB) {
	t.Helper()
	if len(r.early) > 0 {
		t.Errorf("%d records fired before their due time: %v", len(r.early), r.early[:min(5, len(r.early))])
	}
	if len(r.bad) > 0 {
		t.Errorf("%d records break the contract or are missing: %v", len(r.bad), r.bad[:min(5, len(r.bad))])
	}
}

// quantiles returns p50, p99 and max of ds.
func quantiles(ds []time.Duration) (p50, p99, mx time.Duration) {
	if len(ds) == 0 {
		return
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	q := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return q(0.50), q(0.99), s[len(s)-1]
}

// say prints a figure line to the test log and to stdout.
func say(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	t.Log(msg)
	fmt.Println("[" + t.Name() + "] " + msg)
}

// metric reads one sample from an app's /metrics.
func metric(t testing.TB, addr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	sum := 0.0
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, name+" ") || strings.HasPrefix(line, name+"{") {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			sum += v
		}
	}
	return sum
}

// Option adjusts an App between New and Run.
type Option func(*App)

// pollerHooks let tests watch and pause the pollers of an app (the
// poller has no hooks: withPollerHooks wraps its store and its run).
// Every field may be nil.
type pollerHooks struct {
	// Started runs after Adopt, before the first take.
	Started func(shard int, token int64)
	// BeforeTake runs before every take.
	BeforeTake func(shard int, token int64)
	// BeforeAck runs after Kafka answered, before the batch's first
	// settle; it may block (a paused leader). It runs on the batch's
	// goroutine, with the settle's context.
	BeforeAck func(ctx context.Context, shard int, token int64, tasks []*task.Task)
	// Stopped runs when the poller's Run returned, after every batch
	// finished.
	Stopped func(shard int, token int64, err error)
}

// withPollerHooks installs h in every poller of the app.
func withPollerHooks(h *pollerHooks) Option {
	return func(a *App) {
		poll := a.poll
		a.poll = func(ctx context.Context, cfg fire.Config) error {
			cfg.Store = &hookStore{Store: cfg.Store, h: h, shard: cfg.Shard, token: cfg.Token}
			err := poll(ctx, cfg)
			if h.Stopped != nil {
				h.Stopped(cfg.Shard, cfg.Token, err)
			}
			return err
		}
	}
}

// hookStore is one poller's store running its pollerHooks.
type hookStore struct {
	fire.Store
	h     *pollerHooks
	shard int
	token int64
	mu    sync.Mutex
	taken map[string][]*task.Task // lease -> tasks, until its first settle
}

func (s *hookStore) Adopt(ctx context.Context, shard int, token int64) (int, error) {
	n, err := s.Store.Adopt(ctx, shard, token)
	if err == nil && s.h.Started != nil {
		s.h.Started(shard, token)
	}
	return n, err
}

func (s *hookStore) TakeAhead(ctx context.Context, shard int, token int64, limit int, lease, ahead time.Duration) (redisstore.Taken, error) {
	if s.h.BeforeTake != nil {
		s.h.BeforeTake(shard, token)
	}
	taken, err := s.Store.TakeAhead(ctx, shard, token, limit, lease, ahead)
	if err == nil && len(taken.Tasks) > 0 && s.h.BeforeAck != nil {
		s.mu.Lock()
		if s.taken == nil {
			s.taken = map[string][]*task.Task{}
		}
		s.taken[taken.Lease] = taken.Tasks
		s.mu.Unlock()
	}
	return taken, err
}

// acking runs BeforeAck at the first settle of a take.
func (s *hookStore) acking(ctx context.Context, lease string) {
	s.mu.Lock()
	tasks, ok := s.taken[lease]
	delete(s.taken, lease)
	s.mu.Unlock()
	if ok {
		s.h.BeforeAck(ctx, s.shard, s.token, tasks)
	}
}

func (s *hookStore) SettlePoison(ctx context.Context, shard int, token int64, lease string, tasks []redisstore.Poison) ([]redisstore.PoisonOutcome, error) {
	s.acking(ctx, lease)
	return s.Store.SettlePoison(ctx, shard, token, lease, tasks)
}

func (s *hookStore) SettleAcks(ctx context.Context, shard int, token int64, lease string, failed []redisstore.Fired, acks []redisstore.Ack) (redisstore.Settled, error) {
	s.acking(ctx, lease)
	return s.Store.SettleAcks(ctx, shard, token, lease, failed, acks)
}
