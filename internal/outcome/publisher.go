package outcome

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/kafkatopic"
	"github.com/delayq/delayq/internal/lograte"
	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/task"
)

// Defaults of Config.
const (
	DefaultQueue        = 10000
	DefaultWriteTimeout = 10 * time.Second
	maxBatch            = 500             // records per write
	warnEvery           = time.Minute     // at most one WARN per period about drops
	createRetry         = 5 * time.Second // between tries to create the topic
)

// DefaultBatchSize bounds kafka-go's batch of one partition in a
// write. kafka-go gives every partition batch a slice of BatchSize
// messages (152 bytes each) before it knows how many it will hold: at
// 500, each write allocated 76 KB per partition it touched, which was
// the largest share of a work process' allocation (bench-scale's allocs profile:
// 38% of its bytes) for batches that carry a few records each. A
// partition with more records in one write sends them in batches of
// this size, one after the other; a full batch goes at once, without
// the BatchTimeout. BenchmarkPublish compares the sizes.
const DefaultBatchSize = 64

// Drop reasons (the reason label of delayq_outcomes_dropped_total).
const (
	DropQueueFull = "queue_full"
	DropKafka     = "kafka"
	DropClosed    = "closed"
	DropShutdown  = "shutdown"
	// DropRead: the publisher's user could not read what to publish (the
	// daemon reads a cancelled task back from Redis).
	DropRead = "read"
)

// Off is the topic setting that disables outcome records besides "": an
// empty environment variable means "the default" to the binaries, so
// DQ_OUTCOMES_TOPIC=none is how the environment turns them off.
const Off = "none"

// Enabled reports whether topic (a DQ_OUTCOMES_TOPIC value) publishes.
func Enabled(topic string) bool { return topic != "" && topic != Off }

// Config configures a Publisher.
type Config struct {
	Brokers []string
	// Topic is the outcomes topic; "" or Off disables publishing (New
	// returns a nil Publisher, whose methods do nothing).
	Topic string
	Conn  config.Conn // TLS and SASL
	// ClientID names the process to Kafka (default "delayq-outcomes").
	ClientID string
	// Queue bounds the records waiting to be written (default
	// DefaultQueue); past it Publish drops.
	Queue int
	// WriteTimeout bounds one produce request (default
	// DefaultWriteTimeout); kafka-go tries a batch 3 times.
	WriteTimeout time.Duration
	// BatchTimeout is how long kafka-go waits to fill a partition batch
	// (default 5ms).
	BatchTimeout time.Duration
	// BatchSize bounds the records of one partition in one produce
	// request (default DefaultBatchSize).
	BatchSize int
	// Create creates the topic when missing (DQ_KAFKA_AUTO_CREATE) with
	// Partitions and Replication (defaults 8, 1), retrying every 5s until
	// it exists.
	Create                  bool
	Partitions, Replication int
	Log                     *slog.Logger
	// Registerer registers the metrics when set.
	Registerer prometheus.Registerer
}

// messageWriter is the producing half of the Kafka seam.
type messageWriter interface {
	WriteMessages(ctx context.Context, msgs ...kafka.Message) error
	Close() error
}

// Publisher publishes outcome records best effort. Its methods are safe
// for concurrent use; a nil *Publisher is a disabled one.
type Publisher struct {
	cfg       Config
	log       *slog.Logger
	w         messageWriter
	closeConn func()
	q         chan record.OutcomeRecord

	published *prometheus.CounterVec
	dropped   *prometheus.CounterVec

	mu       sync.RWMutex // closed: Publish sends under RLock, Close closes q under Lock
	closed   bool
	stopOnce sync.Once
	ctx      context.Context // ends writes in flight: Close's deadline
	cancel   context.CancelFunc
	done     chan struct{} // the writer goroutine returned
	creator  sync.WaitGroup

	warner lograte.Warner // WARN about drops at most once per warnEvery
}

