package fire

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// Every fired copy gets a receipt naming where Kafka put it; a task whose
// topic is not worked ends delivered, one of a worked topic stays fired.
func TestPollerStoresReceiptsAndDeliversUnworkedTopics(t *testing.T) {
	t.Parallel()
	const shards, n = 2, 120
	f := newFixture(t, shards)
	recs := f.kafka.Collect(t, task.DefaultTopic, otherTopic)
	for s := range shards {
		c := f.config(s, int64(200+s))
		c.Worked = func(topic string) bool { return topic == task.DefaultTopic }
		runPoller(t, NewPoller(c))
	}
	var tasks []*task.Task
	for i := range n {
		tk := &task.Task{ID: fmt.Sprintf("rc-%03d", i), Type: "t", Payload: []byte("p")}
		if i%2 == 1 {
			tk.Topic = otherTopic
		}
		tasks = append(tasks, tk)
	}
	schedule(t, f.store, 300*time.Millisecond, tasks...)
	testenv.WaitFor(t, 15*time.Second, "every task in Kafka", func() bool { return recs.Distinct() >= n })
	testenv.WaitFor(t, 5*time.Second, "every receipt stored", func() bool { return metricValue(f.m.Receipts) >= n })
	for _, tk := range tasks {
		rs := recs.Get(tk.ID)
		if len(rs) != 1 {
			t.Fatalf("%s: %d records", tk.ID, len(rs))
		}
		r := rs[0]
		got, err := f.store.Get(t.Context(), tk.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := task.StateFired
		if tk.Topic == otherTopic {
			want = task.StateDelivered
		}
		rc := got.Receipt
		switch {
		case got.State != want:
			t.Errorf("%s (topic %q): %s, want %s", tk.ID, r.Topic, got.State, want)
		case rc == nil:
			t.Errorf("%s: no receipt", tk.ID)
		case rc.Partition != r.Partition || rc.Offset != r.Offset:
			t.Errorf("%s: receipt at %d/%d, the record is at %d/%d", tk.ID, rc.Partition, rc.Offset, r.Partition, r.Offset)
		case !rc.FiredAt.Equal(r.Timestamp.Truncate(time.Millisecond)):
			t.Errorf("%s: receipt fired at %s, the record's timestamp %s", tk.ID, rc.FiredAt, r.Timestamp)
		case rc.FiredAt.Before(rc.DueAt) || !rc.DueAt.Equal(got.DueAt):
			t.Errorf("%s: fired at %s for due %s (task due %s)", tk.ID, rc.FiredAt, rc.DueAt, got.DueAt)
		case rc.Token != int64(200+got.Shard) || rc.Attempt != 1 || rc.Gen != got.Gen:
			t.Errorf("%s: receipt %+v", tk.ID, rc)
		case rc.Delivered != (want == task.StateDelivered):
			t.Errorf("%s: receipt delivered %v in state %s", tk.ID, rc.Delivered, got.State)
		}
	}
	if got := metricValue(f.m.Delivered); got != n/2 {
		t.Errorf("fire_delivered_total = %v, want %d", got, n/2)
	}
}

// capture is an OutcomePublisher that keeps what it is given.
type capture struct {
	mu   sync.Mutex
	recs []record.OutcomeRecord
}

func (c *capture) Publish(o record.OutcomeRecord) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recs = append(c.recs, o)
	return true
}

func (c *capture) get() []record.OutcomeRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.recs)
}

// A "delivered" outcome record, with the receipt, only when asked
// (DQ_OUTCOMES_DELIVERED): shard 0's poller is asked, shard 1's is not.
func TestPollerPublishesDeliveredOutcomesWhenAsked(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 2)
	recs := f.kafka.Collect(t, otherTopic)
	pubs := []*capture{{}, {}}
	for s := range 2 {
		c := f.config(s, int64(300+s))
		c.Worked = func(string) bool { return false }
		c.Outcomes, c.DeliveredOutcomes = pubs[s], s == 0
		runPoller(t, NewPoller(c))
	}
	var tasks []*task.Task
	for i := range 40 {
		tasks = append(tasks, &task.Task{ID: fmt.Sprintf("do-%02d", i), Type: "t", Topic: otherTopic})
	}
	schedule(t, f.store, 0, tasks...)
	testenv.WaitFor(t, 15*time.Second, "every task delivered", func() bool { return metricValue(f.m.Delivered) >= 40 })
	// The collector is an independent consumer: it sees a record some time
	// after Kafka acknowledged it (and the task was settled delivered).
	testenv.WaitFor(t, 15*time.Second, "every record collected", func() bool { return recs.Distinct() >= len(tasks) })
	if n := len(pubs[1].get()); n != 0 {
		t.Errorf("shard 1 (not asked) published %d delivered outcomes", n)
	}
	want := 0
	for _, tk := range tasks {
		if f.store.Shard(tk.ID) == 0 {
			want++
		}
	}
	got := pubs[0].get()
	if len(got) != want {
		t.Fatalf("shard 0 published %d delivered outcomes, want %d", len(got), want)
	}
	for _, o := range got {
		rs := recs.Get(o.ID)
		if o.Outcome != record.OutcomeDelivered || len(rs) != 1 || o.Partition != rs[0].Partition || o.Offset != rs[0].Offset ||
			!o.FiredAt.Equal(rs[0].Timestamp.Truncate(time.Millisecond)) {
			t.Errorf("%s: outcome %+v, record %v", o.ID, o, rs)
		}
	}
}
