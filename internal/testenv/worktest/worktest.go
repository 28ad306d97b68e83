// Package worktest plays the parts around a worker in tests: it puts tasks
// into the fired state in Redis and produces them to Kafka in the pinned
// record format (what the event processes do), and reads topics back with an
// independent client.
package worktest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/delayq/delayq/internal/cli/kfakefix"
	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// Message is the Kafka record of a fired task in the pinned format
// (record.Encode with the default topic task.DefaultTopic), as an event
// process produces it, without the dq-shard and dq-token headers.
func Message(t *task.Task, firedAt time.Time) kafka.Message {
	return record.Encode(t, task.DefaultTopic, firedAt)
}

// NewWriter is a synchronous kafka-go writer (acks from all replicas, 2 ms
// batches, hashed by key) for messages that name their topic.
func NewWriter(tb testing.TB, brokers []string) *kafka.Writer {
	tb.Helper()
	tr := &kafka.Transport{}
	w := &kafka.Writer{
		Transport: tr, Addr: kafka.TCP(brokers...), Balancer: &kafka.Hash{}, RequiredAcks: kafka.RequireAll,
		BatchTimeout: 2 * time.Millisecond, BatchBytes: 8 << 20, WriteTimeout: 10 * time.Second,
	}
	tb.Cleanup(func() { _ = w.Close(); tr.CloseIdleConnections() })
	return w
}

// Firer moves due tasks from Redis to Kafka like an event process: Take
// (scheduled -> firing, generation + 1), produce in the pinned format, Ack
// (-> fired). It has no leader election: run one per namespace.
type Firer struct {
	Store  *redisstore.Store
	Writer *kafka.Writer
	Token  int64 // fencing token; default 1
}

// Once fires every task due now, in all shards, and reports how many.
func (f *Firer) Once(ctx context.Context) (int, error) {
	token := max(f.Token, 1)
	n := 0
	for sh := range f.Store.Shards() {
		for {
			tk, err := f.Store.Take(ctx, sh, token, 200, 30*time.Second)
			if err != nil {
				return n, err
			}
			if len(tk.Tasks) == 0 {
				break
			}
			msgs := make([]kafka.Message, 0, len(tk.Tasks))
			for _, t := range tk.Tasks {
				if t.LastError != "" {
					continue
				}
				msgs = append(msgs, Message(t, tk.Now))
			}
			if err := f.Writer.WriteMessages(ctx, msgs...); err != nil {
				return n, fmt.Errorf("produce: %w", err)
			}
			if _, _, err := f.Store.Settle(ctx, sh, token, tk.Lease, nil); err != nil {
				return n, err
			}
			n += len(msgs)
		}
	}
	return n, nil
}

// Start runs the firer (Run) until the test ends; an error of Run fails
// the test.
func (f *Firer) Start(tb testing.TB) {
	ctx, cancel := context.WithCancel(tb.Context())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := f.Run(ctx); err != nil {
			tb.Errorf("firer: %v", err)
		}
	})
	tb.Cleanup(func() { cancel(); wg.Wait() })
}

// Run fires due tasks every 10ms until ctx ends.
func (f *Firer) Run(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if _, err := f.Once(ctx); err != nil && ctx.Err() == nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Schedule stores tasks due now (or at their DueAt when set) and fails the
// test on any error.
func Schedule(tb testing.TB, s *redisstore.Store, tasks ...*task.Task) {
	tb.Helper()
	subs := make([]redisstore.Submit, len(tasks))
	for i, t := range tasks {
		subs[i] = redisstore.Submit{Task: t, Relative: t.DueAt.IsZero()}
		if t.DueAt.IsZero() {
			t.DueAt = time.Now() // only to pass validation; Relative uses Redis' clock
		}
	}
	for i := 0; i < len(subs); i += 500 {
		res, err := s.Schedule(tb.Context(), subs[i:min(i+500, len(subs))])
		if err != nil {
			tb.Fatalf("worktest: schedule: %v", err)
		}
		for _, r := range res {
			if r.Err != nil || r.Outcome != redisstore.Created {
				tb.Fatalf("worktest: schedule %s: %v %v", r.ID, r.Outcome, r.Err)
			}
		}
	}
}

// Fire schedules tasks due now and fires them at once (Take, produce, Ack).
func Fire(tb testing.TB, f *Firer, tasks ...*task.Task) {
	tb.Helper()
	Schedule(tb, f.Store, tasks...)
	if _, err := f.Once(tb.Context()); err != nil {
		tb.Fatalf("worktest: fire: %v", err)
	}
}

// SetBrokerConfig sets a broker configuration value on a kfake cluster,
// e.g. "group.min.session.timeout.ms" to allow short test sessions.
func SetBrokerConfig(tb testing.TB, k *testenv.Kafka, name, value string) {
	tb.Helper()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	r := kmsg.NewIncrementalAlterConfigsRequestResource()
	r.ResourceType = kmsg.ConfigResourceTypeBroker
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	c.Name, c.Value = name, &value
	r.Configs = append(r.Configs, c)
	req.Resources = append(req.Resources, r)
	resp, err := req.RequestWith(tb.Context(), k.Client(tb))
	if err != nil {
		tb.Fatalf("worktest: alter broker config %s: %v", name, err)
	}
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			tb.Fatalf("worktest: alter broker config %s: %v", name, err)
		}
	}
}

// FastGroups lets consumer groups use session timeouts down to 100ms.
func FastGroups(tb testing.TB, k *testenv.Kafka) {
	tb.Helper()
	SetBrokerConfig(tb, k, "group.min.session.timeout.ms", "100")
}

// StrictKafka starts a kfake broker that never creates a topic by itself,
// as production brokers are configured (testenv.StartKafka's creates one
// on first use, so a consumer group would create a missing topic), with
// topics seeded (4 partitions) and short group sessions allowed
// (FastGroups). It is closed at cleanup.
func StrictKafka(tb testing.TB, topics ...string) *testenv.Kafka {
	tb.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, topics...))
	if err != nil {
		tb.Fatalf("worktest: start kfake cluster: %v", err)
	}
	kfakefix.Install(c)
	tb.Cleanup(c.Close)
	k := &testenv.Kafka{Brokers: c.ListenAddrs(), Cluster: c}
	FastGroups(tb, k)
	return k
}

// ReadTopic reads topic from the start with an independent (franz-go)
// client until it has n records or timeout passes, and returns them.
func ReadTopic(tb testing.TB, k *testenv.Kafka, topic string, n int, timeout time.Duration) []*kgo.Record {
	tb.Helper()
	c := k.Collect(tb, topic)
	testenv.WaitFor(tb, timeout, fmt.Sprintf("worktest: read %d records of %s", n, topic), func() bool { return c.Total() >= n })
	return c.All()
}

// Committed is the group's committed offset per partition of topic (-1:
// none), read with an independent client.
func Committed(tb testing.TB, k *testenv.Kafka, group, topic string) map[int32]int64 {
	tb.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic = topic
	for p := range int32(64) {
		rt.Partitions = append(rt.Partitions, p)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(tb.Context(), k.Client(tb))
	if err != nil {
		tb.Fatalf("worktest: offset fetch %s: %v", group, err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		tb.Fatalf("worktest: offset fetch %s: %v", group, err)
	}
	out := map[int32]int64{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode == 0 {
				out[p.Partition] = p.Offset
			}
		}
	}
	return out
}
