package outcome_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/delayq/delayq/internal/outcome"
	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/testenv"
)

func rec(i int, kind string) record.OutcomeRecord {
	now := time.Now().UTC().Truncate(time.Millisecond)
	return record.OutcomeRecord{
		ID: fmt.Sprintf("task-%d", i), Type: "t", Outcome: kind, Attempt: 1, MaxAttempts: 3,
		DueAt: now.Add(-time.Second), FinishedAt: now, Duration: 5 * time.Millisecond, Shard: i % 4,
		Headers: map[string]string{"n": fmt.Sprint(i)},
	}
}

func newPub(t testing.TB, cfg outcome.Config) (*outcome.Publisher, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	p, err := outcome.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 5*time.Second)
		defer cancel()
		_ = p.Close(ctx)
	})
	return p, reg
}

func dropped(reg *prometheus.Registry, reason string) float64 {
	return sumOf(reg, "delayq_outcomes_dropped_total", "reason", reason)
}

func published(reg *prometheus.Registry, kind string) float64 {
	return sumOf(reg, "delayq_outcomes_published_total", "outcome", kind)
}

func sumOf(reg *prometheus.Registry, name, label, value string) float64 {
	v, ok := testenv.MetricValue(reg, name, label, value)
	if !ok {
		return -1
	}
	return v
}

// Every published record reaches the topic once, parses back to what was
// published, and is counted by outcome.
func TestPublisherWrites(t *testing.T) {
	topic := "outcomes.writes"
	k := testenv.StartKafka(t, topic)
	col := k.Collect(t, topic)
	p, reg := newPub(t, outcome.Config{Brokers: k.Brokers, Topic: topic})
	kinds := []string{record.OutcomeSucceeded, record.OutcomeFailed, record.OutcomeDead, record.OutcomeCancelled}
	want := map[string]record.OutcomeRecord{}
	for i := range 200 {
		o := rec(i, kinds[i%4])
		want[o.ID] = o
		if !p.Publish(o) {
			t.Fatalf("publish %d dropped", i)
		}
	}
	testenv.WaitFor(t, 10*time.Second, "200 outcome records", func() bool { return col.Total() >= 200 })
	for _, r := range col.All() {
		got := testenv.ParseOutcome(t, r)
		w, ok := want[got.ID]
		if !ok {
			t.Fatalf("unexpected or duplicate record %s", r.Value)
		}
		delete(want, got.ID)
		if got.Outcome != w.Outcome || !got.FinishedAt.Equal(w.FinishedAt) || got.Headers["n"] != w.Headers["n"] || got.Shard != w.Shard {
			t.Errorf("got %+v, want %+v", got, w)
		}
	}
	if len(want) != 0 {
		t.Errorf("%d records missing", len(want))
	}
	// the counter moves when the producer's write returns, which can be
	// after a consumer read the records (seen: 101 of 200 counted when
	// the 200 had been read)
	testenv.WaitFor(t, 10*time.Second, "200 outcome records counted published", func() bool {
		n := 0.0
		for _, kind := range kinds {
			n += published(reg, kind)
		}
		return n >= 200
	})
	for _, kind := range kinds {
		if got := published(reg, kind); got != 50 {
			t.Errorf("published{%s} = %v, want 50", kind, got)
		}
	}
	if got := dropped(reg, outcome.DropQueueFull) + dropped(reg, outcome.DropKafka); got != 0 {
		t.Errorf("dropped %v", got)
	}
}

