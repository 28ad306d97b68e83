package event

import (
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// The event process publishes a "dead" outcome record for a task made
// dead at fire time (its topic is missing past DQ_FIRE_POISON_GRACE) to
// DQ_OUTCOMES_TOPIC.
func TestPoisonTaskPublishesDeadOutcome(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 2)
	const topic = "ev.outcomes"
	w.kafka.CreateTopic(t, topic, 2)
	col := w.collect(topic)
	cfg := w.config("outcomes-poison")
	cfg.OutcomesTopic, cfg.PoisonGrace = topic, 300*time.Millisecond
	a := w.startAppConfig(cfg)
	w.schedule([]*task.Task{{ID: "poison-1", Type: "report", Topic: "no.such.topic", DueAt: time.Now()}})
	if !poll(20*time.Second, func() bool { return col.Total() >= 1 }) {
		t.Fatal("no outcome record")
	}
	r := col.All()[0]
	o := testenv.ParseOutcome(t, r)
	st, err := w.store.Get(t.Context(), "poison-1")
	if err != nil || st.State != task.StateDead {
		t.Fatalf("stored %+v, %v", st, err)
	}
	if o.ID != "poison-1" || o.Outcome != record.OutcomeDead || o.Type != "report" || o.Error != st.LastError || o.Shard != st.Shard {
		t.Errorf("outcome %+v", o)
	}
	if got := metric(t, a.Addr(), `delayq_outcomes_published_total{outcome="dead"}`); got != 1 {
		t.Errorf("published dead = %v", got)
	}
}

// With DQ_KAFKA_AUTO_CREATE the outcomes topic is created too.
func TestAutoCreateCreatesTheOutcomesTopic(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 2)
	cfg := w.config("outcomes-auto")
	cfg.OutcomesTopic = "auto.outcomes"
	cfg.KafkaAutoCreate, cfg.Partitions = true, 3
	w.startAppConfig(cfg)
	if !poll(15*time.Second, func() bool { return len(w.kafka.Cluster.PartitionInfos("auto.outcomes")) == 3 }) {
		t.Fatalf("outcomes topic not created: %d partitions", len(w.kafka.Cluster.PartitionInfos("auto.outcomes")))
	}
}

// DQ_OUTCOMES_TOPIC defaults to dq.outcomes; "" disables; a bad name is a
// config error naming the setting.
func TestConfigOutcomesTopic(t *testing.T) {
	c := DefaultConfig()
	if c.OutcomesTopic != record.DefaultOutcomesTopic {
		t.Errorf("default %q", c.OutcomesTopic)
	}
	c.OutcomesTopic = ""
	if err := c.Validate(); err != nil {
		t.Errorf("disabled: %v", err)
	}
	c.OutcomesTopic = "a/b"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "outcomes-topic") {
		t.Errorf("bad topic: %v", err)
	}
}
