package fire

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/kafkatopic"
)

// Producer writes records to Kafka synchronously. Produce returns one
// error per message, nil when Kafka confirmed it (acks=all), and sets the
// Partition and Offset of each confirmed message in msgs (the fire
// receipt). A non-nil error does not mean "not written": a timed-out or
// cancelled write may still land, so the caller re-sends and accepts a
// duplicate.
type Producer interface {
	Produce(ctx context.Context, msgs []kafka.Message) []error
}

// KafkaConfig configures the kafka-go writer.
type KafkaConfig struct {
	Brokers []string
	// BatchSize is the most records per partition batch; keep it at least
	// the poller's batch so that one take is one request per partition.
	BatchSize int
	// BatchTimeout is how long kafka-go waits to fill a partition batch
	// (its default of 1s would add a second to every write). Default 2ms.
	BatchTimeout time.Duration
	// WriteTimeout bounds one produce request. Default 5s.
	WriteTimeout time.Duration
	// MaxAttempts is how often kafka-go tries a batch. Default 3.
	MaxAttempts int
	// AutoCreate creates a missing topic on first use (CreateTopics with
	// Partitions and Replication) instead of failing its records: off in
	// production, where topics are created on purpose.
	AutoCreate bool
	// Partitions and Replication are what AutoCreate creates topics with
	// (defaults 8 and 1).
	Partitions, Replication int
	// MetadataTTL is how often the writer refreshes its view of the
	// cluster: a topic created by someone else is seen within it (default
	// 10s, well under the poison grace).
	MetadataTTL time.Duration
	// Conn is TLS and SASL (zero: plain TCP, no SASL).
	Conn config.Conn
	// Log receives kafka-go's logs (Debug) and errors (Warn).
	Log *slog.Logger
}

// smallTake is the most records a take may have to go through the small
// writer (see Kafka.small).
const smallTake = 32

// Kafka is the process' kafka-go Writers: w for takes, small for small
// takes, solo for isolating oversized records.
type Kafka struct {
	w *kafka.Writer
	// small writes takes of at most smallTake records: its BatchSize is
	// smallTake, because kafka-go allocates every partition batch with
	// room for BatchSize messages (~150 bytes each). At a steady rate most
	// takes hold a few tasks, and w's 500-record batches made ~75 KB of
	// garbage per partition per take: at 4,000 tasks/s over two event
	// processes, a GC cycle every ~60ms in each (BenchmarkLag: ~100 in
	// 6s; ~20 with small). A take that small never fills a partition
	// batch of smallTake, so it is still one request per partition. nil
	// when BatchSize is not above smallTake.
	small     *kafka.Writer
	transport *kafka.Transport
	cfg       KafkaConfig
	log       *slog.Logger

	// solo writes the records of a partition batch the broker refused as
	// too large one group at a time (see isolate): the shared writer would
	// batch them with other pollers' records again.
	soloMu sync.Mutex
	solo   *kafka.Writer

	created sync.Map // topic -> struct{}: created by AutoCreate

	existsMu sync.Mutex
	exists   map[string]topicSeen // TopicExists' answers of the last second
}

type topicSeen struct {
	ok bool
	at time.Time
}

// NewKafka builds the writer: acks from all in-sync replicas, a batch
// timeout of a few milliseconds, hash partitioning by key, explicit
// timeouts and attempts, no automatic topic creation unless asked, logs to
// slog. Messages carry their own topic.
func NewKafka(cfg KafkaConfig) *Kafka {
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 500
	}
	if cfg.BatchTimeout <= 0 {
		cfg.BatchTimeout = 2 * time.Millisecond
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 5 * time.Second
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 3
	}
	if cfg.Partitions <= 0 {
		cfg.Partitions = 8
	}
	if cfg.Replication <= 0 {
		cfg.Replication = 1
	}
	if cfg.MetadataTTL <= 0 {
		cfg.MetadataTTL = 10 * time.Second
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tr := cfg.Conn.Transport("delayq-event", 5*time.Second)
	tr.MetadataTTL = cfg.MetadataTTL
	k := &Kafka{w: newWriter(cfg, tr, log), solo: newWriter(cfg, tr, log), transport: tr, cfg: cfg, log: log}
	if cfg.BatchSize > smallTake {
		sc := cfg
		sc.BatchSize = smallTake
		k.small = newWriter(sc, tr, log)
	}
	return k
}

