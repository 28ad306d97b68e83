package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/kafkatopic"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/work/engine"
)

// Task is one fired task as a handler sees it.
//
// (Its fields are those of the runtime's own execution type, in the same
// order: the worker hands a handler the runtime's value as a *Task,
// without a copy. Add a field to both, or the worker does not compile.)
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
// last attempt it is dead. [JSON]'s errors are marked [Permanent] already:
// a handler that returns one kills a task whose payload it cannot decode. The context ends when the task's timeout passes
// (a timeout is a failure) or when the worker shuts down; handlers must
// return soon after it ends. A panic is a failure.
type HandlerFunc func(ctx context.Context, t *Task) error

// Worker consumes fired tasks and runs their handlers. Register handlers,
// then call Run once.
type Worker struct {
	cfg Config
	log *slog.Logger
	eng *engine.Engine // the runtime: every record's lifecycle

	mu       sync.RWMutex
	handlers map[string]engine.HandlerFunc // each a HandlerFunc (see handlerOf)
	fallback engine.HandlerFunc

	started atomic.Bool
	missing atomic.Pointer[string] // consumed topics missing while Run waits for them (waitTopics)
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
	w := &Worker{cfg: cfg, log: cfg.Logger, handlers: map[string]engine.HandlerFunc{}}
	eng, err := engine.New(cfg.engine(w.handler))
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	w.eng = eng
	return w, nil
}

// Handle registers h for tasks of taskType, replacing an earlier one.
func (w *Worker) Handle(taskType string, h HandlerFunc) {
	hf := handlerOf(h)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.handlers[taskType] = hf
}

// HandleDefault registers h for every task type without its own handler.
// Without one, such tasks fail as Config.UnhandledTypes says: dead at once
// (UnhandledFail, the default) or retried until their last attempt
// (UnhandledRetry: another worker version may know the type).
func (w *Worker) HandleDefault(h HandlerFunc) {
	hf := handlerOf(h)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fallback = hf
}

// handler is the engine's handler lookup.
func (w *Worker) handler(taskType string) engine.HandlerFunc {
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
	if !w.eng.Fetching() {
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
	stopWatches := w.watch(ctx)
	defer stopWatches()
	var store *redisstore.Store
	err := engine.RetryRedis(ctx, w.log, "open store", func() error {
		var err error
		store, err = redisstore.New(ctx, w.cfg.Redis, redisstore.Options{
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
	if advice := store.PersistenceAdvice(ctx); advice != "" {
		w.log.Warn(advice) // the outcomes it stores are durable writes too
	}
	if !w.waitTopics(ctx) {
		return nil // ctx ended first
	}
	writer := w.cfg.deadWriter()
	reader := kafka.NewReader(w.cfg.readerConfig())
	w.log.Info("worker started", "group", w.cfg.Group, "topics", w.cfg.Topics,
		"concurrency", w.cfg.Concurrency, "instance", w.cfg.InstanceID)
	return w.eng.Run(ctx, store, reader, writer)
}

// watch keeps the live rate-limit rules and the live pause state of the
// Config (LiveLimits, LivePause) current while the worker runs (ctx's end
// stops fetching first; the last state stays in force for the rest). Its
// stop ends the watches and waits for them.
func (w *Worker) watch(ctx context.Context) (stop func()) {
	wctx, cancel := context.WithCancel(ctx)
	var watches sync.WaitGroup
	if ll, ok := w.cfg.Limiter.(*LiveLimits); ok {
		watches.Go(func() {
			if err := ll.Run(wctx); err != nil {
				w.log.Warn("rate-limit rules watch ended", "err", err)
			}
		})
	}
	if lp, ok := w.cfg.Pause.(*LivePause); ok {
		watches.Go(func() {
			if err := lp.Run(wctx); err != nil {
				w.log.Warn("pause state watch ended", "err", err)
			}
		})
	}
	return func() {
		cancel() // also when Run returns early
		watches.Wait()
	}
}