// New starts a publisher (its writer goroutine, and the topic creation
// when Config.Create); Close stops it. With Config.Topic "" or Off it
// returns nil: a disabled publisher. It does not connect yet: Kafka may be
// down.
func New(ctx context.Context, cfg Config) (*Publisher, error) {
	if !Enabled(cfg.Topic) {
		return nil, nil
	}
	if len(cfg.Brokers) == 0 {
		return nil, errors.New("outcomes: no Kafka brokers")
	}
	if cfg.Queue < 0 {
		return nil, fmt.Errorf("outcomes: queue %d below 0", cfg.Queue)
	}
	if cfg.Queue == 0 {
		cfg.Queue = DefaultQueue
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.BatchTimeout <= 0 {
		cfg.BatchTimeout = 5 * time.Millisecond
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = DefaultBatchSize
	}
	if cfg.ClientID == "" {
		cfg.ClientID = "delayq-outcomes"
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	log := cfg.Log.With("component", "outcomes", "topic", cfg.Topic)
	tr := cfg.Conn.Transport(cfg.ClientID, 10*time.Second)
	w := &kafka.Writer{
		Transport:              tr,
		Addr:                   kafka.TCP(cfg.Brokers...),
		Topic:                  cfg.Topic,
		Balancer:               &kafka.Hash{}, // by task id: one task's records stay in order per publisher
		RequiredAcks:           kafka.RequireAll,
		BatchSize:              cfg.BatchSize,
		BatchTimeout:           cfg.BatchTimeout,
		WriteTimeout:           cfg.WriteTimeout,
		ReadTimeout:            cfg.WriteTimeout,
		MaxAttempts:            3,
		AllowAutoTopicCreation: false,
		// failed writes are counted and logged (at most once a minute)
		ErrorLogger: kafka.LoggerFunc(func(msg string, args ...any) {
			log.Debug(fmt.Sprintf(msg, args...))
		}),
	}
	p := newPublisher(ctx, cfg, log, w, tr.CloseIdleConnections)
	if cfg.Create {
		p.creator.Go(p.createTopic)
	}
	return p, nil
}

func newPublisher(ctx context.Context, cfg Config, log *slog.Logger, w messageWriter, closeConn func()) *Publisher {
	p := &Publisher{
		cfg: cfg, log: log, w: w, closeConn: closeConn, warner: lograte.Warner{Log: log, Every: warnEvery},
		q:    make(chan record.OutcomeRecord, cfg.Queue),
		done: make(chan struct{}),
		published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: admin.Namespace, Name: "outcomes_published_total",
			Help: "Outcome records written to the outcomes topic, by outcome (succeeded, failed, dead, cancelled).",
		}, []string{"outcome"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: admin.Namespace, Name: "outcomes_dropped_total",
			Help: "Outcome records not published (best effort; the outcome is in Redis), by reason: queue_full (Kafka slow or down), kafka (a write failed), closed, shutdown (still queued at the end of the shutdown drain), read (the outcome could not be read back from Redis).",
		}, []string{"reason"}),
	}
	for _, o := range []string{record.OutcomeSucceeded, record.OutcomeFailed, record.OutcomeDead, record.OutcomeCancelled} {
		p.published.WithLabelValues(o)
	}
	for _, r := range []string{DropQueueFull, DropKafka, DropClosed, DropShutdown, DropRead} {
		p.dropped.WithLabelValues(r)
	}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(p.published, p.dropped)
	}
	// ended by Close, not by ctx: the writer outlives the work that
	// publishes (the shutdown drain)
	p.ctx, p.cancel = context.WithCancel(context.WithoutCancel(ctx))
	go p.run()
	return p
}

// Topic is the outcomes topic ("" when disabled).
func (p *Publisher) Topic() string {
	if p == nil {
		return ""
	}
	return p.cfg.Topic
}

// Publish queues o for the outcomes topic without blocking. It reports
// false when o was dropped (queue full, or the publisher closed) or the
// publisher is disabled.
func (p *Publisher) Publish(o record.OutcomeRecord) bool {
	if p == nil {
		return false
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		p.drop(DropClosed, 1, nil)
		return false
	}
	select {
	case p.q <- o:
		return true
	default:
		p.drop(DropQueueFull, 1, nil)
		return false
	}
}

// Drop counts n records its caller could not publish, for reason (one
// of the Drop* constants), and logs it (at WARN at most once a minute).
func (p *Publisher) Drop(reason string, n int, err error) {
	if p == nil {
		return
	}
	p.drop(reason, n, err)
}

func (p *Publisher) drop(reason string, n int, err error) {
	if n == 0 {
		return
	}
	p.dropped.WithLabelValues(reason).Add(float64(n))
	args := []any{"reason", reason, "dropped", n}
	if err != nil {
		args = append(args, "err", err)
	}
	p.warner.Warn("outcome records dropped (best effort: the outcomes are in Redis)", args...)
}