// receipts is every writer's Completion: kafka-go calls it with its own
// copies of the messages of one partition batch, their partition and
// offset set from the broker's answer, before WriteMessages returns; each
// copy's WriterData points at the caller's message (set by Produce), which
// gets them. kafka-go sets them nowhere else: WriteMessages copies the
// messages into its batches.
func receipts(msgs []kafka.Message, err error) {
	if err != nil {
		return
	}
	for i := range msgs {
		if orig, ok := msgs[i].WriterData.(*kafka.Message); ok {
			orig.Partition, orig.Offset = msgs[i].Partition, msgs[i].Offset
		}
	}
}

// newWriter is one kafka-go Writer configured as NewKafka says. Topics
// are never created by the broker's automatic creation (which would use
// the broker's partition count): AutoCreate creates them explicitly.
func newWriter(cfg KafkaConfig, tr *kafka.Transport, log *slog.Logger) *kafka.Writer {
	return &kafka.Writer{
		Addr:                   kafka.TCP(cfg.Brokers...),
		Balancer:               &kafka.Hash{},
		MaxAttempts:            cfg.MaxAttempts,
		WriteBackoffMin:        50 * time.Millisecond,
		WriteBackoffMax:        500 * time.Millisecond,
		BatchSize:              cfg.BatchSize,
		BatchTimeout:           cfg.BatchTimeout,
		ReadTimeout:            cfg.WriteTimeout,
		WriteTimeout:           cfg.WriteTimeout,
		RequiredAcks:           kafka.RequireAll,
		AllowAutoTopicCreation: false,
		Transport:              tr,
		Completion:             receipts,
		Logger: kafka.LoggerFunc(func(f string, args ...any) {
			if log.Enabled(context.Background(), slog.LevelDebug) {
				log.Debug(fmt.Sprintf(f, args...), "component", "kafka-go")
			}
		}),
		ErrorLogger: kafka.LoggerFunc(func(f string, args ...any) {
			log.Warn(fmt.Sprintf(f, args...), "component", "kafka-go")
		}),
	}
}

// Produce writes msgs and waits for Kafka's answer. Messages of different
// topics are written in parallel, one synchronous call per topic, so that
// a topic Kafka rejects (missing, not allowed) fails only its own records.
func (k *Kafka) Produce(ctx context.Context, msgs []kafka.Message) []error {
	errs := make([]error, len(msgs))
	if len(msgs) == 0 {
		return errs
	}
	for i := range msgs {
		msgs[i].WriterData = &msgs[i] // where receipts writes what Kafka answered
	}
	byTopic := map[string][]int{}
	for i, m := range msgs {
		byTopic[m.Topic] = append(byTopic[m.Topic], i)
	}
	if len(byTopic) == 1 {
		k.write(ctx, msgs, errs)
		return errs
	}
	var wg sync.WaitGroup
	for _, idx := range byTopic {
		wg.Go(func() {
			perrs := make([]error, len(idx))
			k.write(ctx, pick(msgs, idx), perrs)
			for j, i := range idx {
				errs[i] = perrs[j]
			}
		})
	}
	wg.Wait()
	return errs
}

// write is one WriteMessages call (all msgs share one topic) with its
// errors spread per message. A record larger than the writer accepts fails
// alone: kafka-go refuses the whole call for it, so it is taken out and the
// rest written again. A missing topic is created when AutoCreate is on, and
// the records written again. Records the broker refused as too large are
// written again in smaller groups, down to one, so that only the oversized
// ones keep the error (isolate): also a single one, because the shared
// writer puts the records of concurrent calls (other shards' pollers) into
// one partition batch, so one small record can be refused for another
// call's oversized one.
func (k *Kafka) write(ctx context.Context, msgs []kafka.Message, errs []error) {
	w := k.w
	if k.small != nil && len(msgs) <= smallTake {
		w = k.small
	}
	k.writeWith(ctx, w, msgs, errs, true)
	var big []int
	for i, e := range errs {
		if e != nil && brokerTooLarge(e) {
			big = append(big, i)
		}
	}
	if len(big) > 0 {
		k.soloMu.Lock()
		defer k.soloMu.Unlock()
		alone := map[int]bool{}
		k.isolate(ctx, msgs, big, errs, alone)
		notIsolated(errs, big, alone)
	}
}

// errNotIsolated replaces a "too large" refusal of a record that was never
// refused on its own: the broker refused its partition batch because of
// another record, and isolate ran out of time before trying it alone. It
// is transient (fired again), never poison: a healthy task must not be
// made dead for sharing a batch with an oversized one.
var errNotIsolated = errors.New("refused in a partition batch with an oversized record, not yet written alone")

