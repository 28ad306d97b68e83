package fire

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/delayq/delayq/internal/testenv"
)

func TestKafkaFailsOnlyTheRecordsKafkaRefuses(t *testing.T) {
	t.Parallel()
	k := testenv.StartKafka(t, "good.topic", "refused.topic")
	k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "refused.topic", Err: kerr.InvalidRecord, Count: -1})
	p := NewKafka(KafkaConfig{Brokers: k.Brokers, MaxAttempts: 2, WriteTimeout: 2 * time.Second})
	defer p.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	msgs := []kafka.Message{
		{Topic: "good.topic", Key: []byte("a"), Value: []byte("1")},
		{Topic: "missing.topic", Key: []byte("b"), Value: []byte("2")}, // auto-creation is off
		{Topic: "refused.topic", Key: []byte("c"), Value: []byte("3")},
		{Topic: "good.topic", Key: []byte("d"), Value: make([]byte, 2<<20)}, // larger than a batch may be
		{Topic: "good.topic", Key: []byte("e"), Value: []byte("5")},
	}
	errs := p.Produce(ctx, msgs)
	if errs[0] != nil || errs[4] != nil {
		t.Fatalf("good records failed: %v", errs)
	}
	if Refusal(errs[1]) != RefusedUnknownTopic {
		t.Errorf("record to a missing topic: %v (%q), want a refusal %q (the poller's grace decides)", errs[1], Refusal(errs[1]), RefusedUnknownTopic)
	}
	if Refusal(errs[2]) != RefusedInvalidRecord {
		t.Errorf("refused record: %v, want a permanent error", errs[2])
	}
	var tooLarge kafka.MessageTooLargeError
	if !errors.As(errs[3], &tooLarge) || !IsPermanent(errs[3]) {
		t.Errorf("oversized record: %v, want MessageTooLargeError", errs[3])
	}
	if k.Cluster.TopicInfo("missing.topic") != nil {
		t.Error("the writer created a topic although auto-creation is off")
	}
}

