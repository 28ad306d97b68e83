package fire

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

func hdr(r *kgo.Record, k string) string {
	v, _ := testenv.Header(r, k)
	return v
}

func hdrInt(t testing.TB, r *kgo.Record, k string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(hdr(r, k), 10, 64)
	if err != nil {
		t.Fatalf("record %s: header %s=%q: %v", hdr(r, record.HeaderID), k, hdr(r, k), err)
	}
	return v
}

var nsSeq struct {
	sync.Mutex
	n int
}

// uniqueNS isolates a test in a shared Redis.
func uniqueNS(prefix string) string {
	nsSeq.Lock()
	defer nsSeq.Unlock()
	nsSeq.n++
	return fmt.Sprintf("%s%d", prefix, nsSeq.n)
}

func newStore(t *testing.T, r *testenv.Redis, ns string, shards int) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(t.Context(), r.Client(t), redisstore.Options{Namespace: ns, Shards: shards})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// schedule schedules tasks due delay from Redis' now.
func schedule(t *testing.T, s *redisstore.Store, delay time.Duration, tasks ...*task.Task) {
	t.Helper()
	subs := make([]redisstore.Submit, len(tasks))
	for i, tk := range tasks {
		if tk.DueAt.IsZero() {
			tk.DueAt = time.Now().Add(delay)
		}
		subs[i] = redisstore.Submit{Task: tk, Delay: delay, Relative: true}
	}
	res, err := s.Schedule(t.Context(), subs)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil || r.Outcome != redisstore.Created {
			t.Fatalf("schedule %s: %v %v", r.ID, r.Outcome, r.Err)
		}
	}
}

// running is a poller started by runPoller.
type running struct {
	done chan struct{}
	err  error
}

// runPoller runs p until the test ends (or p returns).
func runPoller(t *testing.T, p *Poller) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	r := &running{done: make(chan struct{})}
	go func() { r.err = p.Run(ctx); close(r.done) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(10 * time.Second):
			t.Errorf("poller of shard %d did not stop", p.cfg.Shard)
		}
	})
	return r
}

// testBucket is redisstore's bucketOf (the store keeps it unexported).
func testBucket(id string) int {
	var h uint64
	for i := 0; i < len(id); i++ {
		h = (h*31 + uint64(id[i])) % 2147483647
	}
	return int(h % redisstore.BucketsPerShard)
}

// metricValue reads a counter or gauge.
func metricValue(c prometheus.Metric) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}

// histCount is a histogram's sample count.
func histCount(h prometheus.Histogram) uint64 {
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		panic(err)
	}
	return m.Histogram.GetSampleCount()
}

// hookStore is the poller's store with test hooks around its calls: the
// poller itself has none. Every field may be nil.
type hookStore struct {
	Store
	// beforeTake runs before every take.
	beforeTake func()
	// beforeAck runs after Kafka answered, before the batch's first
	// settle (SettlePoison or SettleAcks), with the batch's tasks; it may
	// block (a paused leader). It runs on the batch's goroutine.
	beforeAck func(ctx context.Context, tasks []*task.Task)

	mu    sync.Mutex
	taken map[string][]*task.Task // lease -> tasks, until its first settle
}

// withHooks makes cfg's store run the hooks.
func withHooks(cfg *Config, h *hookStore) {
	h.Store = cfg.Store
	cfg.Store = h
}

func (h *hookStore) TakeAhead(ctx context.Context, shard int, token int64, limit int, lease, ahead time.Duration) (redisstore.Taken, error) {
	if h.beforeTake != nil {
		h.beforeTake()
	}
	taken, err := h.Store.TakeAhead(ctx, shard, token, limit, lease, ahead)
	if err == nil && len(taken.Tasks) > 0 && h.beforeAck != nil {
		h.mu.Lock()
		if h.taken == nil {
			h.taken = map[string][]*task.Task{}
		}
		h.taken[taken.Lease] = taken.Tasks
		h.mu.Unlock()
	}
	return taken, err
}

// acking runs beforeAck at the first settle of a take.
func (h *hookStore) acking(ctx context.Context, lease string) {
	h.mu.Lock()
	tasks, ok := h.taken[lease]
	delete(h.taken, lease)
	h.mu.Unlock()
	if ok {
		h.beforeAck(ctx, tasks)
	}
}

func (h *hookStore) SettlePoison(ctx context.Context, shard int, token int64, lease string, tasks []redisstore.Poison) ([]redisstore.PoisonOutcome, error) {
	h.acking(ctx, lease)
	return h.Store.SettlePoison(ctx, shard, token, lease, tasks)
}

func (h *hookStore) SettleAcks(ctx context.Context, shard int, token int64, lease string, failed []redisstore.Fired, acks []redisstore.Ack) (redisstore.Settled, error) {
	h.acking(ctx, lease)
	return h.Store.SettleAcks(ctx, shard, token, lease, failed, acks)
}
