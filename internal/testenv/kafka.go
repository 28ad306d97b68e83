package testenv

// segmentio/kafka-go v0.4.51 against kfake (franz-go/pkg/kfake, the version
// in go.mod), as verified by the tests in kafka_test.go:
//
//   - Works unchanged: kafka.Writer with RequiredAcks: kafka.RequireAll,
//     BatchTimeout, Balancer: &kafka.Hash{} (keys land on stable partitions,
//     identical to what franz-go reads back), message headers, message
//     timestamps (Message.Time round-trips at millisecond precision, as
//     CreateTime), gzip/snappy/lz4/zstd compression; kafka.NewReader with
//     GroupID and FetchMessage + CommitMessages (the commits are visible to
//     franz-go's OffsetFetch); Reader.Close leaves the group and a new member
//     resumes after the committed offsets without redelivery; a second
//     member triggers a rebalance and gets partitions.
//   - A Writer without Transport uses the package-global
//     kafka.DefaultTransport, whose connection goroutines never exit, so
//     goleak fails the package; Writer.Close does not close a Transport it
//     was given either. Give every Writer its own kafka.Transport and call
//     CloseIdleConnections after Writer.Close (in tests: KafkaGoTransport).
//   - kfake honours the per-request auto-create flag: a Writer without
//     AllowAutoTopicCreation gets kafka.UnknownTopicOrPartition for a topic
//     nobody created, even though StartKafka enables auto-creation. Create
//     topics up front (StartKafka's topics, CreateTopic) or set the flag.
//   - A rebalance completes only when the existing members notice it on
//     their next heartbeat: kafka-go's default HeartbeatInterval is 3s, so
//     tests that add or remove members should set it to ~100ms.
//   - kfake's minimum group session timeout is 6s (like Kafka's
//     group.min.session.timeout.ms); a ReaderConfig.SessionTimeout below
//     that cannot join: the JoinGroup error ([26] Invalid Session Timeout)
//     only reaches ReaderConfig.ErrorLogger and FetchMessage blocks until its
//     context ends.
//   - Reader.Close has a known hang when it races a rebalance
//     (segmentio/kafka-go#1248); tests close readers with CloseKafkaGoReader,
//     which fails after 10s instead of hanging until go test's timeout.
//   - OffsetFetch for a group that never existed answers GROUP_ID_NOT_FOUND
//     (kafka-go: kafka.GroupIdNotFound, error 69) rather than the offsets of
//     -1 without error that Kafka's classic group coordinator returns; code
//     reading committed offsets (lag metrics) must treat both as "no commits
//     yet".

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl/scram"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/delayq/delayq/internal/cli/kfakefix"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// defaultPartitions is the partition count of topics created by StartKafka,
// and of topics created automatically on first use.
const defaultPartitions = 4

// Kafka is an in-process Kafka-protocol broker
// (github.com/twmb/franz-go/pkg/kfake) on a free 127.0.0.1 port.
type Kafka struct {
	// Brokers are the bootstrap addresses ("127.0.0.1:port").
	Brokers []string
	// Cluster is the fake cluster, for fault injection (Control,
	// ControlKey, ...).
	Cluster *kfake.Cluster

	// testenv's own clients on a secured broker: TLS with the PKI's
	// client certificate (tlsConf), SASL as the superuser (sasl)
	tlsConf *tls.Config
	sasl    bool
}

// StartKafka starts a one-broker kfake cluster with topics created with 4
// partitions each. Automatic topic creation is on (also with 4 partitions).
// The cluster is closed at cleanup.
func StartKafka(tb testing.TB, topics ...string) *Kafka {
	tb.Helper()
	return StartKafkaPartitions(tb, defaultPartitions, topics...)
}

// StartKafkaPartitions is StartKafka with the given partition count for the
// seeded and automatically created topics.
func StartKafkaPartitions(tb testing.TB, partitions int32, topics ...string) *Kafka {
	tb.Helper()
	if partitions < 1 {
		tb.Fatalf("testenv: StartKafkaPartitions: partitions must be positive, got %d", partitions)
	}
	return StartKafkaWith(tb, KafkaOptions{Partitions: partitions, Topics: topics})
}