// run writes what is queued, in batches, until the queue is closed and
// empty, or Close's deadline passed.
func (p *Publisher) run() {
	defer close(p.done)
	batch := make([]record.OutcomeRecord, 0, maxBatch)
	for {
		o, ok := <-p.q
		if !ok {
			return
		}
		batch = append(batch[:0], o)
	more:
		for len(batch) < maxBatch {
			select {
			case o, ok := <-p.q:
				if !ok {
					break more
				}
				batch = append(batch, o)
			default:
				break more
			}
		}
		if p.ctx.Err() != nil {
			p.drop(DropShutdown, len(batch), nil)
			continue // drains the queue, counting it
		}
		p.write(batch)
	}
}

// write writes one batch, counting what Kafka confirmed and what it did not.
func (p *Publisher) write(batch []record.OutcomeRecord) {
	msgs := make([]kafka.Message, len(batch))
	for i := range batch {
		msgs[i] = record.EncodeOutcome(&batch[i], "")
	}
	err := p.w.WriteMessages(p.ctx, msgs...)
	if err == nil {
		p.count(batch, nil)
		return
	}
	var werrs kafka.WriteErrors
	if errors.As(err, &werrs) && len(werrs) == len(batch) {
		failed, first := 0, error(nil)
		for _, e := range werrs {
			if e != nil {
				failed++
				if first == nil {
					first = e
				}
			}
		}
		p.count(batch, werrs)
		reason := DropKafka
		if p.ctx.Err() != nil {
			reason = DropShutdown
		}
		p.drop(reason, failed, first)
		return
	}
	reason := DropKafka
	if p.ctx.Err() != nil {
		reason = DropShutdown
	}
	p.drop(reason, len(batch), err)
}

func (p *Publisher) count(batch []record.OutcomeRecord, errs kafka.WriteErrors) {
	for i := range batch {
		if errs == nil || errs[i] == nil {
			p.published.WithLabelValues(batch[i].Outcome).Inc()
		}
	}
}

// createTopic creates the topic when it is missing, retrying until it
// exists or the publisher closes.
func (p *Publisher) createTopic() {
	tc := kafkatopic.NewTopicCheck(kafkatopic.TopicCheckConfig{
		Brokers: p.cfg.Brokers, Topics: []string{p.cfg.Topic}, Create: true,
		Partitions: p.cfg.Partitions, Replication: p.cfg.Replication, Log: p.log,
		Conn: p.cfg.Conn,
	})
	for {
		missing, err := tc.Check(p.ctx)
		if err == nil && len(missing) == 0 {
			return
		}
		t := time.NewTimer(createRetry)
		select {
		case <-p.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// Close stops taking records and writes what is queued until ctx ends;
// what is left then is dropped (reason "shutdown"). It closes the Kafka
// writer and returns once the publisher's goroutines exited. Calling it
// again does nothing.
func (p *Publisher) Close(ctx context.Context) error {
	if p == nil {
		return nil
	}
	var err error
	p.stopOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		close(p.q)
		p.mu.Unlock()
		select {
		case <-p.done:
		case <-ctx.Done():
			p.cancel() // ends the write in flight; the rest is counted as shutdown drops
			<-p.done
		}
		p.cancel()
		p.creator.Wait()
		err = p.w.Close()
		if p.closeConn != nil {
			p.closeConn()
		}
		if err != nil {
			err = fmt.Errorf("close outcomes writer: %w", err)
		}
	})
	return err
}

// ValidateTopic checks an outcomes topic name as DQ_OUTCOMES_TOPIC gives
// it: "" or Off (disabled), or 1..249 characters of [a-zA-Z0-9._-], not
// "." or "..", as Kafka requires.
func ValidateTopic(name string) error {
	if !Enabled(name) {
		return nil
	}
	if len(name) > 249 || name == "." || name == ".." {
		return fmt.Errorf("outcomes-topic %q: not a valid Kafka topic name", task.Truncate(name, 64))
	}
	for i := 0; i < len(name); i++ {
		if !topicByte(name[i]) {
			return fmt.Errorf("outcomes-topic %q: not a valid Kafka topic name (letters, digits, '.', '_', '-')", task.Truncate(name, 64))
		}
	}
	return nil
}

func topicByte(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return c == '.' || c == '_' || c == '-'
}
