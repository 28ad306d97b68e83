package record

import (
	"math"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delayq/delayq/internal/task"
)

// measure is the record's size by the documented formula, from the
// record itself.
func measure(m kafka.Message) int {
	n := len(m.Key) + len(m.Value) + Overhead
	for _, h := range m.Headers {
		n += len(h.Key) + len(h.Value) + HeaderOverhead
	}
	return n
}

// TestSizeIsTheFiredRecord: Size equals the size of the
// record the poller produces when every fire-time header is at its
// widest, and bounds it otherwise; so the daemon's submit check and the
// event process agree on what a record is.
func TestSizeIsTheFiredEncode(t *testing.T) {
	for name, tk := range map[string]*task.Task{
		"minimal": {ID: "a", Type: "t", DueAt: time.UnixMilli(1)},
		"full": {ID: "order-1", Type: "order.cancel", Payload: []byte(`{"order":1}`), PayloadJSON: true,
			DueAt: time.UnixMilli(task.MaxDueMillis), Topic: "orders", Key: "customer-7",
			Headers: map[string]string{"trace": "abc", "tenant": "x"}, MaxAttempts: 1000,
			Timeout: 90 * time.Second, Priority: -1000},
		"binary": {ID: "b", Type: "t", Payload: make([]byte, 4096), DueAt: time.UnixMilli(1 << 40)},
	} {
		t.Run(name, func(t *testing.T) {
			widest := *tk
			widest.Attempt, widest.Gen = task.MaxMaxAttempts, math.MaxUint32
			widest.DueAt = time.UnixMilli(task.MaxDueMillis)
			m := Encode(&widest, "dq.tasks", time.UnixMilli(task.MaxDueMillis))
			shard, token := Fence(99999, math.MaxInt64)
			m.Headers = append(m.Headers, shard, token)
			if got, want := Size(tk), measure(m); got != want {
				t.Fatalf("Size %d, the widest fired record %d", got, want)
			}
			// An ordinary fire is no larger.
			m = Encode(tk, "dq.tasks", time.UnixMilli(1_700_000_000_000))
			shard, token = Fence(3, 42)
			m.Headers = append(m.Headers, shard, token)
			if got := measure(m); got > Size(tk) {
				t.Fatalf("fired record %d > Size %d", got, Size(tk))
			}
		})
	}
}
