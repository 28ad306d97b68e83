package event

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/outcome"
	"github.com/delayq/delayq/internal/record"
)

// Config is the event binary's configuration.
type Config struct {
	config.Common
	config.Etcd
	config.Kafka
	KafkaBrokers    []string
	DefaultTopic    string
	DeadTopic       string
	SessionTTL      time.Duration
	FireBatch       int
	Lease           time.Duration
	IdlePoll        time.Duration
	ProcessID       string
	KafkaAutoCreate bool
	KafkaBatchWait  time.Duration
	KafkaTimeout    time.Duration
	// Partitions and Replication are what KafkaAutoCreate creates topics
	// with.
	Partitions  int
	Replication int
	// PoisonGrace is how long a task Kafka refuses for good keeps being
	// fired again before it is made dead.
	PoisonGrace time.Duration
	// FireAhead is how long before its due time a shard's next task is
	// taken (fire.Config.Ahead).
	FireAhead time.Duration
	// Scheduler runs the schedule scheduler's campaign in this process
	// (one leader among the event processes materializes every
	// schedule's ticks SchedulerLookahead ahead, a pass every
	// SchedulerInterval).
	Scheduler          bool
	SchedulerLookahead time.Duration
	SchedulerInterval  time.Duration
	// OutcomesTopic (DQ_OUTCOMES_TOPIC, default dq.outcomes; "none" or ""
	// disables)
	// receives a "dead" outcome record for every task made dead at fire
	// time, best effort (created by KafkaAutoCreate).
	OutcomesTopic string
	// OutcomesDelivered (DQ_OUTCOMES_DELIVERED, default false) publishes a
	// "delivered" outcome record for every task that ends delivered: off
	// by default, because a bridge's consumers read the task's own record,
	// and a burst would double the writes to Kafka (and overflow the
	// publisher's bounded queue: records dropped).
	OutcomesDelivered bool
}

// bind registers every setting on b.
func (c *Config) bind(b *config.Binder) {
	c.BindCommon(b, ":7071")
	c.BindEtcd(b, "etcd endpoints (shard leadership, the shard map)")
	b.List(&c.KafkaBrokers, "kafka-brokers", "DQ_KAFKA_BROKERS", "127.0.0.1:9092", "Kafka bootstrap brokers")
	c.BindKafka(b)
	b.String(&c.DefaultTopic, "default-topic", "DQ_DEFAULT_TOPIC", "dq.tasks", "topic of tasks that name none")
	b.String(&c.DeadTopic, "dead-topic", "DQ_DEAD_TOPIC", "dq.dead", "topic of records that cannot be fired to their own topic")
	b.Duration(&c.SessionTTL, "session-ttl", "DQ_SESSION_TTL", 3*time.Second, "etcd session lease TTL (whole seconds): a dead process' shards are taken over after about this long")
	b.Int(&c.FireBatch, "fire-batch", "DQ_FIRE_BATCH", 500, "most tasks per take and Kafka batch")
	b.Duration(&c.Lease, "lease", "DQ_LEASE", 30*time.Second, "claim lease: a claim not acked within it fires again")
	b.Duration(&c.FireAhead, "fire-ahead", "DQ_FIRE_AHEAD", 0, "how long before its due time a task is taken from Redis (whole ms; 0, the default: when due): the take's round trip happens before the due time and the task is produced at it (a lower median lag where CPUs are to spare, a longer tail where they are not: docs/benchmarks.md); a cancel or reschedule in that window answers that the task fired")
	b.Duration(&c.IdlePoll, "idle-poll", "DQ_IDLE_POLL", 5*time.Second, "longest sleep of an idle shard poller (covers lost wake-ups)")
	b.String(&c.ProcessID, "process-id", "DQ_PROCESS_ID", "", "unique name of this process in etcd (default hostname-pid-random)")
	b.Bool(&c.KafkaAutoCreate, "kafka-auto-create", "DQ_KAFKA_AUTO_CREATE", false, "create missing topics (the default and dead topics at start, any other on first use) with DQ_PARTITIONS and DQ_REPLICATION")
	b.Int(&c.Partitions, "partitions", "DQ_PARTITIONS", 8, "partitions of topics created by kafka-auto-create")
	b.Int(&c.Replication, "replication", "DQ_REPLICATION", 1, "replication factor of topics created by kafka-auto-create")
	b.Duration(&c.PoisonGrace, "fire-poison-grace", "DQ_FIRE_POISON_GRACE", 30*time.Second, "how long a task Kafka refuses for good (missing topic, record too large, ...) is fired again before it is made dead")
	b.Bool(&c.OutcomesDelivered, "outcomes-delivered", "DQ_OUTCOMES_DELIVERED", false, `publish a "delivered" outcome record (with the fire receipt) for every task that ends delivered, best effort`)
	b.Bool(&c.Scheduler, "scheduler", "DQ_SCHEDULER", true, "campaign for the schedule scheduler (periodic tasks): its leader materializes the ticks of every schedule")
	b.Duration(&c.SchedulerLookahead, "scheduler-lookahead", "DQ_SCHEDULER_LOOKAHEAD", 5*time.Second, "how far ahead of their time schedule ticks become tasks; an outage of the scheduler longer than this misses ticks (see the schedules' catchup)")
	b.Duration(&c.SchedulerInterval, "scheduler-interval", "DQ_SCHEDULER_INTERVAL", 500*time.Millisecond, "time between two passes of the scheduler leader (a schedule change starts one at once)")
	b.String(&c.OutcomesTopic, "outcomes-topic", "DQ_OUTCOMES_TOPIC", record.DefaultOutcomesTopic, `topic of outcome records: a "dead" record for every task made dead at fire time, best effort; none (or "") disables`)
	b.Duration(&c.KafkaBatchWait, "kafka-batch-timeout", "DQ_KAFKA_BATCH_TIMEOUT", time.Millisecond, "kafka-go BatchTimeout: how long a partition batch waits to fill")
	b.Duration(&c.KafkaTimeout, "kafka-write-timeout", "DQ_KAFKA_WRITE_TIMEOUT", 5*time.Second, "timeout of one Kafka produce request")
}

