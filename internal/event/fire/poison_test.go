package fire

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// poisonRun schedules n ordinary tasks due over the next second in the
// same shard as one poison task (due now), runs one poller with the given
// grace, and checks that the ordinary tasks all fire, none early (their
// lags are logged), and that the poison task becomes dead with a reason
// naming its topic and class, is in the dead set, and has a dead-letter
// notification. It returns the records collected.
func poisonRun(t *testing.T, f *fixture, grace time.Duration, poison *task.Task, class string, topics ...string) *testenv.Collector {
	t.Helper()
	const n = 300
	recs := f.kafka.Collect(t, append(topics, "dq.dead")...)
	cfg := f.config(0, 1)
	cfg.PoisonGrace = grace
	start := time.Now()
	runPoller(t, NewPoller(cfg))
	schedule(t, f.store, 0, poison)
	var tasks []*task.Task
	for i := range n {
		tasks = append(tasks, &task.Task{ID: fmt.Sprintf("ok-%03d", i), Type: "x", Payload: []byte("fine")})
	}
	for i := range 10 {
		schedule(t, f.store, time.Duration(i)*100*time.Millisecond, tasks[i*n/10:(i+1)*n/10]...)
	}
	testenv.WaitFor(t, 20*time.Second, "every ordinary task in Kafka", func() bool {
		for _, tk := range tasks {
			if len(recs.Get(tk.ID)) == 0 {
				return false
			}
		}
		return true
	})
	var lags []time.Duration
	for _, tk := range tasks {
		st, err := f.store.Get(t.Context(), tk.ID)
		if err != nil {
			t.Fatal(err)
		}
		r := recs.Get(tk.ID)[0]
		fired := hdrInt(t, r, record.HeaderFiredAt)
		if due := task.Millis(st.DueAt); fired < due {
			t.Errorf("%s fired early: due %d, fired %d", tk.ID, due, fired)
		}
		lags = append(lags, time.Duration(fired-task.Millis(st.DueAt))*time.Millisecond)
	}
	slices.Sort(lags)
	t.Logf("%d ordinary tasks beside a poison task (%s): lag p50 %v, p99 %v, max %v; all fired %v after start",
		n, class, lags[n/2], lags[n*99/100], lags[n-1], time.Since(start).Round(time.Millisecond))

	testenv.WaitFor(t, grace+15*time.Second, "poison task dead", func() bool {
		st, err := f.store.Get(t.Context(), poison.ID)
		return err == nil && st.State == task.StateDead
	})
	died := time.Since(start)
	st, err := f.store.Get(t.Context(), poison.ID)
	if err != nil {
		t.Fatal(err)
	}
	if died < grace {
		t.Errorf("poison task dead after %v, before its grace of %v", died, grace)
	}
	topic := poison.Topic
	if topic == "" {
		topic = task.DefaultTopic
	}
	if !strings.Contains(st.LastError, strconv.Quote(topic)) || !strings.Contains(st.LastError, class) {
		t.Errorf("dead reason %q does not name topic %s and class %s", st.LastError, topic, class)
	}
	dead, err := f.store.ListDead(t.Context(), 10)
	if err != nil || len(dead) != 1 || dead[0].Task.ID != poison.ID {
		t.Errorf("dead listing %v, %v; want %s", dead, err, poison.ID)
	}
	// counted when the poller has the script's answer, just after the
	// record reads dead
	testenv.WaitFor(t, 5*time.Second, "the dead task counted and out of grace", func() bool {
		return metricValue(f.m.DeadAtFire.WithLabelValues(class)) > 0 && metricValue(f.m.PoisonGrace) == 0
	})
	if got := metricValue(f.m.DeadAtFire.WithLabelValues(class)); got != 1 {
		t.Errorf("delayq_fire_dead_total{reason=%q} = %v, want 1", class, got)
	}
	if got := metricValue(f.m.PoisonGrace); got != 0 {
		t.Errorf("delayq_fire_poison_grace_tasks = %v after the task died, want 0", got)
	}
	testenv.WaitFor(t, 5*time.Second, "dead-letter notification", func() bool { return len(recs.Get(poison.ID)) > 0 })
	dl := recs.Get(poison.ID)[0]
	if dl.Topic != "dq.dead" || hdr(dl, record.HeaderError) != st.LastError {
		t.Errorf("dead-letter record on %s with dq-error %q, want dq.dead with %q", dl.Topic, hdr(dl, record.HeaderError), st.LastError)
	}
	for _, tk := range tasks {
		if rs := recs.Get(tk.ID); len(rs) != 1 || rs[0].Topic != task.DefaultTopic {
			t.Errorf("%s: %d records, want 1 on %s", tk.ID, len(rs), task.DefaultTopic)
		}
	}
	return recs
}

