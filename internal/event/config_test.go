package event

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/config"
)

func TestConfigDefaultsEnvAndFlags(t *testing.T) {
	env := map[string]string{
		"DQ_ETCD_ENDPOINTS": "e1:2379, e2:2379",
		"DQ_SESSION_TTL":    "5s",
		"DQ_FIRE_BATCH":     "200",
		"DQ_PROCESS_ID":     "from-env",
	}
	c, _, err := ParseConfig([]string{"-fire-batch", "300"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	switch {
	case strings.Join(c.EtcdEndpoints, ",") != "e1:2379,e2:2379":
		t.Errorf("etcd endpoints %v", c.EtcdEndpoints)
	case c.SessionTTL != 5*time.Second || c.FireBatch != 300 || c.ProcessID != "from-env":
		t.Errorf("ttl %v batch %d id %q", c.SessionTTL, c.FireBatch, c.ProcessID)
	case c.HTTPAddr != ":7071" || c.DefaultTopic != "dq.tasks" || c.DeadTopic != "dq.dead":
		t.Errorf("defaults: http %q topics %q %q", c.HTTPAddr, c.DefaultTopic, c.DeadTopic)
	case c.Lease != 30*time.Second || c.IdlePoll != 5*time.Second || c.KafkaAutoCreate:
		t.Errorf("defaults: lease %v idle %v auto-create %v", c.Lease, c.IdlePoll, c.KafkaAutoCreate)
	case strings.Join(c.KafkaBrokers, ",") != "127.0.0.1:9092":
		t.Errorf("kafka brokers %v", c.KafkaBrokers)
	}
	d := DefaultConfig()
	if d.PoisonGrace != 30*time.Second || d.Partitions != 8 || d.Replication != 1 {
		t.Errorf("defaults: poison grace %v partitions %d replication %d", d.PoisonGrace, d.Partitions, d.Replication)
	}
	if g, _, err := ParseConfig(nil, func(k string) string { return map[string]string{"DQ_FIRE_POISON_GRACE": "2s", "DQ_PARTITIONS": "3"}[k] }, io.Discard); err != nil || g.PoisonGrace != 2*time.Second || g.Partitions != 3 {
		t.Errorf("DQ_FIRE_POISON_GRACE=2s DQ_PARTITIONS=3: %v %d %v", g.PoisonGrace, g.Partitions, err)
	}
	if d.ProcessID == "" || d.ProcessID == DefaultConfig().ProcessID {
		t.Errorf("default process ids %q should be unique per call", d.ProcessID)
	}
	if _, _, err := ParseConfig([]string{"-h"}, func(string) string { return "" }, io.Discard); !errors.Is(err, config.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
}

func TestConfigValidateRefusesBadValues(t *testing.T) {
	for name, mod := range map[string]func(*Config){
		"ttl below 1s":       func(c *Config) { c.SessionTTL = 500 * time.Millisecond },
		"no etcd":            func(c *Config) { c.EtcdEndpoints = nil },
		"no brokers":         func(c *Config) { c.KafkaBrokers = nil },
		"batch zero":         func(c *Config) { c.FireBatch = 0 },
		"lease below writes": func(c *Config) { c.Lease = 2 * time.Second },
		"idle poll zero":     func(c *Config) { c.IdlePoll = 0 },
		"id with slash":      func(c *Config) { c.ProcessID = "a/b" },
		"bad namespace":      func(c *Config) { c.Namespace = "a:b" },
		"partitions zero":    func(c *Config) { c.Partitions = 0 },
		"replication zero":   func(c *Config) { c.Replication = 0 },
		"poison grace zero":  func(c *Config) { c.PoisonGrace = 0 },
		"sched interval 0":   func(c *Config) { c.SchedulerInterval = 0 },
		"sched lookahead":    func(c *Config) { c.SchedulerLookahead = c.SchedulerInterval },
	} {
		c := DefaultConfig()
		mod(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestConfigScheduler(t *testing.T) {
	d := DefaultConfig()
	if !d.Scheduler || d.SchedulerLookahead != 5*time.Second || d.SchedulerInterval != 500*time.Millisecond {
		t.Errorf("scheduler defaults: on %v lookahead %v interval %v", d.Scheduler, d.SchedulerLookahead, d.SchedulerInterval)
	}
	env := map[string]string{"DQ_SCHEDULER": "false", "DQ_SCHEDULER_LOOKAHEAD": "2s", "DQ_SCHEDULER_INTERVAL": "100ms"}
	c, _, err := ParseConfig(nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil || c.Scheduler || c.SchedulerLookahead != 2*time.Second || c.SchedulerInterval != 100*time.Millisecond {
		t.Errorf("%v: on %v lookahead %v interval %v, %v", env, c.Scheduler, c.SchedulerLookahead, c.SchedulerInterval, err)
	}
	c = DefaultConfig()
	c.SchedulerLookahead = 400 * time.Millisecond
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "scheduler-lookahead") {
		t.Errorf("lookahead below the interval: %v, want an error naming scheduler-lookahead", err)
	}
}
