package worker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"

	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/kafkatopic"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
)

// Task is one fired task as a handler sees it.
type Task struct {
	ID          string
	Type        string
	Payload     []byte
	ContentType string // application/json or application/octet-stream
	Attempt     int    // 1-based number of this execution
	MaxAttempts int    // the task fails for good after this attempt
	Gen         uint64 // fire generation: (ID, Gen) names this execution
	DueAt       time.Time
	FiredAt     time.Time         // when it was published to Kafka
	Headers     map[string]string // the task's own headers
	Priority    int
	Timeout     time.Duration // the handler's context ends after this long
}

// LastAttempt reports whether a failure of this execution is final.
func (t *Task) LastAttempt() bool { return t.Attempt >= t.MaxAttempts }

// HandlerFunc runs one task. A nil error means done. Any error means the
// task is retried later with backoff, unless it is marked with [Permanent]
// (dead now) or [RetryAfter] (retry after a given delay); after the task's
// last attempt it is dead. The context ends when the task's timeout passes
// (a timeout is a failure) or when the worker shuts down; handlers must
// return soon after it ends. A panic is a failure.
type HandlerFunc func(ctx context.Context, t *Task) error

// ReplicaAcks is how many Redis replicas must confirm a write of the
// worker before it counts as done (Redis WAIT after the write, on the same
// connection, one per pipeline). When fewer confirm within Timeout
// (default 500ms) the worker stores the outcome again before it commits
// the record's offset. AOF waits with WAITAOF instead (the primary's and
// the replicas' AOF fsync; Redis 7.2 or later).
type ReplicaAcks struct {
	Replicas int
	Timeout  time.Duration
	AOF      bool
}

