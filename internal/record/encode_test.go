package record

import (
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/task"
)

func TestRecordCarriesThePinnedHeaders(t *testing.T) {
	due := time.UnixMilli(1_700_000_000_123)
	fired := due.Add(4 * time.Millisecond)
	long := strings.Repeat("k", 300) // longer than the buffer's slack
	tk := &task.Task{
		ID: "order-123", Type: "order.cancel", Key: long, Payload: []byte(`{"order":123}`), PayloadJSON: true,
		DueAt: due, Attempt: 2, Gen: 7, MaxAttempts: 5, Timeout: 3 * time.Second, Priority: 2,
		Headers: map[string]string{"b-trace": "xyz", "a-tenant": "t1"},
	}
	m := Encode(tk, "dq.tasks", fired)
	got := map[string]string{}
	var order []string
	for _, h := range m.Headers {
		got[h.Key] = string(h.Value)
		order = append(order, h.Key)
	}
	want := map[string]string{
		HeaderID: "order-123", HeaderType: "order.cancel", HeaderDueAt: "1700000000123", HeaderFiredAt: "1700000000127",
		HeaderAttempt: "2", HeaderGen: "7", HeaderContentType: "application/json", HeaderMaxAttempts: "5",
		HeaderTimeoutMS: "3000", HeaderPriority: "2", "a-tenant": "t1", "b-trace": "xyz",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("header %s = %q, want %q", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("headers %v, want exactly %v", got, want)
	}
	if order[len(order)-2] != "a-tenant" || order[len(order)-1] != "b-trace" {
		t.Errorf("the task's own headers come last, sorted: %v", order)
	}
	if string(m.Key) != long || m.Topic != "dq.tasks" || string(m.Value) != `{"order":123}` || !m.Time.Equal(fired) {
		t.Errorf("record %q %q %q %v", m.Key[:10], m.Topic, m.Value, m.Time)
	}
	// header values must not share bytes that a later append could change
	m.Headers[0].Value = append(m.Headers[0].Value, 'X')
	if string(m.Headers[1].Value) != "order.cancel" {
		t.Errorf("appending to one header value changed the next: %q", m.Headers[1].Value)
	}
}

// The dead-letter copy of a record Kafka refused as too large always fits:
// the payload is cut to DeadPayloadMax (dq-payload-bytes says how large it
// was) and the reason to DeadReasonMax, whatever their size.
func TestDeadRecordIsBounded(t *testing.T) {
	tk := &task.Task{ID: "big", Type: "x", Payload: make([]byte, 2<<20), DueAt: time.UnixMilli(1)}
	m := EncodeDead(tk, "dq.dead", time.UnixMilli(2), strings.Repeat("r", 10_000))
	size := len(m.Key) + len(m.Value)
	got := map[string]string{}
	for _, h := range m.Headers {
		size += len(h.Key) + len(h.Value)
		got[h.Key] = string(h.Value)
	}
	if len(m.Value) != DeadPayloadMax || got[HeaderPayloadBytes] != "2097152" || len(got[HeaderError]) != DeadReasonMax {
		t.Errorf("value %d bytes, dq-payload-bytes %q, dq-error %d bytes", len(m.Value), got[HeaderPayloadBytes], len(got[HeaderError]))
	}
	if size > 64<<10 {
		t.Errorf("dead-letter record of %d bytes, want well under the broker's 1 MB", size)
	}
	small := EncodeDead(&task.Task{ID: "s", Payload: []byte("kept")}, "dq.dead", time.UnixMilli(2), "why")
	for _, h := range small.Headers {
		if h.Key == HeaderPayloadBytes {
			t.Error("dq-payload-bytes on a record that was not cut")
		}
	}
	if string(small.Value) != "kept" {
		t.Errorf("small payload %q, want it whole", small.Value)
	}
}
