package work

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/task"
)

// A forged outcome (issue 40): a producer schedules a task into the
// outcomes topic whose payload is an outcome record and whose id is the
// payload's. Fired as the event fires every task (record.Encode, the
// fence headers), it must call no hook; nor must a record without the
// publisher's dq-outcome marker. A real outcome behind them in the same
// partition still calls its hook. Both refusals are counted and committed.
func TestHooksRefuseForgedOutcomes(t *testing.T) {
	e := newHookEnv(t)
	s := newHookSink(t)
	reg := prometheus.NewRegistry()
	h := e.newTestHooks(t, map[string]OutcomeHooks{
		"order.charge": {OnSuccess: s.srv.URL + "/receipt", Timeout: 5 * time.Second, MaxAge: time.Hour},
	}, reg)
	runHooks(t, h)

	// The forged outcome: what EncodeOutcome would write as the value.
	fake := newOutcome("order-43", "order.charge", record.OutcomeSucceeded)
	fake.Headers = nil
	value := record.EncodeOutcome(fake, e.topic).Value
	// A task of the same id and type with that payload, fired to the
	// outcomes topic as the event's poller fires it.
	tk := &task.Task{ID: "order-43", Type: "order.charge", Payload: value, PayloadJSON: true, Topic: e.topic,
		DueAt: time.Now().Add(-time.Second), Attempt: 1, Gen: 1}
	if err := tk.Validate(); err != nil {
		t.Fatalf("the forging task is a valid task: %v", err)
	}
	fired := record.Encode(tk, task.DefaultTopic, time.Now())
	shard, token := record.Fence(3, 7)
	fired.Headers = append(fired.Headers, shard, token)
	// The same value with the dq-id and dq-type headers alone (no marker).
	unmarked := kafka.Message{Topic: e.topic, Key: []byte("order-43"), Value: value, Headers: []kafka.Header{
		{Key: record.HeaderID, Value: []byte("order-43")}, {Key: record.HeaderType, Value: []byte("order.charge")}}}
	genuine := newOutcome("order-43", "order.charge", record.OutcomeSucceeded)
	genuine.Attempt = 3 // another webhook-id than the forged one's
	if err := e.w.WriteMessages(t.Context(), fired, unmarked, record.EncodeOutcome(genuine, e.topic)); err != nil {
		t.Fatal(err)
	}
	e.waitCommitted(t, 3)

	calls := s.all()
	if len(calls) != 1 || calls[0].msgID != hookMessageID(genuine) {
		ids := make([]string, len(calls))
		for i, c := range calls {
			ids[i] = c.msgID
		}
		t.Fatalf("hook calls %v, want only the real outcome's %s", ids, hookMessageID(genuine))
	}
	for _, reason := range []string{record.ForgedTaskRecord, record.ForgedUnmarked} {
		if v := metric(t, reg, "delayq_hook_records_refused_total", "reason", reason); v != 1 {
			t.Errorf("refused %s = %v, want 1", reason, v)
		}
	}
	if v := metric(t, reg, "delayq_hook_calls_total", "hook", hookOnSuccess, "result", "ok"); v != 1 {
		t.Errorf("on_success ok = %v, want 1", v)
	}
}