// Config configures a Worker. Only Brokers and Redis are required.
type Config struct {
	Brokers        []string       // Kafka bootstrap addresses
	KafkaTLS       *tls.Config    // TLS to the brokers; nil: plain TCP
	KafkaSASL      sasl.Mechanism // SASL (kafka-go's sasl/plain, sasl/scram); nil: none
	Group          string         // consumer group; default "delayq-work"
	Topics         []string       // topics to consume; default ["dq.tasks"]
	DeadTopic      string         // dead letters; default "dq.dead" (a notification: see DeadLetterQueue)
	Concurrency    int            // handlers running at once; default 16
	DefaultTimeout time.Duration  // for tasks without their own timeout; default 30s
	Backoff        Backoff        // delays between attempts; defaults 1s..10m, ×2, jitter 0.5
	MaxPayload     int            // larger records are dead-lettered; default 1 MiB; negative: no limit

	// MaxHeld bounds the records held at once: fetched and not yet
	// finished (claiming, waiting for a handler, running, storing their
	// outcome). Default Concurrency + DefaultHeldBatches micro-batches of
	// 256: a busy worker keeps records in flight in its Redis round trips
	// besides those its handlers run. It bounds what a rebalance or a
	// crash hands to another worker to skip, and with MaxHeldBytes the
	// memory the records take.
	MaxHeld int
	// MaxHeldBytes bounds the bytes of the records held (key, value and
	// headers): no record is fetched while they reach it, so a worker
	// holds at most this plus one record. Default 64 MiB
	// (DefaultMaxHeldBytes); with small records MaxHeld binds first.
	MaxHeldBytes int64

	// Redis is delayq's task store; the worker claims and reads task
	// records and stores outcomes there, in batched pipelines. Namespace,
	// Shards and Retention
	// must match the other delayq processes (defaults "dq", 16, 24h).
	Redis     redis.UniversalClient
	Namespace string
	Shards    int
	Retention time.Duration
	// Acks makes every outcome the worker stores (success, retry, dead,
	// deferral) wait for Redis replicas before the record's offset is
	// committed, so that a Redis failover cannot undo an outcome whose
	// Kafka record is gone (DQ_REDIS_REPLICA_ACKS; zero: no wait).
	Acks ReplicaAcks

	// ClaimMargin is added to a task's timeout for the TTL of its execution
	// claim; default 10s. A task whose worker crashed runs again elsewhere
	// after at most its timeout plus this margin.
	ClaimMargin time.Duration
	// CommitInterval is how often finished offsets are committed; default 100ms.
	CommitInterval time.Duration
	// ShutdownTimeout bounds how long Run waits for running handlers once
	// its context ends; then their contexts are cancelled and their records
	// left uncommitted (they run again elsewhere). Default 15s.
	ShutdownTimeout time.Duration

	// Consumer group timing; defaults 10s, 1s, 10s. The session timeout must
	// lie within the brokers' group.min/max.session.timeout.ms.
	SessionTimeout    time.Duration
	HeartbeatInterval time.Duration
	RebalanceTimeout  time.Duration

	// Limiter, when set, decides per micro-batch which claimed tasks run
	// now (per-type rate limits); the others go back to Redis due when
	// they may pass, without using an attempt. Nil: everything runs.
	// NewLiveLimits gives the live rules of etcd, as the work binary
	// applies them; Run watches them while it runs.
	Limiter Limiter

	// Pause, when set, says which task types are paused: their claimed
	// tasks are parked in Redis instead of running, before the Limiter
	// (see PauseView). Nil: nothing is paused. PauseReconcile is how often
	// parked tasks of types no longer paused are unparked; default 10s.
	Pause          PauseView
	PauseReconcile time.Duration

	Logger     *slog.Logger          // default: discard
	Registerer prometheus.Registerer // metrics are registered here when set
	// MetricsMaxTypes bounds the values of the type label of the worker's
	// metrics: the first MetricsMaxTypes task types seen keep their name,
	// the others are counted under type="_other". Default 100
	// (DefaultMetricsMaxTypes).
	MetricsMaxTypes int

	// DeadLetterQueue bounds the dead letters waiting to be written to
	// DeadTopic (default 10000), and DeadLetterMaxAge how long one is
	// retried (default 10m); past either, it is dropped and counted. The
	// dead state is stored in Redis first: the dead topic is a
	// notification that never holds back a commit or the dead listing.
	DeadLetterQueue  int
	DeadLetterMaxAge time.Duration
	InstanceID       string // names this worker in claims and logs; default host-pid

	// OnOutcome, when set, is called with the outcome of every execution
	// (succeeded; failed and to be retried; dead) right after it was
	// stored in Redis, on the worker's goroutine that received Redis'
	// answer (not the handler's: its runner is on to the next task),
	// before the record may be committed. It must not block (the outcomes
	// stored with it wait for it): hand the outcome to a queue (the work
	// binary's outcome publisher drops what its bounded queue cannot
	// hold). A panic is recovered and logged. It is not called for an
	// outcome that was not stored (the task was cancelled, fired again or
	// finished elsewhere meanwhile), nor for a duplicate delivery of a
	// finished execution, so each execution is reported at most once: a
	// crash between storing the outcome and the call loses the call.
	OnOutcome OnOutcomeFunc
}

