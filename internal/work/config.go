package work

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/outcome"
	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/worker"
)

// Config is the work binary's configuration.
type Config struct {
	config.Common
	config.Etcd  // DQ_ETCD_*: rate-limit rules; no endpoints: no limits
	config.Kafka // DQ_KAFKA_TLS*, DQ_KAFKA_SASL_*

	Brokers        []string      // DQ_KAFKA_BROKERS
	Group          string        // DQ_GROUP
	Topics         []string      // DQ_TOPICS
	DeadTopic      string        // DQ_DEAD_TOPIC
	Concurrency    int           // DQ_WORK_CONCURRENCY
	MaxHeld        int           // DQ_WORK_MAX_HELD: 0 is concurrency + worker.DefaultHeldBatches × 256
	MaxHeldBytes   int           // DQ_WORK_MAX_HELD_BYTES
	WebhookURL     string        // DQ_WEBHOOK_URL: every task type
	WorkConfig     string        // DQ_WORK_CONFIG: JSON file with per-type webhooks
	WebhookSecret  string        // DQ_WEBHOOK_SECRET: signs webhook requests
	DefaultTimeout time.Duration // DQ_DEFAULT_TIMEOUT
	BackoffMin     time.Duration // DQ_BACKOFF_MIN
	BackoffMax     time.Duration // DQ_BACKOFF_MAX
	BackoffJitter  float64       // DQ_BACKOFF_JITTER
	MaxPayload     int           // DQ_MAX_PAYLOAD
	ClaimMargin    time.Duration // DQ_CLAIM_MARGIN
	SessionTimeout time.Duration // DQ_KAFKA_SESSION_TIMEOUT
	Heartbeat      time.Duration // DQ_KAFKA_HEARTBEAT
	AutoCreate     bool          // DQ_KAFKA_AUTO_CREATE: create missing topics at start
	Partitions     int           // DQ_PARTITIONS: of topics AutoCreate creates
	Replication    int           // DQ_REPLICATION: of topics AutoCreate creates
	MaxTypes       int           // DQ_METRICS_MAX_TYPES: task types with a metric label of their own
	// OutcomesTopic (DQ_OUTCOMES_TOPIC, default dq.outcomes; "none" or ""
	// disables)
	// receives an outcome record for every succeeded and dead task, and
	// with OutcomesAttempts (DQ_OUTCOMES_ATTEMPTS) for every failed
	// attempt that will be retried: best effort (see internal/outcome).
	OutcomesTopic    string
	OutcomesAttempts bool
	// Unhandled (DQ_UNHANDLED_TYPES: fail, the default, or retry) is what
	// becomes of a task whose type has no webhook (no DQ_WEBHOOK_URL and
	// none of its own in DQ_WORK_CONFIG): dead at once, or retried until
	// its last attempt (worker.Config.UnhandledTypes).
	Unhandled string

	// Webhooks are the per-type webhooks read from WorkConfig by Load.
	Webhooks map[string]HookConfig
	// Hooks are the per-type outcome hooks read from WorkConfig by Load
	// (key OutcomeHooksDefault: every type without its own); see
	// hookconfig.go.
	Hooks map[string]OutcomeHooks
	// WebhookTLS (DQ_WEBHOOK_TLS_CA, _CERT, _KEY): a private CA trusted
	// besides the system's roots, and a client certificate; see WebhookTLS.
	WebhookTLS config.TLSFiles

	jitter string // DQ_BACKOFF_JITTER as given; Load parses it into BackoffJitter
}

// HookConfig is one per-type webhook of the DQ_WORK_CONFIG file.
type HookConfig struct {
	URL     string        `json:"url"`
	Timeout time.Duration `json:"-"`
}