// blackhole is a TCP listener that accepts connections and never answers:
// a Kafka that hangs.
func blackhole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// With Kafka hanging, Publish never blocks: what the queue cannot hold is
// dropped and counted; Close gives up at its deadline and counts the rest.
func TestPublisherQueueFullDropsWithoutBlocking(t *testing.T) {
	p, reg := newPub(t, outcome.Config{Brokers: []string{blackhole(t)}, Topic: "outcomes.hang", Queue: 8,
		WriteTimeout: time.Minute})
	const n = 5000
	accepted := 0
	for i := range n {
		if p.Publish(rec(i, record.OutcomeSucceeded)) {
			accepted++
		}
	}
	full := dropped(reg, outcome.DropQueueFull)
	// the queue (8) and at most one batch in the writer's hands (500)
	if accepted > 8+500 || full != float64(n-accepted) {
		t.Fatalf("accepted %d, dropped queue_full %v of %d", accepted, full, n)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	lost := dropped(reg, outcome.DropShutdown) + dropped(reg, outcome.DropKafka)
	if lost != float64(accepted) || published(reg, record.OutcomeSucceeded) != 0 {
		t.Errorf("accepted %d, dropped at shutdown/kafka %v, published %v", accepted, lost, published(reg, record.OutcomeSucceeded))
	}
	if p.Publish(rec(0, record.OutcomeDead)) || dropped(reg, outcome.DropClosed) != 1 {
		t.Errorf("publish after close: dropped{closed} = %v", dropped(reg, outcome.DropClosed))
	}
}

// A topic Kafka does not have: writes fail, the records are dropped with
// reason kafka, and Publish still never blocks.
func TestPublisherKafkaRefusesDrops(t *testing.T) {
	k := testenv.StartKafka(t, "other")
	p, reg := newPub(t, outcome.Config{Brokers: k.Brokers, Topic: "outcomes.missing", WriteTimeout: time.Second})
	for i := range 10 {
		if !p.Publish(rec(i, record.OutcomeDead)) {
			t.Fatal("dropped at publish")
		}
	}
	testenv.WaitFor(t, 30*time.Second, "10 records dropped with reason kafka", func() bool {
		return dropped(reg, outcome.DropKafka) == 10
	})
	if got := published(reg, record.OutcomeDead); got != 0 {
		t.Errorf("published %v", got)
	}
}

// With Create the topic is created, then written.
func TestPublisherCreatesTopic(t *testing.T) {
	k := testenv.StartKafka(t, "other")
	topic := "outcomes.created"
	p, reg := newPub(t, outcome.Config{Brokers: k.Brokers, Topic: topic, Create: true, Partitions: 3})
	testenv.WaitFor(t, 10*time.Second, "topic created", func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		parts, err := partitions(ctx, k.Brokers, topic)
		return err == nil && parts == 3
	})
	testenv.WaitFor(t, 20*time.Second, "a record published", func() bool {
		if published(reg, record.OutcomeCancelled) >= 1 {
			return true
		}
		p.Publish(rec(1, record.OutcomeCancelled))
		return false
	})
}

// A disabled publisher (no topic) is nil and does nothing.
func TestPublisherDisabled(t *testing.T) {
	p, err := outcome.New(t.Context(), outcome.Config{Topic: ""})
	if err != nil || p != nil {
		t.Fatalf("got %v, %v", p, err)
	}
	if p.Publish(rec(1, record.OutcomeDead)) || p.Topic() != "" || p.Close(t.Context()) != nil {
		t.Error("a nil publisher did something")
	}
	if p, err := outcome.New(t.Context(), outcome.Config{Topic: outcome.Off, Brokers: []string{"k:9092"}}); err != nil || p != nil {
		t.Errorf("topic %q: %v, %v", outcome.Off, p, err)
	}
	if _, err := outcome.New(t.Context(), outcome.Config{Topic: "x"}); err == nil {
		t.Error("no brokers accepted")
	}
}

// partitions is the partition count of topic (an error when missing).
func partitions(ctx context.Context, brokers []string, topic string) (int, error) {
	cl := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: time.Second, Transport: &kafka.Transport{}}
	defer cl.Transport.(*kafka.Transport).CloseIdleConnections()
	resp, err := cl.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return 0, err
	}
	for _, tp := range resp.Topics {
		if tp.Name == topic && tp.Error == nil {
			return len(tp.Partitions), nil
		}
	}
	return 0, fmt.Errorf("topic %s missing", topic)
}
