package work

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/kafkatopic"
	"github.com/delayq/delayq/internal/lograte"
	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/retry"
	"github.com/delayq/delayq/internal/tracing"
	"github.com/delayq/delayq/internal/work/kafkaread"
	"github.com/delayq/delayq/worker"
)

// Outcome hooks: a consumer of the outcomes topic inside the work process
// (consumer group "<DQ_GROUP>.hooks", so the work processes share the
// records) POSTs each outcome record of a type with hooks to its
// on_success (outcome succeeded) or on_failure (outcome dead) URL. The
// other outcomes call nothing and are not counted as skipped: failed (an
// attempt that will be retried), cancelled, and delivered (a task fired to
// a topic no work process handles: no handler ran it, so there is neither
// a success nor a failure to report).
//
// Delivery is at least once for every outcome record in the topic: a
// record's offset is committed only after its hook answered 2xx or was
// given up (a 4xx other than 408 and 429, or hookAttempts failures), so a
// crash of the work process, or a shutdown that abandons a call, calls the
// hooks of the records after the last commit again (commits are made every
// hookCommitInterval and at shutdown). Receivers drop duplicates by the
// webhook-id header (hookMessageID). Not covered: an outcome that was never
// published (the publisher is best effort: delayq_outcomes_dropped_total),
// a record older than its entry's max_age when read, and a record deleted
// by the topic's retention before it was read.
//
// Records of one partition (so: of one task id) are called in order, one
// at a time; partitions are spread over hookLanes goroutines, so a slow
// or failing hook holds up the records of the partitions that share its
// lane (for at most hookAttempts requests and their backoff per record),
// and, once that lane's queue is full, fetching for all lanes.

// hookLanes is how many hook calls run at once (at most), and
// hookLaneQueue how many records each lane holds before fetching waits.
const (
	hookLanes     = 8
	hookLaneQueue = 16
)

// hookCommitInterval is how often finished offsets are committed.
const hookCommitInterval = time.Second

// HooksGroupSuffix is appended to DQ_GROUP for the hooks' consumer group.
const HooksGroupSuffix = ".hooks"

// HooksConfig configures a Hooks consumer.
type HooksConfig struct {
	Hooks           map[string]OutcomeHooks // by type; OutcomeHooksDefault for the rest; zero Timeout, MaxAge: the defaults
	Brokers         []string
	Group           string // the consumer group (DQ_GROUP + HooksGroupSuffix)
	Topic           string // the outcomes topic
	SessionTimeout  time.Duration
	Heartbeat       time.Duration
	ShutdownTimeout time.Duration // how long calls in flight may finish after a stop
	Conn            config.Conn   // Kafka TLS and SASL
	Client          *http.Client  // shared with the task webhooks
	Secret          []byte        // DQ_WEBHOOK_SECRET as given (raw or whsec_<base64>); empty: unsigned
	Logger          *slog.Logger
	Registerer      prometheus.Registerer
}

// Hooks is the outcome hooks consumer.
type Hooks struct {
	cfg    HooksConfig
	log    *slog.Logger
	caller *hookCaller
	met    *hookMetrics
	now    func() time.Time
	// newReader opens the consumer (a kafka-go Reader in the group).
	newReader      func() kafkaread.Reader
	commitInterval time.Duration
	topicPoll      time.Duration // between checks while the topic is missing
	// refusedLog warns of records refused as not published by delayq
	// (record.Forged), once a minute: a producer could send many
	refusedLog *lograte.Warner
}