func (c *Config) setDefaults() {
	if c.Group == "" {
		c.Group = "delayq-work"
	}
	if len(c.Topics) == 0 {
		c.Topics = []string{task.DefaultTopic}
	}
	if c.DeadTopic == "" {
		c.DeadTopic = "dq.dead"
	}
	if c.Concurrency == 0 {
		c.Concurrency = 16
	}
	if c.MaxHeld == 0 {
		c.MaxHeld = c.Concurrency + DefaultHeldBatches*maxBatch
	}
	if c.MaxHeldBytes == 0 {
		c.MaxHeldBytes = DefaultMaxHeldBytes
	}
	if c.DefaultTimeout == 0 {
		c.DefaultTimeout = 30 * time.Second
	}
	c.Backoff = c.Backoff.withDefaults()
	if c.MaxPayload == 0 {
		c.MaxPayload = 1 << 20
	}
	if c.Namespace == "" {
		c.Namespace = "dq"
	}
	if c.Shards == 0 {
		c.Shards = 16
	}
	if c.Retention == 0 {
		c.Retention = 24 * time.Hour
	}
	if c.ClaimMargin == 0 {
		c.ClaimMargin = 10 * time.Second
	}
	if c.CommitInterval == 0 {
		c.CommitInterval = 100 * time.Millisecond
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 15 * time.Second
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = 10 * time.Second
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = time.Second
	}
	if c.RebalanceTimeout == 0 {
		c.RebalanceTimeout = 10 * time.Second
	}
	if c.PauseReconcile == 0 {
		c.PauseReconcile = defaultPauseReconcile
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.MetricsMaxTypes == 0 {
		c.MetricsMaxTypes = DefaultMetricsMaxTypes
	}
	if c.DeadLetterQueue == 0 {
		c.DeadLetterQueue = 10000
	}
	if c.DeadLetterMaxAge == 0 {
		c.DeadLetterMaxAge = 10 * time.Minute
	}
	if c.InstanceID == "" {
		host, _ := os.Hostname()
		c.InstanceID = host + "-" + strconv.Itoa(os.Getpid())
	}
}

func (c *Config) validate() error {
	switch {
	case len(c.Brokers) == 0:
		return errors.New("worker: no Kafka brokers")
	case c.Redis == nil:
		return errors.New("worker: no Redis client")
	case c.Concurrency < 1:
		return fmt.Errorf("worker: concurrency %d below 1", c.Concurrency)
	case c.MaxHeld < c.Concurrency:
		return fmt.Errorf("worker: MaxHeld %d below concurrency %d", c.MaxHeld, c.Concurrency)
	case c.MaxHeldBytes < 1:
		return fmt.Errorf("worker: MaxHeldBytes %d below 1", c.MaxHeldBytes)
	case c.DefaultTimeout < 0 || c.DefaultTimeout > task.MaxTimeout:
		return fmt.Errorf("worker: default timeout %s not within 0..%s", c.DefaultTimeout, task.MaxTimeout)
	case c.ClaimMargin < 0 || c.CommitInterval < 0 || c.ShutdownTimeout < 0:
		return errors.New("worker: negative claim margin, commit interval or shutdown timeout")
	case c.PauseReconcile < 0:
		return fmt.Errorf("worker: negative PauseReconcile %s", c.PauseReconcile)
	case c.MetricsMaxTypes < 1:
		return fmt.Errorf("worker: MetricsMaxTypes %d below 1", c.MetricsMaxTypes)
	case c.DeadLetterQueue < 1 || c.DeadLetterMaxAge < 0:
		return fmt.Errorf("worker: DeadLetterQueue %d below 1 or negative DeadLetterMaxAge", c.DeadLetterQueue)
	}
	return c.Backoff.validate()
}

func (c *Config) readerConfig() kafka.ReaderConfig {
	log := c.Logger.With("component", "kafka-reader")
	return kafka.ReaderConfig{
		Brokers:               c.Brokers,
		GroupID:               c.Group,
		GroupTopics:           c.Topics,
		MinBytes:              1,
		MaxBytes:              max(10<<20, 2*c.MaxPayload),
		MaxWait:               500 * time.Millisecond,
		QueueCapacity:         max(100, 2*c.Concurrency),
		CommitInterval:        0, // synchronous: the worker batches commits itself
		SessionTimeout:        c.SessionTimeout,
		HeartbeatInterval:     c.HeartbeatInterval,
		RebalanceTimeout:      c.RebalanceTimeout,
		JoinGroupBackoff:      time.Second,
		WatchPartitionChanges: true,
		StartOffset:           kafka.FirstOffset,
		Dialer: &kafka.Dialer{
			ClientID:      "delayq-work",
			Timeout:       10 * time.Second,
			DualStack:     true,
			TLS:           c.KafkaTLS,
			SASLMechanism: c.KafkaSASL,
		},
		Logger: kafka.LoggerFunc(func(msg string, args ...any) {
			log.Debug(fmt.Sprintf(msg, args...))
		}),
		ErrorLogger: kafka.LoggerFunc(func(msg string, args ...any) {
			log.Warn(fmt.Sprintf(msg, args...))
		}),
	}
}

// deadWriter is the dead-letter producer. It has a transport of its own
// (kafka-go's default one is process-global and keeps idle connections).
func (c *Config) deadWriter() *ownWriter {
	log := c.Logger.With("component", "kafka-writer")
	tr := &kafka.Transport{ClientID: "delayq-work", TLS: c.KafkaTLS, SASL: c.KafkaSASL}
	return &ownWriter{tr: tr, Writer: &kafka.Writer{
		Transport:              tr,
		Addr:                   kafka.TCP(c.Brokers...),
		Topic:                  c.DeadTopic,
		Balancer:               &kafka.Hash{},
		RequiredAcks:           kafka.RequireAll,
		BatchTimeout:           2 * time.Millisecond,
		BatchBytes:             int64(max(c.MaxPayload, 1<<20) + 64<<10),
		WriteTimeout:           10 * time.Second,
		ReadTimeout:            10 * time.Second,
		MaxAttempts:            3,
		AllowAutoTopicCreation: false,
		// failed writes are counted and logged (at most once a minute) by
		// deadLetters
		ErrorLogger: kafka.LoggerFunc(func(msg string, args ...any) {
			log.Debug(fmt.Sprintf(msg, args...))
		}),
	}}
}

// ownWriter is a writer that closes its transport's connections on Close.
type ownWriter struct {
	*kafka.Writer
	tr *kafka.Transport
}

func (w *ownWriter) Close() error {
	err := w.Writer.Close()
	w.tr.CloseIdleConnections()
	return err
}

// messageWriter is the producing half (dead letters).
type messageWriter interface {
	WriteMessages(ctx context.Context, msgs ...kafka.Message) error
	Close() error
}

// Worker consumes fired tasks and runs their handlers. Register handlers,
// then call Run once.
type Worker struct {
	cfg Config
	log *slog.Logger
	met *metrics

	mu       sync.RWMutex
	handlers map[string]HandlerFunc
	fallback HandlerFunc

	started  atomic.Bool
	fetching atomic.Bool
	missing  atomic.Pointer[string] // consumed topics missing while Run waits for them (waitTopics)

	// set by Run
	store    *redisstore.Store
	parker   parkStore // the store; a seam for tests
	claims   *claims
	finisher *finisher
	deadq    *deadLetters
	offs     *offsets
	sem      chan struct{}   // one per record held (fetched, not ended): Config.MaxHeld
	running  *sync.WaitGroup // every goroutine and item that holds records
	queue    runQueue        // admitted items waiting for a runner (runner.go)
	runners  *sync.WaitGroup // the runners
	// closed when no item runs any more: the runners exit
	stopRunners chan struct{}
	// heldBytes are the bytes of the records held (Config.MaxHeldBytes);
	// bytesFreed wakes a fetch loop that waits for them to fall below it
	heldBytes  atomic.Int64
	bytesFreed chan struct{}
}

// New checks cfg and builds a worker. It does not connect to anything.
func New(cfg Config) (*Worker, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	rc := cfg.readerConfig()
	if err := rc.Validate(); err != nil {
		return nil, fmt.Errorf("worker: kafka reader: %w", err)
	}
	return &Worker{
		cfg:      cfg,
		log:      cfg.Logger,
		met:      newMetrics(cfg.Registerer, cfg.MetricsMaxTypes),
		handlers: map[string]HandlerFunc{},
		offs:     newOffsets(),
	}, nil
}

// Handle registers h for tasks of taskType, replacing an earlier one.
func (w *Worker) Handle(taskType string, h HandlerFunc) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.handlers[taskType] = h
}