// notIsolated turns the too-large errors of the records in big that were
// not refused alone into errNotIsolated.
func notIsolated(errs []error, big []int, alone map[int]bool) {
	for _, i := range big {
		if errs[i] != nil && brokerTooLarge(errs[i]) && !alone[i] {
			errs[i] = fmt.Errorf("%w (%v)", errNotIsolated, errs[i]) //nolint:errorlint // the broker's code must not match: this record was not refused on its own
		}
	}
}

// writeWith is write's loop on one writer.
func (k *Kafka) writeWith(ctx context.Context, w *kafka.Writer, msgs []kafka.Message, errs []error, create bool) {
	idx := make([]int, len(msgs))
	for i := range idx {
		idx[i] = i
	}
	batch := msgs // the first try writes them all, without a copy
	for len(idx) > 0 {
		if len(batch) != len(idx) {
			batch = pick(msgs, idx)
		}
		err := w.WriteMessages(ctx, batch...)
		var tooLarge kafka.MessageTooLargeError
		var werrs kafka.WriteErrors
		switch {
		case err == nil:
			for _, i := range idx {
				errs[i] = nil
			}
			return
		case errors.As(err, &tooLarge):
			pos := slices.IndexFunc(batch, func(m kafka.Message) bool { return sameMessage(m, tooLarge.Message) })
			if pos < 0 {
				for _, i := range idx {
					errs[i] = err
				}
				return
			}
			errs[idx[pos]] = err
			idx = append(idx[:pos:pos], idx[pos+1:]...)
		case create && k.cfg.AutoCreate && errors.Is(err, kafka.UnknownTopicOrPartition) && ctx.Err() == nil:
			create = false
			if cerr := k.createTopic(ctx, batch[0].Topic); cerr != nil {
				for _, i := range idx {
					errs[i] = fmt.Errorf("%w (automatic creation failed: %v)", err, cerr) //nolint:errorlint // err is what callers classify; wrapping cerr too would make its kafka error code match as well
				}
				return
			}
		case errors.As(err, &werrs) && len(werrs) == len(idx):
			for j, i := range idx {
				errs[i] = werrs[j]
			}
			return
		default:
			for _, i := range idx {
				errs[i] = err
			}
			return
		}
	}
}

// isolate writes the records at idx (refused as too large by the broker,
// which refuses a whole partition batch for one oversized record) on the
// solo writer, halving the groups that fail again, so that a record that
// merely shared a batch with an oversized one is written, and only a
// record refused on its own keeps the error: O(log n) round trips per
// oversized record. The caller holds soloMu.
func (k *Kafka) isolate(ctx context.Context, msgs []kafka.Message, idx []int, errs []error, alone map[int]bool) {
	perrs := make([]error, len(idx))
	k.writeWith(ctx, k.solo, pick(msgs, idx), perrs, false)
	var again []int
	for j, i := range idx {
		errs[i] = perrs[j]
		if perrs[j] != nil && brokerTooLarge(perrs[j]) {
			again = append(again, i)
		}
	}
	if len(idx) == 1 && len(again) == 1 {
		alone[idx[0]] = true // refused on its own: truly too large
		return
	}
	if len(again) == 0 || ctx.Err() != nil {
		return // what was not refused alone is made transient by notIsolated
	}
	h := max(len(again)/2, 1)
	if len(again) == 1 {
		// the only one refused again, but in a group: try it alone
		k.isolate(ctx, msgs, again, errs, alone)
		return
	}
	k.isolate(ctx, msgs, again[:h], errs, alone)
	k.isolate(ctx, msgs, again[h:], errs, alone)
}

// pick returns the messages at idx, in that order.
func pick(msgs []kafka.Message, idx []int) []kafka.Message {
	out := make([]kafka.Message, len(idx))
	for j, i := range idx {
		out[j] = msgs[i]
	}
	return out
}

// brokerTooLarge reports a broker's refusal of a batch as too large (the
// writer's own MessageTooLargeError names its one record already).
func brokerTooLarge(err error) bool {
	return errors.Is(err, kafka.MessageSizeTooLarge) || errors.Is(err, kafka.RecordListTooLarge)
}