// Bind registers every setting on b.
func (c *Config) Bind(b *config.Binder) {
	c.BindCommon(b, ":7072")
	b.List(&c.Brokers, "kafka-brokers", "DQ_KAFKA_BROKERS", "127.0.0.1:9092", "Kafka bootstrap brokers")
	b.String(&c.Group, "group", "DQ_GROUP", "delayq-work", "Kafka consumer group")
	b.List(&c.Topics, "topics", "DQ_TOPICS", task.DefaultTopic, "Kafka topics to consume")
	b.String(&c.DeadTopic, "dead-topic", "DQ_DEAD_TOPIC", "dq.dead", "Kafka topic for dead letters (must exist)")
	b.Int(&c.Concurrency, "concurrency", "DQ_WORK_CONCURRENCY", 16, "handlers running at once")
	b.Int(&c.MaxHeld, "max-held", "DQ_WORK_MAX_HELD", 0, "records fetched and not yet finished, held at once; 0: concurrency + 2048")
	b.SizeInt(&c.MaxHeldBytes, "max-held-bytes", "DQ_WORK_MAX_HELD_BYTES", worker.DefaultMaxHeldBytes, "bytes (key, value, headers) of the records held at once: no fetch while they reach it")
	b.String(&c.WebhookURL, "webhook-url", "DQ_WEBHOOK_URL", "", "webhook for every task type without its own")
	b.String(&c.WorkConfig, "work-config", "DQ_WORK_CONFIG", "", `JSON file with per-type webhooks and outcome hooks: {"webhooks": {"<type>": {"url": "...", "timeout": "5s"}}, "hooks": {"<type>" or "*": {"on_success": "...", "on_failure": "...", "timeout": "10s", "max_age": "1h"}}}`)
	b.Secret(&c.WebhookSecret, "webhook-secret", "DQ_WEBHOOK_SECRET", "", "signs webhook requests (Standard Webhooks webhook-signature); raw or whsec_<base64>")
	b.TLS(&c.WebhookTLS, "webhook", "DQ_WEBHOOK", "webhook servers", false, false)
	// For webhooks the CA is added to the system's roots (Binder.TLS says "that CA alone").
	b.FlagSet().Lookup("webhook-tls-ca").Usage = "CA certificate file (PEM) trusted for https webhooks in addition to the system's roots (env DQ_WEBHOOK_TLS_CA)"
	b.Duration(&c.DefaultTimeout, "default-timeout", "DQ_DEFAULT_TIMEOUT", 30*time.Second, "handler timeout of tasks without their own")
	b.Duration(&c.BackoffMin, "backoff-min", "DQ_BACKOFF_MIN", time.Second, "delay before the first retry")
	b.Duration(&c.BackoffMax, "backoff-max", "DQ_BACKOFF_MAX", 10*time.Minute, "longest delay between retries")
	b.String(&c.jitter, "backoff-jitter", "DQ_BACKOFF_JITTER", "0.5", "fraction of each retry delay taken off at random, 0..1 (1: full jitter)")
	b.SizeInt(&c.MaxPayload, "max-payload", "DQ_MAX_PAYLOAD", 1<<20, "records with a larger payload are dead-lettered")
	b.Int(&c.MaxTypes, "metrics-max-types", "DQ_METRICS_MAX_TYPES", worker.DefaultMetricsMaxTypes, `task types that keep their own "type" metric label; the rest are counted as type="_other"`)
	b.Duration(&c.ClaimMargin, "claim-margin", "DQ_CLAIM_MARGIN", 10*time.Second, "added to a task's timeout for its execution claim's TTL")
	b.Duration(&c.SessionTimeout, "kafka-session-timeout", "DQ_KAFKA_SESSION_TIMEOUT", 10*time.Second, "consumer group session timeout")
	b.Duration(&c.Heartbeat, "kafka-heartbeat", "DQ_KAFKA_HEARTBEAT", time.Second, "consumer group heartbeat interval")
	c.BindEtcd(b, "etcd endpoints holding the per-type rate-limit rules (until etcd answers, no type is limited)")
	c.BindKafka(b)
	b.Bool(&c.AutoCreate, "kafka-auto-create", "DQ_KAFKA_AUTO_CREATE", false, "create missing topics (DQ_TOPICS and the dead topic) at start with DQ_PARTITIONS and DQ_REPLICATION")
	b.Int(&c.Partitions, "partitions", "DQ_PARTITIONS", 8, "partitions of topics created by kafka-auto-create")
	b.Int(&c.Replication, "replication", "DQ_REPLICATION", 1, "replication factor of topics created by kafka-auto-create")
	b.String(&c.OutcomesTopic, "outcomes-topic", "DQ_OUTCOMES_TOPIC", record.DefaultOutcomesTopic, `topic of outcome records (succeeded, dead; failed attempts with outcomes-attempts), published best effort; none (or "") disables (created by kafka-auto-create)`)
	b.Bool(&c.OutcomesAttempts, "outcomes-attempts", "DQ_OUTCOMES_ATTEMPTS", false, "publish a \"failed\" outcome record for every failed attempt that will be retried, too")
	b.String(&c.Unhandled, "unhandled-types", "DQ_UNHANDLED_TYPES", worker.UnhandledFail.String(), "a task whose type has no webhook: fail (dead at once, \"no handler for task type\") or retry (with backoff until its last attempt, e.g. while a rolling deployment adds the type's webhook)")
}