// HandleDefault registers h for every task type without its own handler.
// Without one, such tasks fail (and are retried: another worker version may
// know the type) until they die.
func (w *Worker) HandleDefault(h HandlerFunc) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fallback = h
}

func (w *Worker) handler(taskType string) HandlerFunc {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if h, ok := w.handlers[taskType]; ok {
		return h
	}
	return w.fallback
}

// Ready reports whether the worker consumes and Redis answers, for a
// readiness probe.
func (w *Worker) Ready(ctx context.Context) error {
	// Redis first: while it refuses us, the worker does not consume
	// either, and the Redis error says why
	if err := w.cfg.Redis.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	if !w.fetching.Load() {
		if m := w.missing.Load(); m != nil {
			return fmt.Errorf("%w: %s", ErrWaitingForTopics, *m)
		}
		return errors.New("worker: not consuming")
	}
	return nil
}

// ErrWaitingForTopics is Ready's answer while Run waits for consumed
// topics that are missing (or for the brokers' metadata that says so).
var ErrWaitingForTopics = errors.New("worker: waiting for kafka topics")

// topicPoll is how often Run looks again for consumed topics it found
// missing.
const topicPoll = time.Second

// waitTopics waits until every consumed topic exists (kafkatopic.Wait:
// a group Reader on a missing topic races in kafka-go; found by -race in
// CI, session 21), and reports false when ctx ended first. Ready names the
// missing topics meanwhile. A failed metadata request waits too: the
// Reader could not consume either.
func (w *Worker) waitTopics(ctx context.Context) bool {
	cl, done := kafkatopic.Client(w.cfg.Brokers, config.Conn{TLS: w.cfg.KafkaTLS, SASL: w.cfg.KafkaSASL}, "delayq-work")
	defer done()
	defer w.missing.Store(nil)
	warned := false
	ok := kafkatopic.Wait(ctx, cl, w.cfg.Topics, topicPoll, func(missing []string, err error, first bool) {
		warned = true
		if err != nil {
			why := fmt.Sprintf("cannot check: %v talking to kafka at %s", err, strings.Join(w.cfg.Brokers, ","))
			w.missing.Store(&why)
			if first {
				w.log.Warn("cannot check the kafka topics; the worker waits", "topics", w.cfg.Topics, "err", err)
			}
			return
		}
		m := strings.Join(missing, ", ")
		w.missing.Store(&m)
		if first {
			w.log.Warn("kafka topics missing; the worker waits for them (create them, or set DQ_KAFKA_AUTO_CREATE=true)", "missing", missing)
		}
	})
	if ok && warned {
		w.log.Info("kafka topics present; starting", "topics", w.cfg.Topics)
	}
	return ok
}