// createTopic creates topic with the configured partitions and
// replication (AutoCreate); a topic that exists already is fine.
func (k *Kafka) createTopic(ctx context.Context, topic string) error {
	if _, ok := k.created.Load(topic); ok {
		return nil
	}
	cl := &kafka.Client{Addr: k.w.Addr, Transport: k.transport, Timeout: k.cfg.WriteTimeout}
	if err := kafkatopic.CreateTopics(ctx, cl, []string{topic}, k.cfg.Partitions, k.cfg.Replication); err != nil {
		return err
	}
	k.created.Store(topic, struct{}{})
	k.log.Info("created kafka topic on first use", "topic", topic, "partitions", k.cfg.Partitions, "replication", k.cfg.Replication)
	return nil
}

// sameMessage reports whether two messages share their key and value
// (kafka-go hands back a copy of the message it refused).
func sameMessage(a, b kafka.Message) bool {
	return a.Topic == b.Topic && sameBytes(a.Key, b.Key) && sameBytes(a.Value, b.Value) && len(a.Headers) == len(b.Headers)
}

func sameBytes(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	return len(a) == 0 || &a[0] == &b[0]
}

// TopicExists asks the cluster, bypassing the writer's metadata cache
// (refreshed every MetadataTTL), whether topic exists: a poller asks it
// before it makes a task dead for a missing topic, so that a topic created
// moments ago, which the writer has not seen yet, does not kill the task.
// Answers are kept for a second.
func (k *Kafka) TopicExists(ctx context.Context, topic string) (bool, error) {
	k.existsMu.Lock()
	if s, ok := k.exists[topic]; ok && time.Since(s.at) < time.Second {
		k.existsMu.Unlock()
		return s.ok, nil
	}
	k.existsMu.Unlock()
	tr := k.cfg.Conn.Transport("delayq-event", 5*time.Second)
	defer tr.CloseIdleConnections()
	cl := &kafka.Client{Addr: k.w.Addr, Transport: tr, Timeout: k.cfg.WriteTimeout}
	missing, err := kafkatopic.MissingTopics(ctx, cl, []string{topic})
	if err != nil {
		return false, err
	}
	ok := len(missing) == 0
	k.existsMu.Lock()
	if k.exists == nil {
		k.exists = map[string]topicSeen{}
	}
	for t, s := range k.exists {
		if time.Since(s.at) >= time.Second {
			delete(k.exists, t)
		}
	}
	k.exists[topic] = topicSeen{ok: ok, at: time.Now()}
	k.existsMu.Unlock()
	return ok, nil
}

// Close flushes and closes the writers and their connections.
func (k *Kafka) Close() error {
	err := errors.Join(k.w.Close(), k.solo.Close())
	if k.small != nil {
		err = errors.Join(err, k.small.Close())
	}
	k.transport.CloseIdleConnections()
	return err
}

// The classes of records Kafka refuses for good (the reason label of
// delayq_fire_dead_total).
const (
	RefusedUnknownTopic  = "unknown_topic"
	RefusedTooLarge      = "too_large"
	RefusedInvalidTopic  = "invalid_topic"
	RefusedInvalidRecord = "invalid_record"
	RefusedNotAuthorized = "not_authorized"
)

// Refusal classifies a produce error: the class of a refusal for good
// (sending the record again cannot succeed while nothing changes: the topic
// is missing and not created automatically, the record is too large, the
// topic or record is invalid, the producer may not write the topic), or ""
// for an error worth retrying (timeouts, leader changes, not enough
// replicas, connection errors, a cancelled write, anything unknown). A
// missing topic counts as a refusal although Kafka calls it retriable: the
// poller gives such a task a grace (DQ_FIRE_POISON_GRACE) before it makes
// it dead, which also covers a topic that is being created or moved.
func Refusal(err error) string {
	if err == nil {
		return ""
	}
	var tooLarge kafka.MessageTooLargeError
	if errors.As(err, &tooLarge) {
		return RefusedTooLarge
	}
	var ke kafka.Error
	if errors.As(err, &ke) {
		switch ke {
		case kafka.UnknownTopicOrPartition:
			return RefusedUnknownTopic
		case kafka.MessageSizeTooLarge, kafka.RecordListTooLarge:
			return RefusedTooLarge
		case kafka.InvalidTopic:
			return RefusedInvalidTopic
		case kafka.InvalidRecord, kafka.InvalidTimestamp, kafka.UnsupportedForMessageFormat:
			return RefusedInvalidRecord
		case kafka.TopicAuthorizationFailed, kafka.ClusterAuthorizationFailed, kafka.TransactionalIDAuthorizationFailed:
			return RefusedNotAuthorized
		}
	}
	return ""
}

// IsPermanent reports whether Kafka refused a record for good (Refusal).
func IsPermanent(err error) bool { return Refusal(err) != "" }
