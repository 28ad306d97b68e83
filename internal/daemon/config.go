package daemon

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/outcome"
	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/task"
)

// Defaults of the daemon's own settings.
const (
	DefaultHTTPAddr     = ":7070"
	DefaultJournalDir   = "./dq-journal"
	DefaultMaxBody      = 1 << 20 // 1 MiB
	DefaultMaxBatch     = 1000
	DefaultRedisTimeout = 2 * time.Second
	// DefaultMaxRecordBytes is Kafka's default message.max.bytes, rounded
	// down (the broker counts the batch framing too).
	DefaultMaxRecordBytes = 1_000_000
	DefaultDeadTopic      = "dq.dead"
	DefaultMaxSchedules   = 10_000
)

// Config is the daemon's configuration: the settings every binary shares
// plus the write path's own.
type Config struct {
	config.Common

	// APIToken, when set, is required as "Authorization: Bearer <token>"
	// on every /v1/ request. /healthz, /readyz and /metrics stay open.
	APIToken string
	// JournalDir holds the compensation journal (journal.db). One daemon
	// process per directory.
	JournalDir string
	// MaxBody bounds every request body in bytes (a batch included).
	MaxBody int64
	// MaxBatch bounds the number of tasks in one POST /v1/tasks/batch.
	MaxBatch int
	// MaxRecordBytes bounds the Kafka record a task becomes when it fires
	// (key, payload, headers and framing; record.Size). A task over it
	// is refused at submit (413 record_too_large): the broker would refuse
	// its record, and it would never run. Set it to the topics'
	// max.message.bytes.
	MaxRecordBytes int64
	// RedisTimeout bounds every Redis operation of a request. A write that
	// times out is journaled (its outcome is unknown; replay is idempotent).
	RedisTimeout time.Duration
	// Etcd is where rate-limit rules and the shard map live (/v1/limits,
	// /v1/shards). No endpoints disables both APIs (they answer 503).
	config.Etcd
	// KafkaBrokers (DQ_KAFKA_BROKERS; default none), with the Kafka
	// connection settings (DQ_KAFKA_TLS*, DQ_KAFKA_SASL_*), is where the
	// daemon publishes a "cancelled" outcome record for every task it
	// cancels, to OutcomesTopic (DQ_OUTCOMES_TOPIC, default dq.outcomes;
	// "none" or "" disables). No brokers: the daemon publishes no outcomes.
	KafkaBrokers  []string
	OutcomesTopic string
	config.Kafka

	// AllowedTopics (DQ_ALLOWED_TOPICS), when set, are the only topics a
	// task may name: patterns in path.Match syntax ("orders.*"). Empty:
	// every topic but the reserved ones. Reserved always: delayq's own
	// topics (OutcomesTopic, DeadTopic) and Kafka's internal ones (__*).
	AllowedTopics []string
	// DeadTopic (DQ_DEAD_TOPIC, default dq.dead) is the dead-letter topic
	// of the event and work processes; the daemon only refuses tasks that
	// name it (a task fired there would forge a dead letter).
	DeadTopic string
	// AllowedOrigins (DQ_ALLOWED_ORIGINS) are the browser origins, besides
	// the daemon's own, allowed to send state-changing requests
	// ("https://ops.example.com"). A request from any other origin is
	// refused (403 cross_origin).
	AllowedOrigins []string
	// MaxSchedules (DQ_MAX_SCHEDULES, default 10000) caps the schedules of
	// the namespace; a PUT creating one more answers 422 too_many_schedules.
	MaxSchedules int
}