// Run consumes until ctx ends, then shuts down gracefully (see Config.
// ShutdownTimeout) and returns nil. While Redis is unreachable at start it
// retries; it returns an error when it cannot start (shard count mismatch).
// Run may be called once.
func (w *Worker) Run(ctx context.Context) error {
	if !w.started.CompareAndSwap(false, true) {
		return errors.New("worker: Run called twice")
	}
	if ll, ok := w.cfg.Limiter.(*LiveLimits); ok {
		// the rules are watched while the worker runs (ctx's end stops
		// fetching first; the last rules stay in force for the rest)
		wctx, cancel := context.WithCancel(ctx)
		var watch sync.WaitGroup
		defer watch.Wait()
		defer cancel() // also when Run returns early
		watch.Go(func() {
			if err := ll.Run(wctx); err != nil {
				w.log.Warn("rate-limit rules watch ended", "err", err)
			}
		})
	}
	if lp, ok := w.cfg.Pause.(*LivePause); ok {
		// the pause state is watched while the worker runs, like the rules
		wctx, cancel := context.WithCancel(ctx)
		var watch sync.WaitGroup
		defer watch.Wait()
		defer cancel()
		watch.Go(func() {
			if err := lp.Run(wctx); err != nil {
				w.log.Warn("pause state watch ended", "err", err)
			}
		})
	}
	rdb := w.cfg.Redis
	var store *redisstore.Store
	err := w.retryRedis(ctx, w.log, "open store", func() error {
		var err error
		store, err = redisstore.New(ctx, rdb, redisstore.Options{
			Namespace: w.cfg.Namespace, Shards: w.cfg.Shards, Retention: w.cfg.Retention,
			ReplicaAcks: w.cfg.Acks.Replicas, AckTimeout: w.cfg.Acks.Timeout, WaitAOF: w.cfg.Acks.AOF})
		return err
	})
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("worker: open store: %w", err)
	}
	if !w.waitTopics(ctx) {
		return nil // ctx ended first
	}
	w.store = store
	w.parker = store
	w.claims = newClaims(store, w.cfg.InstanceID)
	w.finisher = newFinisher(store, w.outcomeAnswered)
	writer := w.cfg.deadWriter()
	w.deadq = newDeadLetters(writer, w.cfg.DeadTopic, w.cfg.DeadLetterQueue, w.cfg.DeadLetterMaxAge, w.log, w.met)
	reader := kafka.NewReader(w.cfg.readerConfig())
	w.log.Info("worker started", "group", w.cfg.Group, "topics", w.cfg.Topics,
		"concurrency", w.cfg.Concurrency, "instance", w.cfg.InstanceID)
	return w.run(ctx, reader, writer)
}