func TestRefusalClassifiesKafkaErrors(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{kafka.UnknownTopicOrPartition, RefusedUnknownTopic},
		{fmt.Errorf("write: %w", kafka.MessageSizeTooLarge), RefusedTooLarge},
		{kafka.WriteErrors{kafka.RecordListTooLarge}[0], RefusedTooLarge},
		{kafka.MessageTooLargeError{}, RefusedTooLarge},
		{kafka.InvalidTopic, RefusedInvalidTopic},
		{kafka.InvalidRecord, RefusedInvalidRecord},
		{kafka.TopicAuthorizationFailed, RefusedNotAuthorized},
		{kafka.NotEnoughReplicas, ""},
		{kafka.RequestTimedOut, ""},
		{kafka.LeaderNotAvailable, ""},
		{context.DeadlineExceeded, ""},
		{errors.New("connection refused"), ""},
	} {
		if got := Refusal(c.err); got != c.want {
			t.Errorf("Refusal(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

// createTopicWith creates a topic with topic configs (kfake honours
// max.message.bytes per topic).
func createTopicWith(t *testing.T, k *testenv.Kafka, topic string, partitions int, cfg map[string]string) {
	t.Helper()
	tc := kafka.TopicConfig{Topic: topic, NumPartitions: partitions, ReplicationFactor: 1}
	for n, v := range cfg {
		tc.ConfigEntries = append(tc.ConfigEntries, kafka.ConfigEntry{ConfigName: n, ConfigValue: v})
	}
	tr := k.KafkaGoTransport(t)
	cl := &kafka.Client{Addr: kafka.TCP(k.Brokers...), Transport: tr}
	resp, err := cl.CreateTopics(t.Context(), &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{tc}})
	if err != nil {
		t.Fatal(err)
	}
	if err := resp.Errors[topic]; err != nil {
		t.Fatalf("create %s: %v", topic, err)
	}
}

// A broker refuses a whole partition batch for one record over its
// max.message.bytes: only that record keeps the error, the ones that
// shared its batch are written.
func TestKafkaIsolatesARecordTheBrokerRefusesAsTooLarge(t *testing.T) {
	t.Parallel()
	k := testenv.StartKafka(t)
	createTopicWith(t, k, "small.topic", 1, map[string]string{"max.message.bytes": "20000"})
	p := NewKafka(KafkaConfig{Brokers: k.Brokers, MaxAttempts: 2, WriteTimeout: 2 * time.Second, BatchSize: 500})
	defer p.Close()
	var msgs []kafka.Message
	for i := range 40 {
		msgs = append(msgs, kafka.Message{Topic: "small.topic", Key: []byte(strconv.Itoa(i)), Value: []byte("small")})
	}
	const big = 17
	msgs[big].Value = make([]byte, 50000) // under the writer's limit, over the topic's
	errs := p.Produce(t.Context(), msgs)
	for i, e := range errs {
		switch {
		case i == big && Refusal(e) != RefusedTooLarge:
			t.Errorf("oversized record: %v, want %s", e, RefusedTooLarge)
		case i != big && e != nil:
			t.Errorf("record %d shared a batch with the oversized one and failed: %v", i, e)
		}
	}
}

// The shared writer batches the records of concurrent calls (the pollers
// of other shards) into one partition batch: a call whose one small
// record shared a batch with another call's oversized one gets the
// broker's "too large" for it. It must be written alone before the error
// counts: a chaos run (seed 616857356) saw a healthy task made dead at its
// first refusal, Kafka being slow enough for the grace to have passed.
func TestKafkaIsolatesASingleRecordRefusedForAnotherCallsOversizedOne(t *testing.T) {
	t.Parallel()
	k := testenv.StartKafka(t)
	createTopicWith(t, k, "small.topic", 1, map[string]string{"max.message.bytes": "20000"})
	// a batch timeout long enough that both calls' records wait in the
	// same partition batch
	p := NewKafka(KafkaConfig{Brokers: k.Brokers, MaxAttempts: 2, WriteTimeout: 5 * time.Second, BatchSize: 500, BatchTimeout: 300 * time.Millisecond})
	defer p.Close()
	for try := range 3 {
		var bigErr []error
		done := make(chan struct{})
		go func() {
			defer close(done)
			bigErr = p.Produce(t.Context(), []kafka.Message{{Topic: "small.topic", Key: []byte("big"), Value: make([]byte, 50000)}})
		}()
		time.Sleep(20 * time.Millisecond) // inside the other call's batch timeout
		small := p.Produce(t.Context(), []kafka.Message{{Topic: "small.topic", Key: []byte("small"), Value: []byte("small " + strconv.Itoa(try))}})
		<-done
		if small[0] != nil {
			t.Fatalf("try %d: the small record failed with the other call's oversized one: %v", try, small[0])
		}
		if Refusal(bigErr[0]) != RefusedTooLarge {
			t.Fatalf("try %d: oversized record: %v, want %s", try, bigErr[0], RefusedTooLarge)
		}
	}
}

// AutoCreate creates a missing topic on first use with the configured
// partition count, and the records are written.
func TestKafkaAutoCreateCreatesTopicsWithTheConfiguredPartitions(t *testing.T) {
	t.Parallel()
	k := testenv.StartKafka(t)
	p := NewKafka(KafkaConfig{Brokers: k.Brokers, MaxAttempts: 2, WriteTimeout: 2 * time.Second, AutoCreate: true, Partitions: 3})
	defer p.Close()
	errs := p.Produce(t.Context(), []kafka.Message{{Topic: "first.use", Value: []byte("v")}})
	if errs[0] != nil {
		t.Fatalf("write to a topic created on first use: %v", errs[0])
	}
	if ps := k.Cluster.PartitionInfos("first.use"); len(ps) != 3 {
		t.Fatalf("topic created on first use: %d partitions, want 3", len(ps))
	}
}

// Takes of at most smallTake records go through the small writer (its
// partition batches are allocated for smallTake messages, not BatchSize),
// larger ones through the main writer; both are confirmed, one request
// per partition.
func TestKafkaSmallTakesUseTheSmallWriter(t *testing.T) {
	t.Parallel()
	k := testenv.StartKafka(t, "takes.topic")
	p := NewKafka(KafkaConfig{Brokers: k.Brokers, MaxAttempts: 2, WriteTimeout: 2 * time.Second, BatchSize: 500})
	defer p.Close()
	if p.small == nil {
		t.Fatal("no small writer with BatchSize 500")
	}
	take := func(n int) []kafka.Message {
		msgs := make([]kafka.Message, n)
		for i := range msgs {
			msgs[i] = kafka.Message{Topic: "takes.topic", Key: []byte(strconv.Itoa(i)), Value: []byte("v")}
		}
		return msgs
	}
	for _, c := range []struct {
		n     int
		small bool
	}{{1, true}, {smallTake, true}, {smallTake + 1, false}, {500, false}} {
		_, _ = p.small.Stats(), p.w.Stats() // reset the counters
		for i, e := range p.Produce(t.Context(), take(c.n)) {
			if e != nil {
				t.Fatalf("take of %d: record %d: %v", c.n, i, e)
			}
		}
		s, w := p.small.Stats(), p.w.Stats()
		if c.small && (s.Messages != int64(c.n) || w.Messages != 0) || !c.small && (w.Messages != int64(c.n) || s.Messages != 0) {
			t.Errorf("take of %d: small writer wrote %d, main writer %d", c.n, s.Messages, w.Messages)
		}
		// one request per partition (StartKafka: 4 partitions)
		if got := s.Writes + w.Writes; got > 4 {
			t.Errorf("take of %d: %d produce requests, want at most one per partition (4)", c.n, got)
		}
	}
	if q := NewKafka(KafkaConfig{Brokers: k.Brokers, BatchSize: smallTake}); q.small != nil {
		t.Error("a small writer although BatchSize is not above smallTake")
	} else {
		_ = q.Close()
	}
}
