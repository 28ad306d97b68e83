package testenv

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestKafkaGoAgainstKfake(t *testing.T) {
	t.Parallel()
	const (
		topic = "testenv-kafkago"
		group = "testenv-kafkago-group"
		n     = 100
	)
	k := StartKafka(t, topic)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	// Timestamps with millisecond precision: Kafka stores milliseconds.
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	msgs := make([]kafka.Message, n)
	for i := range msgs {
		msgs[i] = kafka.Message{
			Key:   []byte("key-" + strconv.Itoa(i)),
			Value: []byte("value-" + strconv.Itoa(i)),
			Headers: []kafka.Header{
				{Key: "task_id", Value: []byte("t" + strconv.Itoa(i))},
				{Key: "attempt", Value: []byte("1")},
			},
			Time: base.Add(time.Duration(i) * time.Millisecond),
		}
	}

	w := &kafka.Writer{
		Addr:         kafka.TCP(k.Brokers...),
		Transport:    k.KafkaGoTransport(t),
		Topic:        topic,
		RequiredAcks: kafka.RequireAll,
		BatchTimeout: 5 * time.Millisecond,
		Balancer:     &kafka.Hash{},
	}
	t.Cleanup(func() { _ = w.Close() })
	start := time.Now()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatalf("kafka-go WriteMessages: %v", err)
	}
	t.Logf("kafka-go wrote %d messages in %v", n, time.Since(start))

	checkMsg := func(via string, key, value []byte, headers map[string]string, ts time.Time) {
		t.Helper()
		i, err := strconv.Atoi(string(key[len("key-"):]))
		if err != nil || i < 0 || i >= n {
			t.Fatalf("%s: unexpected key %q", via, key)
		}
		if string(value) != "value-"+strconv.Itoa(i) {
			t.Errorf("%s: key %s value = %q", via, key, value)
		}
		if headers["task_id"] != "t"+strconv.Itoa(i) || headers["attempt"] != "1" || len(headers) != 2 {
			t.Errorf("%s: key %s headers = %v", via, key, headers)
		}
		if !ts.Equal(msgs[i].Time) {
			t.Errorf("%s: key %s timestamp = %v, want %v", via, key, ts, msgs[i].Time)
		}
	}

	// kafka-go consumer group: FetchMessage + CommitMessages.
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:     k.Brokers,
		GroupID:     group,
		Topic:       topic,
		StartOffset: kafka.FirstOffset,
		MaxWait:     100 * time.Millisecond,
	})
	t.Cleanup(func() { CloseKafkaGoReader(t, r) })
	start = time.Now()
	seen := map[string]int{} // key -> partition
	for len(seen) < n {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			t.Fatalf("kafka-go FetchMessage after %d messages: %v", len(seen), err)
		}
		hs := map[string]string{}
		for _, h := range m.Headers {
			hs[h.Key] = string(h.Value)
		}
		checkMsg("kafka-go reader", m.Key, m.Value, hs, m.Time)
		if p, dup := seen[string(m.Key)]; dup {
			t.Fatalf("kafka-go reader: key %s delivered twice (partitions %d, %d)", m.Key, p, m.Partition)
		}
		seen[string(m.Key)] = m.Partition
		if err := r.CommitMessages(ctx, m); err != nil {
			t.Fatalf("kafka-go CommitMessages: %v", err)
		}
	}
	t.Logf("kafka-go group reader fetched and committed %d messages in %v", n, time.Since(start))
	partitions := map[int]bool{}
	for _, p := range seen {
		partitions[p] = true
	}
	if len(partitions) < 2 {
		t.Errorf("kafka.Hash spread %d keys over %d partitions, want several", n, len(partitions))
	}

	// The committed offsets, read back with franz-go, cover all n messages.
	cl := k.Client(t)
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("OffsetFetch: %v", err)
	}
	var committed int64
	for _, rt := range resp.Topics {
		for _, p := range rt.Partitions {
			if p.ErrorCode != 0 {
				t.Fatalf("OffsetFetch %s/%d: error code %d", rt.Topic, p.Partition, p.ErrorCode)
			}
			if p.Offset > 0 {
				committed += p.Offset
			}
		}
	}
	if committed != n {
		t.Errorf("committed offsets sum to %d, want %d (%+v)", committed, n, resp.Topics)
	}

	// An independent franz-go consumer sees the same records.
	kc := k.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := 0
	for got < n {
		fs := kc.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("kgo PollFetches after %d records: %v", got, err)
		}
		fs.EachRecord(func(rec *kgo.Record) {
			hs := map[string]string{}
			for _, h := range rec.Headers {
				hs[h.Key] = string(h.Value)
			}
			checkMsg("kgo", rec.Key, rec.Value, hs, rec.Timestamp)
			if p := seen[string(rec.Key)]; int32(p) != rec.Partition {
				t.Errorf("kgo: key %s in partition %d, kafka-go saw %d", rec.Key, rec.Partition, p)
			}
			got++
		})
	}
	if got != n {
		t.Errorf("kgo read %d records, want %d", got, n)
	}

	// A new member of the group resumes after the committed offsets.
	start = time.Now()
	CloseKafkaGoReader(t, r)
	t.Logf("kafka-go Reader.Close (leave group) took %v", time.Since(start))
	more := make([]kafka.Message, 10)
	for i := range more {
		more[i] = kafka.Message{Key: []byte("more-" + strconv.Itoa(i)), Value: []byte("v")}
	}
	if err := w.WriteMessages(ctx, more...); err != nil {
		t.Fatalf("kafka-go WriteMessages: %v", err)
	}
	r2 := kafka.NewReader(kafka.ReaderConfig{Brokers: k.Brokers, GroupID: group, Topic: topic, MaxWait: 100 * time.Millisecond})
	t.Cleanup(func() { CloseKafkaGoReader(t, r2) })
	for i := range more {
		m, err := r2.FetchMessage(ctx)
		if err != nil {
			t.Fatalf("kafka-go FetchMessage after rejoin, message %d: %v", i, err)
		}
		if !strings.HasPrefix(string(m.Key), "more-") {
			t.Fatalf("after rejoin got %q: committed message redelivered", m.Key)
		}
		if err := r2.CommitMessages(ctx, m); err != nil {
			t.Fatalf("kafka-go CommitMessages after rejoin: %v", err)
		}
	}
}