func TestPollerMakesATaskToAMissingTopicDeadWithoutWedgingItsShard(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	const topic = "some.missing.topic"
	poison := &task.Task{ID: "poison-missing", Type: "x", Topic: topic, Payload: []byte("p")}
	poisonRun(t, f, 1500*time.Millisecond, poison, RefusedUnknownTopic, task.DefaultTopic)

	// The topic is created, the task redriven: it fires.
	f.kafka.CreateTopic(t, topic, 2)
	recs := f.kafka.Collect(t, topic)
	if _, err := f.store.Redrive(t.Context(), poison.ID); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 15*time.Second, "redriven task fired to its topic", func() bool { return len(recs.Get(poison.ID)) > 0 })
	testenv.WaitFor(t, 5*time.Second, "redriven task fired", func() bool {
		st, err := f.store.Get(t.Context(), poison.ID)
		return err == nil && st.State == task.StateFired
	})
}

func TestPollerMakesAnOversizedTaskDeadWithoutWedgingItsShard(t *testing.T) {
	t.Parallel()
	k := testenv.StartKafka(t, "dq.dead")
	// The task topic takes records of at most 20 kB: the broker refuses
	// the partition batch holding the oversized record.
	createTopicWith(t, k, task.DefaultTopic, 4, map[string]string{"max.message.bytes": "20000"})
	f := newFixtureOn(t, 1, k)
	const size = 50_000
	poison := &task.Task{ID: "poison-big", Type: "x", Payload: []byte(strings.Repeat("b", size))}
	recs := poisonRun(t, f, time.Second, poison, RefusedTooLarge, task.DefaultTopic)

	dl := recs.Get(poison.ID)[0]
	if len(dl.Value) != record.DeadPayloadMax || hdr(dl, record.HeaderPayloadBytes) != strconv.Itoa(size) {
		t.Errorf("dead-letter copy: %d bytes, dq-payload-bytes %q; want %d bytes cut from %d", len(dl.Value), hdr(dl, record.HeaderPayloadBytes), record.DeadPayloadMax, size)
	}

	// The topic's limit is raised, the task redriven: it fires whole.
	cl := &kafka.Client{Addr: kafka.TCP(k.Brokers...), Transport: k.KafkaGoTransport(t)}
	resp, err := cl.IncrementalAlterConfigs(t.Context(), &kafka.IncrementalAlterConfigsRequest{
		Resources: []kafka.IncrementalAlterConfigsRequestResource{{
			ResourceType: kafka.ResourceTypeTopic, ResourceName: task.DefaultTopic,
			Configs: []kafka.IncrementalAlterConfigsRequestConfig{{Name: "max.message.bytes", Value: "1000000", ConfigOperation: kafka.ConfigOperationSet}},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resp.Resources {
		if r.Error != nil {
			t.Fatalf("raise max.message.bytes: %v", r.Error)
		}
	}
	if _, err := f.store.Redrive(t.Context(), poison.ID); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 15*time.Second, "redriven task fired whole", func() bool {
		for _, r := range recs.Get(poison.ID) {
			if r.Topic == task.DefaultTopic && len(r.Value) == size {
				return true
			}
		}
		return false
	})
}

func TestPollerFiresATaskWhoseTopicIsCreatedWithinTheGrace(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	const topic = "late.topic"
	recs := f.kafka.Collect(t, task.DefaultTopic)
	cfg := f.config(0, 1)
	cfg.PoisonGrace = 30 * time.Second
	runPoller(t, NewPoller(cfg))
	schedule(t, f.store, 0, &task.Task{ID: "late-1", Type: "x", Topic: topic})
	testenv.WaitFor(t, 10*time.Second, "task refused and in its grace", func() bool { return metricValue(f.m.PoisonGrace) == 1 })
	schedule(t, f.store, 0, &task.Task{ID: "beside-1", Type: "x"})
	testenv.WaitFor(t, 10*time.Second, "ordinary task fired while the other is in grace", func() bool { return len(recs.Get("beside-1")) == 1 })

	f.kafka.CreateTopic(t, topic, 2)
	late := f.kafka.Collect(t, topic)
	testenv.WaitFor(t, 20*time.Second, "task fired to the topic created within its grace", func() bool { return len(late.Get("late-1")) == 1 })
	testenv.WaitFor(t, 5*time.Second, "task fired", func() bool {
		st, err := f.store.Get(t.Context(), "late-1")
		return err == nil && st.State == task.StateFired
	})
	testenv.WaitFor(t, 5*time.Second, "grace gauge back to 0", func() bool { return metricValue(f.m.PoisonGrace) == 0 })
	if got := metricValue(f.m.DeadAtFire.WithLabelValues(RefusedUnknownTopic)); got != 0 {
		t.Errorf("delayq_fire_dead_total{reason=unknown_topic} = %v, want 0", got)
	}
}

// A topic created during the grace that the writer has not seen yet (its
// metadata cache is older) does not kill the task at the grace's end: the
// poller asks the cluster itself before it makes a task dead for a missing
// topic.
func TestPollerDoesNotKillATaskWhoseTopicExistsButIsNotSeenYet(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	stale := NewKafka(KafkaConfig{Brokers: f.kafka.Brokers, MaxAttempts: 2, WriteTimeout: 2 * time.Second, MetadataTTL: time.Hour})
	t.Cleanup(func() { _ = stale.Close() })
	const topic = "unseen.topic"
	const grace = 2 * time.Second
	cfg := f.config(0, 1)
	cfg.Producer, cfg.PoisonGrace = stale, grace
	runPoller(t, NewPoller(cfg))
	schedule(t, f.store, 0, &task.Task{ID: "unseen-1", Type: "x", Topic: topic})
	testenv.WaitFor(t, 10*time.Second, "task refused and in its grace", func() bool { return metricValue(f.m.PoisonGrace) == 1 })
	f.kafka.CreateTopic(t, topic, 2)
	created := time.Now()
	// Past the grace, refused again and again by the stale writer.
	refusedBefore := metricValue(f.m.ProduceErrors)
	testenv.WaitFor(t, 20*time.Second, "refused several times after the grace (or dead)", func() bool {
		if st, err := f.store.Get(t.Context(), "unseen-1"); err == nil && st.State == task.StateDead {
			return true
		}
		return time.Since(created) > grace+time.Second && metricValue(f.m.ProduceErrors) >= refusedBefore+6
	})
	st, err := f.store.Get(t.Context(), "unseen-1")
	if err != nil {
		t.Fatal(err)
	}
	if st.State == task.StateDead {
		t.Fatalf("task dead (%q) although its topic exists", st.LastError)
	}
	if got := metricValue(f.m.DeadAtFire.WithLabelValues(RefusedUnknownTopic)); got != 0 {
		t.Errorf("delayq_fire_dead_total{reason=unknown_topic} = %v, want 0", got)
	}
}
