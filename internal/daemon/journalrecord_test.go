package daemon

import (
	"bytes"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/daemon/wire"
	"github.com/delayq/delayq/internal/task"
)

var fuzzNow = time.Date(2026, 5, 1, 12, 0, 0, 123456789, time.UTC)

// FuzzJournalRoundTrip: whatever the API decodes (wire.DecodeTask) comes
// out of the journal the same, so a journaled schedule is replayed as it
// was accepted.
func FuzzJournalRoundTrip(f *testing.F) {
	for _, s := range []string{
		`{"type":"order.cancel"}`,
		`{"id":"order-1","type":"order.cancel","payload":{"order": 1},"delay":"24h"}`,
		`{"id":"x","type":"t","payload":[1,2,{"a":null}],"due_at":"2030-01-02T03:04:05.678Z","topic":"orders","key":"k","headers":{"trace":"abc"},"max_attempts":5,"timeout":"30s","priority":-3}`,
		`{"type":"t","payload":null,"payload_base64":"AAEC"}`,
		`{"type":"t","payload":"\u2028<&>","id":"é"}`,
		`{"type":"x","due_at":"2248-09-26T15:10:22.207Z"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		sub, e := wire.DecodeTask(b, fuzzNow)
		if e != nil {
			return
		}
		tk := sub.Task
		jt, err := decodeJournalData(tk.ID, encodeJournalData(tk, false))
		if err != nil || !bytes.Equal(task.EncodeBody(jt), task.EncodeBody(tk)) || !jt.DueAt.Equal(tk.DueAt) {
			t.Fatalf("journal round trip: %v", err)
		}
	})
}

// FuzzJournalData: a journal entry's data never panics the decoder, and
// what decodes is a valid task.
func FuzzJournalData(f *testing.F) {
	f.Add(encodeJournalData(&task.Task{ID: "a", Type: "t", DueAt: fuzzNow, Payload: []byte(`{"a":1}`), PayloadJSON: true}, false))
	f.Add([]byte{1, 2})
	f.Add([]byte{})
	f.Add([]byte{9, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		tk, err := decodeJournalData("id", b)
		if err != nil {
			return
		}
		if err := tk.Validate(); err != nil {
			t.Fatalf("decoded invalid task: %v", err)
		}
	})
}

// TestJournalDataOfStoredIDs: a journal entry written before task.ValidateID
// refused "/", "." and ".." is still replayed.
func TestJournalDataOfStoredIDs(t *testing.T) {
	for _, id := range []string{"/", ".", ".."} {
		tk := &task.Task{ID: id, Type: "t", DueAt: fuzzNow.Truncate(time.Millisecond)}
		got, err := decodeJournalData(id, encodeJournalData(tk, false))
		if err != nil || got.ID != id {
			t.Fatalf("journal entry of id %q: %+v, %v", id, got, err)
		}
	}
}

// TestJournalDataOfStoredTypes: a journal entry written before
// task.ValidateType refused "/", "." and ".." is still replayed (and one
// with a "/" inside).
func TestJournalDataOfStoredTypes(t *testing.T) {
	for _, typ := range []string{"/", ".", "..", "a/b"} {
		tk := &task.Task{ID: "j", Type: typ, DueAt: fuzzNow.Truncate(time.Millisecond)}
		got, err := decodeJournalData(tk.ID, encodeJournalData(tk, false))
		if err != nil || got.Type != typ {
			t.Fatalf("journal entry of type %q: %+v, %v", typ, got, err)
		}
	}
}