// ParseConfig reads flags, then DQ_* environment variables, then defaults.
func ParseConfig(args []string, getenv func(string) string, usage io.Writer) (Config, *config.Binder, error) {
	var c Config
	b := config.NewBinder("event")
	c.bind(b)
	if err := b.Parse(args, getenv, usage); err != nil {
		return c, b, err
	}
	if c.ProcessID == "" {
		c.ProcessID = DefaultProcessID()
	}
	return c, b, nil
}

// DefaultConfig is the configuration with every default (tests start from it).
func DefaultConfig() Config {
	c, _, err := ParseConfig(nil, func(string) string { return "" }, io.Discard)
	if err != nil {
		panic(err) // defaults always parse
	}
	return c
}

// DefaultProcessID is hostname-pid-random.
func DefaultProcessID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "event"
	}
	host = strings.ReplaceAll(host, "/", "-")
	var b [4]byte
	_, _ = rand.Read(b[:])
	return host + "-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
}

// Validate checks the configuration.
func (c Config) Validate() error {
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
	switch {
	case len(c.EtcdEndpoints) == 0:
		return fmt.Errorf("etcd-endpoints: at least one endpoint")
	case len(c.KafkaBrokers) == 0:
		return fmt.Errorf("kafka-brokers: at least one broker")
	case c.DefaultTopic == "" || c.DeadTopic == "":
		return fmt.Errorf("default-topic and dead-topic must be set")
	case c.SessionTTL < time.Second || c.SessionTTL > time.Minute:
		return fmt.Errorf("session-ttl %s: between 1s and 1m (a few seconds)", c.SessionTTL)
	case c.FireBatch < 1 || c.FireBatch > 5000:
		return fmt.Errorf("fire-batch %d: between 1 and 5000", c.FireBatch)
	case c.Lease < time.Second:
		return fmt.Errorf("lease %s: at least 1s", c.Lease)
	case c.Lease <= c.KafkaTimeout:
		return fmt.Errorf("lease %s: must exceed kafka-write-timeout %s", c.Lease, c.KafkaTimeout)
	case c.FireAhead < 0 || c.FireAhead > time.Second || c.FireAhead%time.Millisecond != 0:
		return fmt.Errorf("fire-ahead %s: whole milliseconds between 0 and 1s", c.FireAhead)
	case c.IdlePoll < time.Millisecond || c.IdlePoll > time.Minute:
		return fmt.Errorf("idle-poll %s: between 1ms and 1m", c.IdlePoll)
	case c.ProcessID == "" || strings.ContainsAny(c.ProcessID, "/ \t\n"):
		return fmt.Errorf("process-id %q: non-empty, without slashes or spaces", c.ProcessID)
	case c.KafkaBatchWait <= 0 || c.KafkaBatchWait > time.Second:
		return fmt.Errorf("kafka-batch-timeout %s: between 1ns and 1s", c.KafkaBatchWait)
	case c.KafkaTimeout < 100*time.Millisecond:
		return fmt.Errorf("kafka-write-timeout %s: at least 100ms", c.KafkaTimeout)
	case c.Partitions < 1 || c.Partitions > 10000:
		return fmt.Errorf("partitions %d: between 1 and 10000", c.Partitions)
	case c.Replication < 1 || c.Replication > 32:
		return fmt.Errorf("replication %d: between 1 and 32", c.Replication)
	case c.PoisonGrace < time.Millisecond || c.PoisonGrace > 24*time.Hour:
		return fmt.Errorf("fire-poison-grace %s: between 1ms and 24h", c.PoisonGrace)
	case outcome.ValidateTopic(c.OutcomesTopic) != nil:
		return outcome.ValidateTopic(c.OutcomesTopic)
	case c.SchedulerInterval < 10*time.Millisecond || c.SchedulerInterval > time.Minute:
		return fmt.Errorf("scheduler-interval %s: between 10ms and 1m", c.SchedulerInterval)
	case c.SchedulerLookahead <= c.SchedulerInterval || c.SchedulerLookahead > time.Hour:
		return fmt.Errorf("scheduler-lookahead %s: longer than scheduler-interval %s, at most 1h", c.SchedulerLookahead, c.SchedulerInterval)
	}
	return nil
}
