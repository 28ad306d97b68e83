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
)

// Producer writes records to Kafka synchronously. Produce returns one
// error per message, nil when Kafka confirmed it (acks=all). A non-nil
// error does not mean "not written": a timed-out or cancelled write may
// still land, so the caller re-sends and accepts a duplicate.
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
	// AutoCreate lets the broker create missing topics (off in production).
	AutoCreate bool
	// Log receives kafka-go's logs (Debug) and errors (Warn).
	Log *slog.Logger
}

// Kafka is the process' one kafka-go Writer.
type Kafka struct {
	w         *kafka.Writer
	transport *kafka.Transport
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
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tr := &kafka.Transport{
		DialTimeout: 5 * time.Second,
		IdleTimeout: 30 * time.Second,
		MetadataTTL: 10 * time.Second,
		ClientID:    "delayq-event",
	}
	w := &kafka.Writer{
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
		AllowAutoTopicCreation: cfg.AutoCreate,
		Transport:              tr,
		Logger: kafka.LoggerFunc(func(f string, args ...any) {
			if log.Enabled(context.Background(), slog.LevelDebug) {
				log.Debug(fmt.Sprintf(f, args...), "component", "kafka-go")
			}
		}),
		ErrorLogger: kafka.LoggerFunc(func(f string, args ...any) {
			log.Warn(fmt.Sprintf(f, args...), "component", "kafka-go")
		}),
	}
	return &Kafka{w: w, transport: tr}
}

// Produce writes msgs and waits for Kafka's answer. Messages of different
// topics are written in parallel, one synchronous call per topic, so that
// a topic Kafka rejects (missing, not allowed) fails only its own records.
func (k *Kafka) Produce(ctx context.Context, msgs []kafka.Message) []error {
	errs := make([]error, len(msgs))
	if len(msgs) == 0 {
		return errs
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
			part := make([]kafka.Message, len(idx))
			for j, i := range idx {
				part[j] = msgs[i]
			}
			perrs := make([]error, len(idx))
			k.write(ctx, part, perrs)
			for j, i := range idx {
				errs[i] = perrs[j]
			}
		})
	}
	wg.Wait()
	return errs
}

// write is one WriteMessages call with its errors spread per message. A
// record larger than the writer accepts fails alone: kafka-go refuses the
// whole call for it, so it is taken out and the rest written again.
func (k *Kafka) write(ctx context.Context, msgs []kafka.Message, errs []error) {
	idx := make([]int, len(msgs))
	for i := range idx {
		idx[i] = i
	}
	batch := msgs // the first try writes them all, without a copy
	for len(idx) > 0 {
		if len(batch) != len(idx) {
			batch = make([]kafka.Message, len(idx))
			for j, i := range idx {
				batch[j] = msgs[i]
			}
		}
		err := k.w.WriteMessages(ctx, batch...)
		var tooLarge kafka.MessageTooLargeError
		var werrs kafka.WriteErrors
		switch {
		case err == nil:
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

// Close flushes and closes the writer and its connections.
func (k *Kafka) Close() error {
	err := k.w.Close()
	k.transport.CloseIdleConnections()
	return err
}

// IsPermanent reports whether Kafka refused a record for good (too large,
// invalid topic or record): sending it again cannot succeed, so it goes to
// the dead-letter topic instead of blocking its shard.
func IsPermanent(err error) bool {
	var tooLarge kafka.MessageTooLargeError
	if errors.As(err, &tooLarge) {
		return true
	}
	var ke kafka.Error
	if errors.As(err, &ke) {
		switch ke {
		case kafka.MessageSizeTooLarge, kafka.InvalidTopic, kafka.RecordListTooLarge,
			kafka.InvalidRecord:
			return true
		}
	}
	return false
}