// Bind registers every setting on b (flags mirror the DQ_* variables).
func (c *Config) Bind(b *config.Binder) {
	c.BindCommon(b, DefaultHTTPAddr)
	b.Secret(&c.APIToken, "api-token", "DQ_API_TOKEN", "", "bearer token required on /v1/* (empty: no authentication)")
	b.String(&c.JournalDir, "journal-dir", "DQ_JOURNAL_DIR", DefaultJournalDir, "directory of the compensation journal")
	b.Size(&c.MaxBody, "max-body", "DQ_MAX_BODY", DefaultMaxBody, "maximum request body")
	b.Int(&c.MaxBatch, "max-batch", "DQ_MAX_BATCH", DefaultMaxBatch, "maximum tasks per batch request")
	b.Size(&c.MaxRecordBytes, "max-record-bytes", "DQ_MAX_RECORD_BYTES", DefaultMaxRecordBytes, "maximum size of a task's Kafka record in bytes, headers included (the topics' max.message.bytes)")
	b.Duration(&c.RedisTimeout, "redis-timeout", "DQ_REDIS_TIMEOUT", DefaultRedisTimeout, "timeout of one Redis operation")
	c.BindEtcd(b, "etcd endpoints holding the rate-limit rules (/v1/limits) and the shard map (/v1/shards)")
	b.List(&c.KafkaBrokers, "kafka-brokers", "DQ_KAFKA_BROKERS", "", `Kafka bootstrap brokers for "cancelled" outcome records (empty: the daemon publishes no outcomes)`)
	b.String(&c.OutcomesTopic, "outcomes-topic", "DQ_OUTCOMES_TOPIC", record.DefaultOutcomesTopic, `topic of outcome records: "cancelled" for every task cancelled, best effort, with kafka-brokers; none (or "") disables`)
	c.BindKafka(b)
	b.List(&c.AllowedTopics, "allowed-topics", "DQ_ALLOWED_TOPICS", "", "topics a task may name, as path.Match patterns (orders.*); empty: any topic but delayq's own and Kafka's internal __* ones")
	b.String(&c.DeadTopic, "dead-topic", "DQ_DEAD_TOPIC", DefaultDeadTopic, "the dead-letter topic of the event and work processes; tasks may not name it")
	b.List(&c.AllowedOrigins, "allowed-origins", "DQ_ALLOWED_ORIGINS", "", "browser origins besides the daemon's own allowed to send state-changing requests (https://ops.example.com)")
	b.Int(&c.MaxSchedules, "max-schedules", "DQ_MAX_SCHEDULES", DefaultMaxSchedules, "most schedules in the namespace")
}

// DefaultConfig is the configuration with every default applied, as Run
// would build it from an empty environment.
func DefaultConfig() Config {
	var c Config
	b := config.NewBinder("daemon")
	c.Bind(b)
	_ = b.Parse(nil, func(string) string { return "" }, nil)
	return c
}

// Validate checks the configuration and says which setting is wrong.
func (c *Config) Validate() error {
	if err := c.Common.Validate(); err != nil {
		return err
	}
	if err := c.ValidateEtcd(); err != nil {
		return err
	}
	if err := c.Kafka.Validate(); err != nil {
		return err
	}
	if err := config.CheckBrokers(c.KafkaBrokers); err != nil {
		return err
	}
	var errs []error
	if err := outcome.ValidateTopic(c.OutcomesTopic); err != nil {
		errs = append(errs, err)
	}
	if c.HTTPAddr == "" {
		errs = append(errs, errors.New("http-addr (DQ_HTTP_ADDR): must not be empty"))
	}
	if strings.ContainsFunc(c.APIToken, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		errs = append(errs, errors.New("api-token (DQ_API_TOKEN): must not contain white space or control characters"))
	}
	if strings.TrimSpace(c.JournalDir) == "" {
		errs = append(errs, errors.New("journal-dir (DQ_JOURNAL_DIR): must not be empty"))
	}
	if c.MaxBody < 1024 || c.MaxBody > 1<<30 {
		errs = append(errs, fmt.Errorf("max-body (DQ_MAX_BODY) %d: between 1024 and %d bytes", c.MaxBody, 1<<30))
	}
	if c.MaxRecordBytes < 1024 || c.MaxRecordBytes > 1<<30 {
		errs = append(errs, fmt.Errorf("max-record-bytes (DQ_MAX_RECORD_BYTES) %d: between 1024 and %d bytes", c.MaxRecordBytes, 1<<30))
	}
	if c.MaxBatch < 1 || c.MaxBatch > 100000 {
		errs = append(errs, fmt.Errorf("max-batch (DQ_MAX_BATCH) %d: between 1 and 100000", c.MaxBatch))
	}
	if c.RedisTimeout < 10*time.Millisecond || c.RedisTimeout > time.Minute {
		errs = append(errs, fmt.Errorf("redis-timeout (DQ_REDIS_TIMEOUT) %s: between 10ms and 1m", c.RedisTimeout))
	}
	for _, p := range c.AllowedTopics {
		if _, err := path.Match(p, ""); err != nil || p == "" {
			errs = append(errs, fmt.Errorf("allowed-topics (DQ_ALLOWED_TOPICS) %q: not a path.Match pattern", task.Truncate(p, 64)))
		}
	}
	if strings.TrimSpace(c.DeadTopic) == "" {
		errs = append(errs, errors.New("dead-topic (DQ_DEAD_TOPIC): must not be empty"))
	}
	for _, o := range c.AllowedOrigins {
		if u, err := url.Parse(o); err != nil || u.Scheme == "" || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
			errs = append(errs, fmt.Errorf("allowed-origins (DQ_ALLOWED_ORIGINS) %q: want scheme://host[:port]", task.Truncate(o, 64)))
		}
	}
	if c.MaxSchedules < 1 || c.MaxSchedules > 10_000_000 {
		errs = append(errs, fmt.Errorf("max-schedules (DQ_MAX_SCHEDULES) %d: between 1 and 10000000", c.MaxSchedules))
	}
	return errors.Join(errs...)
}
