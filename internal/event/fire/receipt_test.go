package fire

import (
	"fmt"
	"testing"
	"time"

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