// NewHooks builds the consumer; Run starts it.
func NewHooks(cfg HooksConfig) (*Hooks, error) {
	if err := validateHooks(cfg.Hooks, cfg.Topic); err != nil {
		return nil, err
	}
	hooks := make(map[string]OutcomeHooks, len(cfg.Hooks))
	for typ, e := range cfg.Hooks { // zero durations: the defaults
		if e.Timeout <= 0 {
			e.Timeout = DefaultHookTimeout
		}
		if e.MaxAge <= 0 {
			e.MaxAge = DefaultHookMaxAge
		}
		hooks[typ] = e
	}
	cfg.Hooks = hooks
	secret := cfg.Secret
	if len(secret) > 0 {
		var err error
		if secret, err = worker.WebhookSecret(string(secret)); err != nil {
			return nil, fmt.Errorf("webhook-secret (DQ_WEBHOOK_SECRET): %w", err)
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	if cfg.Client == nil {
		cfg.Client = NewHTTPClient(hookLanes, nil)
	}
	log := cfg.Logger.With("component", "hooks")
	met := newHookMetrics(cfg.Registerer)
	h := &Hooks{
		cfg: cfg,
		log: log,
		met: met,
		now: time.Now,
		caller: &hookCaller{
			client: cfg.Client, secret: secret, met: met, log: log,
			attempts: hookAttempts, backoff: retry.Backoff{Min: hookBackoffFirst, Max: hookBackoffLongest},
		},
		commitInterval: hookCommitInterval,
		topicPoll:      5 * time.Second,
		refusedLog:     &lograte.Warner{Log: log, Every: time.Minute},
	}
	h.newReader = func() kafkaread.Reader { return kafka.NewReader(h.readerConfig()) }
	return h, nil
}

func (h *Hooks) readerConfig() kafka.ReaderConfig {
	rlog := h.log.With("component", "hooks-kafka-reader")
	return kafka.ReaderConfig{
		Brokers:               h.cfg.Brokers,
		GroupID:               h.cfg.Group,
		GroupTopics:           []string{h.cfg.Topic},
		MinBytes:              1,
		MaxBytes:              2 * record.OutcomeValueMax,
		MaxWait:               500 * time.Millisecond,
		QueueCapacity:         hookLanes * hookLaneQueue,
		CommitInterval:        0, // synchronous: commitLoop batches commits
		SessionTimeout:        h.cfg.SessionTimeout,
		HeartbeatInterval:     h.cfg.Heartbeat,
		RebalanceTimeout:      10 * time.Second,
		JoinGroupBackoff:      time.Second,
		WatchPartitionChanges: true,
		// A new group starts at the oldest retained record; max_age keeps
		// old outcomes from calling hooks.
		StartOffset: kafka.FirstOffset,
		Dialer: &kafka.Dialer{
			ClientID:      "delayq-work-hooks",
			Timeout:       10 * time.Second,
			DualStack:     true,
			TLS:           h.cfg.Conn.TLS,
			SASLMechanism: h.cfg.Conn.SASL,
		},
		Logger: kafka.LoggerFunc(func(msg string, args ...any) {
			rlog.Debug(fmt.Sprintf(msg, args...))
		}),
		ErrorLogger: kafka.LoggerFunc(func(msg string, args ...any) {
			rlog.Warn(fmt.Sprintf(msg, args...))
		}),
	}
}

// Run consumes the outcomes topic until ctx ends.
//
// Shutdown order, once ctx ends: stop fetching; records queued and not
// started are dropped (not committed); a hook request in flight may finish
// within ShutdownTimeout (then it is cancelled and its record stays
// uncommitted), a wait between retries ends at once (its record stays
// uncommitted); commit what finished; close the reader (leaves the group).
func (h *Hooks) Run(ctx context.Context) error {
	if !h.waitTopic(ctx) {
		return nil
	}
	r := h.newReader()
	h.log.Info("hooks consumer started", "topic", h.cfg.Topic, "group", h.cfg.Group, "types", len(h.cfg.Hooks))
	callCtx, abandon := context.WithCancel(context.WithoutCancel(ctx))
	defer abandon()
	offs := &hookOffsets{next: map[topicPartition]int64{}, dirty: map[topicPartition]bool{}}

	var lanes sync.WaitGroup
	queues := make([]chan kafka.Message, hookLanes)
	for i := range queues {
		q := make(chan kafka.Message, hookLaneQueue)
		queues[i] = q
		lanes.Go(func() {
			for m := range q {
				if ctx.Err() != nil {
					continue // stopping: not started, not committed
				}
				if h.handle(ctx, callCtx, &m) {
					offs.done(m)
				}
			}
		})
	}
	bgCtx, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	var bg sync.WaitGroup
	bg.Go(func() { h.commitLoop(bgCtx, r, offs) })

	fetchErr := h.fetchLoop(ctx, r, queues)

	for _, q := range queues {
		close(q)
	}
	if !kafkaread.Drain(&lanes, h.cfg.ShutdownTimeout) {
		h.log.Warn("hooks: shutdown timeout; cancelling hook calls in flight (called again after a restart)")
		abandon()
		lanes.Wait() // requests return once cancelled
	}
	stopBG()
	bg.Wait()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	if err := h.commit(cctx, r, offs); err != nil {
		h.log.Warn("hooks: final commit failed; their hooks are called again after a restart", "err", err)
	}
	cancel()
	if err := r.Close(); err != nil {
		h.log.Warn("hooks: close kafka reader", "err", err)
	}
	h.log.Info("hooks consumer stopped")
	return fetchErr
}

// waitTopic waits until the outcomes topic exists (kafkatopic.Wait; a
// consumer group on a missing topic also logs a warning every second). It
// reports false when ctx ended first.
func (h *Hooks) waitTopic(ctx context.Context) bool {
	cl, done := kafkatopic.Client(h.cfg.Brokers, h.cfg.Conn, "delayq-work-hooks")
	defer done()
	warned := false
	ok := kafkatopic.Wait(ctx, cl, []string{h.cfg.Topic}, h.topicPoll, func(_ []string, err error, first bool) {
		warned = true
		switch {
		case !first:
		case err != nil:
			h.log.Warn("hooks: cannot check the outcomes topic; hooks wait", "topic", h.cfg.Topic, "err", err)
		default:
			h.log.Warn("hooks: outcomes topic missing; hooks wait for it (create it, or set DQ_KAFKA_AUTO_CREATE=true)", "topic", h.cfg.Topic)
		}
	})
	if ok && warned {
		h.log.Info("hooks: outcomes topic present; starting", "topic", h.cfg.Topic)
	}
	return ok
}

// fetchLoop hands records to the lanes (by partition) until ctx ends.
func (h *Hooks) fetchLoop(ctx context.Context, r kafkaread.Reader, queues []chan kafka.Message) error {
	f := kafkaread.Fetcher{R: r, Log: h.log, Name: "hooks"}
	for {
		m, ok, err := f.Next(ctx)
		if !ok {
			return err
		}
		select {
		case queues[int(m.Partition)%len(queues)] <- m:
		case <-ctx.Done():
			return nil
		}
	}
}

// handle calls the hook of one record, if it has one. It reports whether
// the record is finished with (its offset may be committed).
func (h *Hooks) handle(stop, callCtx context.Context, m *kafka.Message) bool {
	// Only records delayq published: a task fired into the outcomes
	// topic, whose payload is a made-up outcome, must not call a hook.
	if why := record.Forged(m); why != "" {
		h.met.refused.WithLabelValues(why).Inc()
		h.refusedLog.Warn("hooks: record not published by delayq in the outcomes topic refused; no hook called",
			"reason", why, "topic", m.Topic, "partition", m.Partition, "offset", m.Offset)
		return true
	}
	// The headers say the outcome and type without decoding the value:
	// most records have no hook.
	outcome, typ := headerValue(m, record.HeaderOutcome), headerValue(m, record.HeaderType)
	if outcome != "" && typ != "" {
		e := hooksFor(h.cfg.Hooks, typ)
		if url, _ := e.URL(outcome); url == "" {
			return true
		}
	}
	o, err := record.ParseOutcome(m)
	if err != nil {
		h.met.skipped.WithLabelValues("invalid").Inc()
		h.log.Warn("hooks: invalid outcome record skipped", "topic", m.Topic, "partition", m.Partition, "offset", m.Offset, "err", err)
		return true
	}
	e := hooksFor(h.cfg.Hooks, o.Type)
	url, hook := e.URL(o.Outcome)
	if url == "" {
		return true
	}
	if age := h.now().Sub(o.FinishedAt); age > e.MaxAge {
		h.met.skipped.WithLabelValues("stale").Inc()
		h.log.Info("hooks: outcome older than max_age; no hook called", "task_id", o.ID, "type", o.Type,
			"outcome", o.Outcome, "hook", hook, "age", age.Round(time.Second), "max_age", e.MaxAge)
		return true
	}
	// the requests continue the trace of the outcome's task (its record's
	// traceparent: the task's own)
	return h.caller.deliver(stop, tracing.ContextOfRecord(callCtx, m), hook, url, e.Timeout, o, m.Value)
}

func headerValue(m *kafka.Message, key string) string {
	for _, hd := range m.Headers {
		if hd.Key == key {
			return string(hd.Value)
		}
	}
	return ""
}

func (h *Hooks) commitLoop(ctx context.Context, r kafkaread.Reader, offs *hookOffsets) {
	kafkaread.CommitEvery(ctx, h.commitInterval, h.log, "hooks", func(ctx context.Context) error {
		defer func() { h.met.lag.Set(float64(max(r.Stats().Lag, 0))) }()
		return h.commit(ctx, r, offs)
	})
}

// commit commits every partition whose finished offset moved.
func (h *Hooks) commit(ctx context.Context, r kafkaread.Reader, offs *hookOffsets) error {
	msgs := offs.pending()
	if len(msgs) == 0 {
		return nil
	}
	if err := r.CommitMessages(ctx, msgs...); err != nil {
		return err
	}
	offs.committed(msgs)
	return nil
}

type topicPartition struct {
	topic     string
	partition int
}

// hookOffsets tracks, per partition, the offset after the last finished
// record. A lane finishes a partition's records in the order they were
// fetched, so every record before it (fetched by this process since the
// partition was assigned, or committed before) is finished too. A record
// fetched again after a rebalance is called again (at least once) and
// never moves the offset back.
type hookOffsets struct {
	mu    sync.Mutex
	next  map[topicPartition]int64
	dirty map[topicPartition]bool
}

func (o *hookOffsets) done(m kafka.Message) {
	tp := topicPartition{m.Topic, m.Partition}
	o.mu.Lock()
	defer o.mu.Unlock()
	if m.Offset+1 > o.next[tp] {
		o.next[tp] = m.Offset + 1
		o.dirty[tp] = true
	}
}

// pending is what to commit: CommitMessages commits a message's offset + 1.
func (o *hookOffsets) pending() []kafka.Message {
	o.mu.Lock()
	defer o.mu.Unlock()
	var msgs []kafka.Message
	for tp := range o.dirty {
		msgs = append(msgs, kafka.Message{Topic: tp.topic, Partition: tp.partition, Offset: o.next[tp] - 1})
	}
	return msgs
}

func (o *hookOffsets) committed(msgs []kafka.Message) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, m := range msgs {
		tp := topicPartition{m.Topic, m.Partition}
		if o.next[tp] == m.Offset+1 {
			delete(o.dirty, tp)
		}
	}
}

// newAppHooks is the work process's hooks consumer, nil when no hook is
// configured. It shares client (and so DQ_WEBHOOK_TLS_*) and
// DQ_WEBHOOK_SECRET with the task webhooks.
func newAppHooks(cfg Config, kc config.Conn, client *http.Client, reg prometheus.Registerer, log *slog.Logger) (*Hooks, error) {
	if !anyHook(cfg.Hooks) {
		return nil, nil
	}
	return NewHooks(HooksConfig{
		Hooks:           cfg.Hooks,
		Brokers:         cfg.Brokers,
		Group:           cfg.Group + HooksGroupSuffix,
		Topic:           cfg.OutcomesTopic,
		SessionTimeout:  cfg.SessionTimeout,
		Heartbeat:       cfg.Heartbeat,
		ShutdownTimeout: cfg.ShutdownGrace,
		Conn:            kc,
		Client:          client,
		Secret:          []byte(cfg.WebhookSecret),
		Logger:          log,
		Registerer:      reg,
	})
}
