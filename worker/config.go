package worker

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"

	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/work/engine"
)

// DefaultHeldBatches is how many micro-batches (of up to 256 records) a
// worker holds besides its Concurrency by default (Config.MaxHeld). Two
// were what bounded one work process on a 16-core machine whose Redis had
// cores to spare (8 masters): 22% of the raw kafka-go rate with 2, 29–38%
// with 8 (docs/benchmarks.md, session 21).
const DefaultHeldBatches = 8

// DefaultMaxHeldBytes is Config.MaxHeldBytes' default: with records of a
// few hundred bytes the count binds first; with large payloads (up to
// MaxPayload, 1 MiB by default) this does, long before MaxHeld records.
const DefaultMaxHeldBytes = 64 << 20

// DefaultMetricsMaxTypes is the default of Config.MetricsMaxTypes.
const DefaultMetricsMaxTypes = 100

// defaultPauseReconcile is the default of Config.PauseReconcile.
const defaultPauseReconcile = 10 * time.Second

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

	// Logger receives the worker's logs (lifecycle at Info; what needs
	// an operator, such as "kafka topics missing; the worker waits", at
	// Warn). Default: slog.Default() as it is when New is called; pass
	// slog.New(slog.DiscardHandler) for silence.
	Logger     *slog.Logger
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

	// UnhandledTypes says what becomes of a task whose type has no
	// handler (none registered with Handle, and no HandleDefault):
	// UnhandledFail (the default) fails it for good, dead at once with the
	// error `no handler for task type "<type>"`; UnhandledRetry fails it
	// like any error, retried with backoff until its last attempt (for
	// rolling deployments where another worker of the group may already
	// know the type).
	UnhandledTypes Unhandled

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

// Unhandled is what a worker does with a task whose type has no handler
// (Config.UnhandledTypes).
type Unhandled int

const (
	// UnhandledFail fails the task permanently: it is dead at once, its
	// error `no handler for task type "<type>"`. The default.
	UnhandledFail Unhandled = iota
	// UnhandledRetry fails the task like any handler error: it is retried
	// with backoff and dies after its last attempt.
	UnhandledRetry
)

// String is the policy's name: "fail" or "retry".
func (u Unhandled) String() string {
	switch u {
	case UnhandledFail:
		return "fail"
	case UnhandledRetry:
		return "retry"
	}
	return "Unhandled(" + strconv.Itoa(int(u)) + ")"
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
		c.MaxHeld = c.Concurrency + DefaultHeldBatches*engine.MaxBatch
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
		c.Logger = slog.Default()
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
	case c.UnhandledTypes != UnhandledFail && c.UnhandledTypes != UnhandledRetry:
		return fmt.Errorf("worker: UnhandledTypes %d is neither UnhandledFail nor UnhandledRetry", int(c.UnhandledTypes))
	}
	ec := c.engine(nil)
	if err := ec.Validate(); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	return c.Backoff.validate()
}

// engine is the engine's part of c (defaults set), with handler as its
// handler lookup.
func (c *Config) engine(handler func(typ string) engine.HandlerFunc) engine.Config {
	ec := engine.Config{
		Concurrency: c.Concurrency, MaxHeld: c.MaxHeld, MaxHeldBytes: c.MaxHeldBytes, MaxPayload: c.MaxPayload,
		DefaultTimeout: c.DefaultTimeout, ClaimMargin: c.ClaimMargin, CommitInterval: c.CommitInterval,
		ShutdownTimeout: c.ShutdownTimeout, PauseReconcile: c.PauseReconcile, Retention: c.Retention,
		Instance:  c.InstanceID,
		DeadTopic: c.DeadTopic, DeadLetterQueue: c.DeadLetterQueue, DeadLetterMaxAge: c.DeadLetterMaxAge,
		Logger: c.Logger, Registerer: c.Registerer, MetricsMaxTypes: c.MetricsMaxTypes,
		Handler: handler, RetryUnhandled: c.UnhandledTypes == UnhandledRetry, Backoff: c.Backoff.next,
		Limiter: limiterOf(c.Limiter), OnOutcome: outcomeOf(c.OnOutcome),
	}
	if c.Pause != nil {
		ec.Pause = c.Pause
	}
	if handler == nil { // validate: any lookup will do
		ec.Handler = func(string) engine.HandlerFunc { return nil }
	}
	return ec
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