// ErrNoHandlers is returned when neither a default nor a per-type webhook
// is configured: the worker would fail every task.
var ErrNoHandlers = errors.New("no handlers: set DQ_WEBHOOK_URL (every task type) or DQ_WORK_CONFIG (per-type webhooks)")

// Load reads the DQ_WORK_CONFIG file, then validates everything.
func (c *Config) Load() error {
	if err := c.Common.Validate(); err != nil {
		return err
	}
	if c.jitter != "" {
		j, err := strconv.ParseFloat(c.jitter, 64)
		if err != nil {
			return fmt.Errorf("backoff-jitter %q: a number between 0 and 1", c.jitter)
		}
		c.BackoffJitter = j
	}
	if c.WorkConfig != "" {
		f, err := os.Open(c.WorkConfig)
		if err != nil {
			return fmt.Errorf("work config: %w", err)
		}
		webhooks, hooks, err := parseWorkConfig(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("work config %s: %w", c.WorkConfig, err)
		}
		c.Webhooks, c.Hooks = webhooks, hooks
	}
	return c.Validate()
}

// Validate checks the settings (after Load read the file).
func (c *Config) Validate() error {
	if err := c.ValidateEtcd(); err != nil {
		return err
	}
	if err := c.Kafka.Validate(); err != nil {
		return err
	}
	if err := config.CheckBrokers(c.Brokers); err != nil {
		return err
	}
	switch {
	case len(c.Brokers) == 0:
		return errors.New("kafka-brokers: at least one broker")
	case c.Group == "":
		return errors.New("group: required")
	case len(c.Topics) == 0:
		return errors.New("topics: at least one topic")
	case c.DeadTopic == "":
		return errors.New("dead-topic: required")
	case c.Concurrency < 1 || c.Concurrency > 10000:
		return fmt.Errorf("concurrency %d: between 1 and 10000", c.Concurrency)
	case c.MaxHeld != 0 && (c.MaxHeld < c.Concurrency || c.MaxHeld > 1000000):
		return fmt.Errorf("max-held %d: 0 (the default) or between concurrency (%d) and 1000000", c.MaxHeld, c.Concurrency)
	case c.MaxHeldBytes < 1<<20:
		return fmt.Errorf("max-held-bytes %d: at least 1MiB", c.MaxHeldBytes)
	case c.DefaultTimeout <= 0 || c.DefaultTimeout > task.MaxTimeout:
		return fmt.Errorf("default-timeout %s: between 1ms and %s", c.DefaultTimeout, task.MaxTimeout)
	case c.BackoffMin <= 0 || c.BackoffMax < c.BackoffMin:
		return fmt.Errorf("backoff-min %s, backoff-max %s: 0 < min <= max", c.BackoffMin, c.BackoffMax)
	case c.BackoffJitter < 0 || c.BackoffJitter > 1:
		return fmt.Errorf("backoff-jitter %g: between 0 and 1", c.BackoffJitter)
	case c.MaxPayload < 1:
		return fmt.Errorf("max-payload %d: at least 1", c.MaxPayload)
	case c.MaxTypes < 1 || c.MaxTypes > 100000:
		return fmt.Errorf("metrics-max-types %d: between 1 and 100000", c.MaxTypes)
	case c.ClaimMargin < 0:
		return fmt.Errorf("claim-margin %s: not negative", c.ClaimMargin)
	case c.SessionTimeout <= 0 || c.Heartbeat <= 0 || c.Heartbeat >= c.SessionTimeout:
		return fmt.Errorf("kafka-heartbeat %s must be positive and below kafka-session-timeout %s", c.Heartbeat, c.SessionTimeout)
	case c.Partitions < 1 || c.Partitions > 10000:
		return fmt.Errorf("partitions %d: between 1 and 10000", c.Partitions)
	case c.Replication < 1 || c.Replication > 32:
		return fmt.Errorf("replication %d: between 1 and 32", c.Replication)
	case c.WebhookURL == "" && len(c.Webhooks) == 0:
		return ErrNoHandlers
	case c.Unhandled != "" && c.Unhandled != worker.UnhandledFail.String() && c.Unhandled != worker.UnhandledRetry.String():
		return fmt.Errorf("unhandled-types %q: fail or retry", c.Unhandled)
	}
	if err := outcome.ValidateTopic(c.OutcomesTopic); err != nil {
		return err
	}
	if _, err := WebhookTLS(c.WebhookTLS); err != nil {
		return err
	}
	if c.WebhookURL != "" {
		if _, err := NewWebhook(c.WebhookURL, 0, nil, nil); err != nil {
			return fmt.Errorf("webhook-url: %w", err)
		}
	}
	for typ, h := range c.Webhooks {
		if _, err := NewWebhook(h.URL, h.Timeout, nil, nil); err != nil {
			return fmt.Errorf("work config: type %q: %w", typ, err)
		}
	}
	return validateHooks(c.Hooks, c.OutcomesTopic)
}

