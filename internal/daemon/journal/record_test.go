package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
	"time"
)

// withCRC appends the CRC32C of body, so tests can build records that pass
// the checksum but are malformed inside.
func withCRC(body []byte) []byte {
	return binary.BigEndian.AppendUint32(append([]byte(nil), body...), crc32.Checksum(body, castagnoli))
}

func validRecords() [][]byte {
	return [][]byte{
		encodeRecord(Entry{ID: "a", At: time.UnixMilli(0)}),
		encodeRecord(Entry{ID: "order-42", Data: []byte(`{"type":"cancel","due_at":1700000000000}`), At: time.UnixMilli(1_700_000_000_123)}),
		encodeRecord(Entry{ID: string(bytes.Repeat([]byte("x"), 200)), Data: []byte{0, 1, 2, 255}, At: time.UnixMilli(-1)}),
		encodeRecord(Entry{ID: "neg", At: time.UnixMilli(-62135596800000)}),
	}
}

func TestRecordRoundTrip(t *testing.T) {
	for _, e := range []Entry{
		{ID: "a", At: time.UnixMilli(0)},
		{ID: "order-42", Data: []byte("payload"), At: time.UnixMilli(1_700_000_000_123)},
		{ID: "t", Data: bytes.Repeat([]byte{0xff}, 1<<16), At: time.UnixMilli(1 << 50)},
	} {
		got, err := decodeRecord(encodeRecord(e))
		if err != nil {
			t.Fatalf("decode(encode(%q)): %v", e.ID, err)
		}
		if got.ID != e.ID || !bytes.Equal(got.Data, e.Data) || !got.At.Equal(e.At) || got.Seq != 0 {
			t.Fatalf("round trip of %q = %+v", e.ID, got)
		}
	}
}

func TestDecodeRecordRejects(t *testing.T) {
	valid := encodeRecord(Entry{ID: "order-42", Data: []byte("payload"), At: time.UnixMilli(1_700_000_000_123)})
	flipped := bytes.Clone(valid)
	flipped[5] ^= 1
	tests := []struct {
		name string
		in   []byte
	}{
		{"nil", nil},
		{"too short", []byte{1, 0, 0, 0, 0, 0}},
		{"truncated", valid[:len(valid)-1]},
		{"truncated body", withCRC(valid[:4])},
		{"flipped bit", flipped},
		{"bad crc", append(bytes.Clone(valid[:len(valid)-4]), 0, 0, 0, 0)},
		{"version 0", withCRC([]byte{0, 1, 'a', 0})},
		{"version 2", withCRC([]byte{2, 1, 'a', 0})},
		{"id longer than record", withCRC([]byte{1, 9, 'a', 0})},
		{"id length overflows", withCRC([]byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0})},
		{"id length not minimal", withCRC([]byte{1, 0x81, 0x00, 'a', 0})},
		{"missing timestamp", withCRC([]byte{1, 1, 'a'})},
		{"unterminated timestamp", withCRC([]byte{1, 1, 'a', 0x80})},
		{"timestamp not minimal", withCRC([]byte{1, 1, 'a', 0x80, 0x00})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := decodeRecord(tt.in)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decodeRecord(%x) = %+v, %v; want ErrCorrupt", tt.in, e, err)
			}
		})
	}
}

// FuzzDecodeRecord: decodeRecord never panics, rejects with ErrCorrupt, and
// whatever it accepts encodes back to the same bytes. Random bytes rarely
// carry a valid checksum, so each input is also tried with its CRC32C
// appended, which lets the fuzzer reach the field parsing behind the check.
func FuzzDecodeRecord(f *testing.F) {
	for _, b := range validRecords() {
		f.Add(b)
		f.Add(b[:len(b)-1])              // truncated
		f.Add(append(bytes.Clone(b), 0)) // trailing byte
		f.Add(b[:len(b)-4])              // body only: valid once its CRC is appended
	}
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Add(withCRC([]byte{1, 0, 0}))               // empty id: decodes, Append never writes it
	f.Add(withCRC([]byte{2, 1, 'a', 0}))          // unknown version
	f.Add(withCRC([]byte{1, 0x81, 0x00, 'a', 0})) // non-minimal varint
	f.Add(withCRC([]byte{1, 5, 'a', 0}))          // id past the end
	f.Add(withCRC([]byte{1, 1, 'a', 0x80, 0x80})) // unterminated timestamp

	f.Fuzz(func(t *testing.T, b []byte) {
		for _, want := range [][]byte{b, withCRC(b)} {
			in := bytes.Clone(want) // the engine's b must not be modified
			e, err := decodeRecord(in)
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("decodeRecord error %v does not wrap ErrCorrupt", err)
				}
				continue
			}
			clear(in) // the input may be bbolt's mmap: the Entry must not alias it
			if got := encodeRecord(e); !bytes.Equal(got, want) {
				t.Fatalf("encode(decode(%x)) = %x", want, got)
			}
		}
	})
}
