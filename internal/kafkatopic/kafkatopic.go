package kafkatopic

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/retry"
)

// Client is an admin client of brokers (metadata, topic creation) with
// conn's TLS and SASL, and the function that closes its connections.
func Client(brokers []string, conn config.Conn, clientID string) (*kafka.Client, func()) {
	tr := conn.Transport(clientID, 5*time.Second)
	return &kafka.Client{Addr: kafka.TCP(brokers...), Transport: tr, Timeout: 5 * time.Second}, tr.CloseIdleConnections
}

// CreateTopics creates topics with the given partitions and replication
// factor; one that exists already is fine.
func CreateTopics(ctx context.Context, cl *kafka.Client, topics []string, partitions, replication int) error {
	req := &kafka.CreateTopicsRequest{}
	for _, t := range topics {
		req.Topics = append(req.Topics, kafka.TopicConfig{Topic: t, NumPartitions: partitions, ReplicationFactor: replication})
	}
	resp, err := cl.CreateTopics(ctx, req)
	if err != nil {
		return fmt.Errorf("create topics %s: %w", strings.Join(topics, ","), err)
	}
	var errs []error
	for _, t := range topics {
		if e := resp.Errors[t]; e != nil && !errors.Is(e, kafka.TopicAlreadyExists) {
			errs = append(errs, fmt.Errorf("create topic %s (%d partitions, replication %d): %w", t, partitions, replication, e))
		}
	}
	return errors.Join(errs...)
}

// MissingTopics returns those of topics the cluster does not have, asking
// the cluster's metadata (never creating them).
func MissingTopics(ctx context.Context, cl *kafka.Client, topics []string) ([]string, error) {
	resp, err := cl.Metadata(ctx, &kafka.MetadataRequest{Topics: topics})
	if err != nil {
		return nil, fmt.Errorf("kafka metadata: %w", err)
	}
	have := map[string]bool{}
	for _, t := range resp.Topics {
		switch {
		case t.Error == nil:
			have[t.Name] = true
		case errors.Is(t.Error, kafka.UnknownTopicOrPartition):
		default:
			return nil, fmt.Errorf("kafka metadata of topic %s: %w", t.Name, t.Error)
		}
	}
	var missing []string
	for _, t := range topics {
		if !have[t] && !slices.Contains(missing, t) {
			missing = append(missing, t)
		}
	}
	return missing, nil
}

// Wait asks the brokers every poll until none of topics is missing, and
// reports false when ctx ended first. While some are missing, or the
// metadata request fails, it calls waiting with what it found (first:
// the first such call). A consumer joins its group only after this: a
// kafka-go group Reader on a missing topic switches generations every few
// seconds, and v0.4.51 races at the switch (Reader.unsubscribe of the old
// generation reads r.cancel while the new one's subscribe writes it).
func Wait(ctx context.Context, cl *kafka.Client, topics []string, poll time.Duration, waiting func(missing []string, err error, first bool)) bool {
	for first := true; ; first = false {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		missing, err := MissingTopics(cctx, cl, topics)
		cancel()
		switch {
		case err == nil && len(missing) == 0:
			return true
		case ctx.Err() != nil:
			return false
		}
		waiting(missing, err, first)
		if !retry.Sleep(ctx, poll) {
			return false
		}
	}
}

// TopicCheckConfig configures a TopicCheck.
type TopicCheckConfig struct {
	Brokers []string
	Topics  []string
	// Create creates missing topics with Partitions and Replication
	// (DQ_KAFKA_AUTO_CREATE).
	Create                  bool
	Partitions, Replication int
	// Every is the time between checks while a topic is missing (default
	// 5s); once all exist, checks are 6 times rarer.
	Every time.Duration
	// Conn is TLS and SASL (zero: plain TCP, no SASL).
	Conn config.Conn
	Log  *slog.Logger
}

// TopicCheck checks at start, then now and then, that the topics a
// process writes or reads exist (creating them when configured to): the
// missing ones are logged and reported by Missing, for /readyz.
type TopicCheck struct {
	cfg TopicCheckConfig
	log *slog.Logger

	mu      sync.Mutex
	checked bool
	missing []string
	err     error
}

// NewTopicCheck returns a check; Run runs it.
func NewTopicCheck(cfg TopicCheckConfig) *TopicCheck {
	if cfg.Every <= 0 {
		cfg.Every = 5 * time.Second
	}
	if cfg.Partitions <= 0 {
		cfg.Partitions = 8
	}
	if cfg.Replication <= 0 {
		cfg.Replication = 1
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &TopicCheck{cfg: cfg, log: log}
}

// Missing returns the topics found missing by the last check, and an
// error when no check has answered yet or the last one failed.
func (c *TopicCheck) Missing() ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.checked && c.err == nil {
		return nil, errors.New("kafka topics not checked yet")
	}
	return slices.Clone(c.missing), c.err
}

// Check checks once (creating missing topics when configured to) and
// returns the topics still missing.
func (c *TopicCheck) Check(ctx context.Context) ([]string, error) {
	cl, done := Client(c.cfg.Brokers, c.cfg.Conn, "delayq-topics")
	defer done()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	missing, err := MissingTopics(cctx, cl, c.cfg.Topics)
	if err == nil && len(missing) > 0 && c.cfg.Create {
		if err = CreateTopics(cctx, cl, missing, c.cfg.Partitions, c.cfg.Replication); err == nil {
			c.log.Info("created kafka topics", "topics", strings.Join(missing, ","),
				"partitions", c.cfg.Partitions, "replication", c.cfg.Replication)
			missing = nil
		}
	}
	if err != nil {
		// kafka-go's errors (a TLS handshake, a SASL refusal) do not say
		// where they happened
		err = fmt.Errorf("%w talking to kafka at %s", err, strings.Join(c.cfg.Brokers, ","))
	}
	c.record(missing, err)
	return missing, err
}

// record stores a check's answer and logs what changed.
func (c *TopicCheck) record(missing []string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err != nil:
		if c.err == nil {
			c.log.Warn("kafka topic check failed", "err", err)
		}
		c.err = err
		return
	case len(missing) > 0 && !slices.Equal(missing, c.missing):
		c.log.Warn("kafka topics missing: create them (or set DQ_KAFKA_AUTO_CREATE=true)", "topics", strings.Join(missing, ","))
	case len(missing) == 0 && (len(c.missing) > 0 || !c.checked):
		c.log.Info("kafka topics present", "topics", strings.Join(c.cfg.Topics, ","))
	}
	c.checked, c.err, c.missing = true, nil, missing
}

// Run checks now, then every Every while a topic is missing or the check
// fails, else 6 times less often, until ctx ends.
func (c *TopicCheck) Run(ctx context.Context) error {
	for {
		missing, err := c.Check(ctx)
		d := c.cfg.Every
		if err == nil && len(missing) == 0 {
			d *= 6
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}