// TestKafkaGoRebalance shows a second kafka-go group member getting
// partitions. The rebalance takes about one HeartbeatInterval (kafka-go's
// default is 3s), because the first member learns of it from a heartbeat.
func TestKafkaGoRebalance(t *testing.T) {
	t.Parallel()
	const topic, group = "testenv-rebalance", "testenv-rebalance-group"
	k := StartKafka(t, topic)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	w := &kafka.Writer{Addr: kafka.TCP(k.Brokers...), Topic: topic, Transport: k.KafkaGoTransport(t),
		BatchTimeout: time.Millisecond, Balancer: &kafka.Hash{}}
	t.Cleanup(func() { _ = w.Close() })

	var mu sync.Mutex
	parts := []map[int]bool{{}, {}}
	owner := map[int]int{}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	consume := func(member int) {
		r := kafka.NewReader(kafka.ReaderConfig{
			Brokers: k.Brokers, GroupID: group, Topic: topic,
			MaxWait:           50 * time.Millisecond,
			HeartbeatInterval: 100 * time.Millisecond,
		})
		wg.Go(func() {
			defer CloseKafkaGoReader(t, r)
			for {
				m, err := r.FetchMessage(ctx)
				if err != nil {
					return
				}
				mu.Lock()
				parts[member][m.Partition] = true
				owner[m.Partition] = member
				mu.Unlock()
				if err := r.CommitMessages(ctx, m); err != nil {
					return
				}
			}
		})
	}
	produce := func() {
		msgs := make([]kafka.Message, 40)
		for i := range msgs {
			msgs[i] = kafka.Message{Key: []byte(strconv.Itoa(i)), Value: []byte("v")}
		}
		if err := w.WriteMessages(ctx, msgs...); err != nil {
			t.Errorf("WriteMessages: %v", err)
		}
	}
	consume(0)
	produce()
	WaitFor(t, 10*time.Second, "first member consumes all 4 partitions", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(parts[0]) == 4
	})
	start := time.Now()
	consume(1)
	WaitFor(t, 10*time.Second, "partitions split between both members", func() bool {
		produce()
		mu.Lock()
		defer mu.Unlock()
		n := map[int]int{}
		for _, m := range owner {
			n[m]++
		}
		return len(parts[1]) > 0 && n[0] > 0 && n[1] > 0
	})
	mu.Lock()
	t.Logf("second member got partitions %v after %v", parts[1], time.Since(start))
	mu.Unlock()
}

