package wire

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/task"
)

// receiptFields are the pinned JSON names of a task's fire receipt.
var receiptFields = []string{"fired_at", "partition", "offset", "fired_attempt", "fired_due_at", "late_ms", "leader_token"}

// TestAppendTaskReceipt: a task with a fire receipt shows every receipt
// field under its pinned name (partition and offset 0 included); one
// without shows none; the payload is still spliced in.
func TestAppendTaskReceipt(t *testing.T) {
	due := time.UnixMilli(1767323045678).UTC()
	tk := &task.Task{ID: "order-1", Type: "email.send", Payload: []byte(`{"a": 1}`), PayloadJSON: true,
		DueAt: due, State: task.StateDelivered, Attempt: 2, Gen: 3, Shard: 4, Topic: "crm.events",
		Receipt: &task.Receipt{FiredAt: due.Add(1234 * time.Millisecond), DueAt: due, Partition: 0, Offset: 0,
			Attempt: 2, Gen: 3, Token: 77, Delivered: true}}
	b, err := AppendTask(nil, tk, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	want := map[string]any{
		"fired_at": "2026-01-02T03:04:06.912Z", "partition": 0.0, "offset": 0.0, "fired_attempt": 2.0,
		"fired_due_at": "2026-01-02T03:04:05.678Z", "late_ms": 1234.0, "leader_token": 77.0,
		"state": "delivered",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %#v, want %#v in %s", k, got[k], v, b)
		}
	}
	if !strings.HasSuffix(string(b), `,"payload":{"a": 1}}`) {
		t.Errorf("payload not spliced as sent: %s", b)
	}

	// a copy fired before it was due (a clock step) is not "late" by a
	// negative amount; other partitions and offsets are written as they are
	tk.Receipt = &task.Receipt{FiredAt: due.Add(-5 * time.Millisecond), DueAt: due, Partition: 7, Offset: 1 << 40, Attempt: 1, Token: 1}
	if b, err = AppendTask(nil, tk, time.Time{}); err != nil {
		t.Fatal(err)
	}
	got = nil
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got["late_ms"] != 0.0 || got["partition"] != 7.0 || got["offset"] != float64(1<<40) || got["fired_attempt"] != 1.0 {
		t.Errorf("early receipt: %s", b)
	}

	// no receipt: no receipt field at all
	tk.Receipt, tk.State = nil, task.StateScheduled
	if b, err = AppendTask(nil, tk, time.Time{}); err != nil {
		t.Fatal(err)
	}
	got = nil
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range receiptFields {
		if _, ok := got[k]; ok {
			t.Errorf("%s written without a receipt: %s", k, b)
		}
	}

	// a dead task keeps its receipt next to died_at
	tk.Receipt, tk.State = &task.Receipt{FiredAt: due, DueAt: due, Attempt: 3, Token: 9}, task.StateDead
	if b, err = AppendTask(nil, tk, due.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	got = nil
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	keys := slices.Collect(maps.Keys(got))
	for _, k := range append([]string{"died_at"}, receiptFields...) {
		if !slices.Contains(keys, k) {
			t.Errorf("dead task: no %s in %s", k, b)
		}
	}
}

// TestAppendScheduledKept: an unchanged answer says what of the stored
// task stood ("kept"), without an allocation; other answers have no
// "kept".
func TestAppendScheduledKept(t *testing.T) {
	due := time.Date(2030, 1, 2, 3, 4, 5, 6e6, time.UTC)
	for _, tc := range []struct {
		name     string
		outcome  string
		state    task.State
		relative bool
		kept     string
		want     string
	}{
		{"created", OutcomeCreated, task.StateScheduled, true, "",
			`{"id":"a","state":"scheduled","outcome":"created","due_at":"2030-01-02T03:04:05.006Z","shard":3}`},
		{"updated", OutcomeUpdated, task.StateScheduled, true, "", ""},
		{"journaled", OutcomeJournaled, task.StateJournaled, true, "", ""},
		{"unchanged absolute", OutcomeUnchanged, task.StateScheduled, false, "", ""},
		{"unchanged relative", OutcomeUnchanged, task.StateScheduled, true, KeptDueAt,
			`{"id":"a","state":"scheduled","outcome":"unchanged","kept":"due_at","due_at":"2030-01-02T03:04:05.006Z","shard":3}`},
		{"unchanged relative, fired", OutcomeUnchanged, task.StateFired, true, KeptDueAt, ""},
		{"unchanged relative, retrying", OutcomeUnchanged, task.StateRetrying, true, KeptDueAt, ""},
		{"unchanged cancelled", OutcomeUnchanged, task.StateCancelled, false, KeptState,
			`{"id":"a","state":"cancelled","outcome":"unchanged","kept":"state","due_at":"2030-01-02T03:04:05.006Z","shard":3}`},
		{"unchanged cancelled, relative", OutcomeUnchanged, task.StateCancelled, true, KeptState, ""},
		{"unchanged succeeded", OutcomeUnchanged, task.StateSucceeded, false, KeptState, ""},
		{"unchanged dead", OutcomeUnchanged, task.StateDead, true, KeptState, ""},
		{"unchanged delivered", OutcomeUnchanged, task.StateDelivered, false, KeptState, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kept := KeptOf(tc.outcome, tc.state, tc.relative)
			if kept != tc.kept {
				t.Fatalf("KeptOf = %q, want %q", kept, tc.kept)
			}
			s := &Scheduled{ID: "a", State: tc.state, Outcome: tc.outcome, Kept: kept, DueAt: due, Shard: 3}
			buf := make([]byte, 0, 256)
			got := string(AppendScheduled(buf, s))
			if tc.want != "" && got != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
			if allocs := testing.AllocsPerRun(100, func() { buf = AppendScheduled(buf[:0], s) }); allocs != 0 {
				t.Fatalf("AppendScheduled allocates %v times", allocs)
			}
		})
	}
}
