package redisstore

import (
	"encoding/binary"
	"testing"

	"github.com/delayq/delayq/internal/task"
)

func encodeRecord(state byte, gen uint32, att uint16, due int64, t *task.Task) string {
	b := []byte{state}
	b = binary.BigEndian.AppendUint32(b, gen)
	b = binary.BigEndian.AppendUint16(b, att)
	b = binary.BigEndian.AppendUint16(b, uint16(due>>32))
	b = binary.BigEndian.AppendUint32(b, uint32(due))
	return string(append(b, task.EncodeBody(t)...))
}

func TestDecodeRecord(t *testing.T) {
	in := &task.Task{Type: "x", Payload: []byte("p"), Priority: 3}
	rec := encodeRecord('r', 7, 2, 1763859000123, in)
	got, err := decodeRecord("id", rec, 3)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != task.StateRetrying || got.Gen != 7 || got.Attempt != 2 || got.DueAt.UnixMilli() != 1763859000123 ||
		got.Type != "x" || string(got.Payload) != "p" || got.Priority != 3 || got.Shard != 3 || got.ID != "id" {
		t.Fatalf("decoded %+v", got)
	}
}

// FuzzDecodeRecord: whatever sits in Redis, decoding never panics.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(encodeRecord('s', 0, 1, 1763859000123, &task.Task{Type: "t", Payload: []byte("{}"), PayloadJSON: true}))
	f.Add("s")
	f.Add("")
	f.Add("x\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00")
	f.Fuzz(func(t *testing.T, rec string) {
		_, _ = decodeRecord("id", rec, 0)
	})
}

// An unreadable body keeps the header, so the poller can ack exactly the
// generation it dead-letters.
func TestDecodeRecordKeepsHeaderOfUnreadableBody(t *testing.T) {
	rec := encodeRecord('f', 9, 3, 1763859000123, &task.Task{Type: "x"})[:recordHeader] + "\x07garbage"
	got, err := decodeRecord("id", rec, 1)
	if err == nil || got == nil || got.Gen != 9 || got.Attempt != 3 || got.DueAt.UnixMilli() != 1763859000123 {
		t.Fatalf("got %+v, %v", got, err)
	}
}