// TestKafkaGoWriterAutoCreate shows that kfake honours the per-request
// AllowAutoTopicCreation flag: a kafka-go Writer must set
// AllowAutoTopicCreation to produce to a topic nobody created.
func TestKafkaGoWriterAutoCreate(t *testing.T) {
	t.Parallel()
	k := StartKafka(t)
	msg := kafka.Message{Value: []byte("v")}
	for _, auto := range []bool{false, true} {
		w := &kafka.Writer{Addr: kafka.TCP(k.Brokers...), Topic: "auto-" + strconv.FormatBool(auto),
			Transport: k.KafkaGoTransport(t), AllowAutoTopicCreation: auto, BatchTimeout: time.Millisecond}
		err := w.WriteMessages(t.Context(), msg)
		_ = w.Close()
		if auto && err != nil {
			t.Errorf("AllowAutoTopicCreation=true: %v", err)
		}
		if !auto && !errors.Is(err, kafka.UnknownTopicOrPartition) {
			t.Errorf("AllowAutoTopicCreation=false: err = %v, want UnknownTopicOrPartition", err)
		}
	}
	conn, err := kafka.Dial("tcp", k.Brokers[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ps, err := conn.ReadPartitions("auto-true")
	if err != nil || len(ps) != defaultPartitions {
		t.Errorf("auto-created topic: %d partitions, %v; want %d", len(ps), err, defaultPartitions)
	}
}

func TestKafkaCreateTopic(t *testing.T) {
	t.Parallel()
	k := StartKafkaPartitions(t, 2, "seeded")
	k.CreateTopic(t, "created", 3)
	cl := k.Client(t)
	req := kmsg.NewPtrMetadataRequest()
	for _, name := range []string{"seeded", "created"} {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(name)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(t.Context(), cl)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"seeded": 2, "created": 3}
	for _, rt := range resp.Topics {
		name := *rt.Topic
		if len(rt.Partitions) != want[name] {
			t.Errorf("topic %s has %d partitions, want %d", name, len(rt.Partitions), want[name])
		}
		delete(want, name)
	}
	if len(want) != 0 {
		t.Errorf("topics missing from metadata: %v", fmt.Sprint(want))
	}
}

// TestKafkaGoCompression round-trips every kafka-go codec through kfake.
func TestKafkaGoCompression(t *testing.T) {
	t.Parallel()
	const topic = "testenv-compression"
	k := StartKafkaPartitions(t, 1, topic)
	codecs := []kafka.Compression{kafka.Gzip, kafka.Snappy, kafka.Lz4, kafka.Zstd}
	for _, codec := range codecs {
		w := &kafka.Writer{Addr: kafka.TCP(k.Brokers...), Topic: topic, Transport: k.KafkaGoTransport(t),
			Compression: codec, BatchTimeout: time.Millisecond}
		err := w.WriteMessages(t.Context(), kafka.Message{Value: []byte(codec.String())})
		_ = w.Close()
		if err != nil {
			t.Fatalf("write with %v: %v", codec, err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	kc := k.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var got []string
	for len(got) < len(codecs) {
		fs := kc.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("kgo PollFetches: %v", err)
		}
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	if want := "gzip snappy lz4 zstd"; strings.Join(got, " ") != want {
		t.Errorf("read %q, want %q", strings.Join(got, " "), want)
	}
}

// TestKafkaGoOffsetFetchUnknownGroup pins a kfake behaviour: committed
// offsets of a group that never existed come back as GROUP_ID_NOT_FOUND.
func TestKafkaGoOffsetFetchUnknownGroup(t *testing.T) {
	t.Parallel()
	k := StartKafka(t, "testenv-unknown-group")
	c := &kafka.Client{Addr: kafka.TCP(k.Brokers...), Transport: k.KafkaGoTransport(t)}
	resp, err := c.OffsetFetch(t.Context(), &kafka.OffsetFetchRequest{
		GroupID: "never-joined",
		Topics:  map[string][]int{"testenv-unknown-group": {0}},
	})
	if err != nil {
		t.Fatalf("OffsetFetch: %v", err)
	}
	if !errors.Is(resp.Error, kafka.GroupIdNotFound) {
		t.Errorf("OffsetFetch of an unknown group: Error = %v, want kafka.GroupIdNotFound", resp.Error)
	}
}