// StartKafkaWith starts a one-broker kfake cluster as o says (see
// KafkaOptions): topics seeded, automatic topic creation on, and
// optionally TLS, SASL and ACLs. The cluster is closed at cleanup.
func StartKafkaWith(tb testing.TB, o KafkaOptions) *Kafka {
	tb.Helper()
	partitions := o.Partitions
	switch {
	case partitions == 0:
		partitions = defaultPartitions
	case partitions < 0:
		tb.Fatalf("testenv: KafkaOptions: partitions must be positive, got %d", partitions)
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(int(partitions)),
	}
	if len(o.Topics) > 0 {
		opts = append(opts, kfake.SeedTopics(partitions, o.Topics...))
	}
	if o.Listen != nil {
		opts = append(opts, kfake.ListenFn(o.Listen))
	}
	k := &Kafka{}
	opts = append(opts, k.secure(tb, o)...)
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		tb.Fatalf("testenv: start kfake cluster: %v", err)
	}
	kfakefix.Install(c) // the consumer-group livelock, see the package
	tb.Cleanup(c.Close)
	k.Brokers, k.Cluster = c.ListenAddrs(), c
	return k
}

// Client returns a franz-go client seeded with the broker, for verifying
// independently of kafka-go what was produced or committed; on a secured
// broker it uses TLS and logs in as the superuser (see Opts). opts come
// after those. The client is closed at cleanup.
func (k *Kafka) Client(tb testing.TB, opts ...kgo.Opt) *kgo.Client {
	tb.Helper()
	cl, err := kgo.NewClient(append(k.Opts(), opts...)...)
	if err != nil {
		tb.Fatalf("testenv: kgo client for %v: %v", k.Brokers, err)
	}
	tb.Cleanup(cl.Close)
	return cl
}

// CreateTopic creates topic with the given number of partitions.
func (k *Kafka) CreateTopic(tb testing.TB, topic string, partitions int32) {
	tb.Helper()
	cl, err := kgo.NewClient(k.Opts()...)
	if err != nil {
		tb.Fatalf("testenv: kgo client for %v: %v", k.Brokers, err)
	}
	defer cl.Close()

	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic = topic
	rt.NumPartitions = partitions
	rt.ReplicationFactor = 1
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 5000

	ctx, cancel := context.WithTimeout(tb.Context(), startTimeout)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		tb.Fatalf("testenv: create topic %q: %v", topic, err)
	}
	if len(resp.Topics) != 1 {
		tb.Fatalf("testenv: create topic %q: %d topics in response", topic, len(resp.Topics))
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil {
		tb.Fatalf("testenv: create topic %q (%d partitions): %v", topic, partitions, err)
	}
}

// KafkaGoTransport returns a segmentio/kafka-go Transport for one test,
// whose idle connections are closed at cleanup. Set it as Writer.Transport:
// a Writer without one uses the package-global kafka.DefaultTransport, whose
// connection goroutines live until the process exits (goleak reports them),
// and Writer.Close does not close a Transport it was given. On a secured
// broker it uses TLS and logs in as the superuser, like Opts.
func (k *Kafka) KafkaGoTransport(tb testing.TB) *kafka.Transport {
	tb.Helper()
	tr := &kafka.Transport{TLS: k.tlsConf}
	if k.sasl {
		m, err := scram.Mechanism(scram.SHA256, KafkaSuperuser, KafkaSuperuserPassword)
		if err != nil {
			tb.Fatalf("testenv: kafka-go SCRAM-SHA-256: %v", err)
		}
		tr.SASL = m
	}
	tb.Cleanup(tr.CloseIdleConnections)
	return tr
}

// readerCloseTimeout bounds CloseKafkaGoReader.
const readerCloseTimeout = 10 * time.Second

// CloseKafkaGoReader closes r and fails the test (without stopping it) if
// Close returns an error or does not return within 10s, instead of hanging
// the package until go test's timeout: kafka-go's Reader.Close can block
// when it races a consumer-group rebalance (segmentio/kafka-go#1248). It may
// be called from any goroutine, and from Cleanup.
func CloseKafkaGoReader(tb testing.TB, r *kafka.Reader) {
	tb.Helper()
	done := make(chan error, 1)
	go func() { done <- r.Close() }()
	timer := time.NewTimer(readerCloseTimeout)
	defer timer.Stop()
	select {
	case err := <-done:
		if err != nil {
			tb.Errorf("testenv: kafka-go Reader.Close: %v", err)
		}
	case <-timer.C:
		tb.Errorf("testenv: kafka-go Reader.Close did not return within %v (segmentio/kafka-go#1248); its goroutines are leaked", readerCloseTimeout)
	}
}