// unhandled is the worker's policy for task types without a webhook
// (Validate checked the setting).
func (c *Config) unhandled() worker.Unhandled {
	if c.Unhandled == worker.UnhandledRetry.String() {
		return worker.UnhandledRetry
	}
	return worker.UnhandledFail
}

// parseWorkConfig reads the per-type webhook file: webhooks and outcome
// hooks (see parseHooks). Unknown fields are an error (a typo must not
// silently drop a webhook).
func parseWorkConfig(r io.Reader) (map[string]HookConfig, map[string]OutcomeHooks, error) {
	data, err := io.ReadAll(io.LimitReader(r, 1<<20))
	if err != nil {
		return nil, nil, err
	}
	var file struct {
		Webhooks map[string]struct {
			URL     string `json:"url"`
			Timeout string `json:"timeout"`
		} `json:"webhooks"`
		Hooks json.RawMessage `json:"hooks"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&file); err != nil {
		return nil, nil, err
	}
	hooks, err := parseHooks(file.Hooks)
	if err != nil {
		return nil, nil, err
	}
	out := make(map[string]HookConfig, len(file.Webhooks))
	for typ, h := range file.Webhooks {
		if typ == "" {
			return nil, nil, errors.New("webhook with an empty task type")
		}
		if h.URL == "" {
			return nil, nil, fmt.Errorf("type %q: url is required", typ)
		}
		hc := HookConfig{URL: h.URL}
		if h.Timeout != "" {
			d, err := time.ParseDuration(h.Timeout)
			if err != nil || d <= 0 {
				return nil, nil, fmt.Errorf("type %q: timeout %q: a positive duration such as \"5s\"", typ, h.Timeout)
			}
			hc.Timeout = d
		}
		out[typ] = hc
	}
	return out, hooks, nil
}
