package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"time"
)

// recordVersion is the first byte of every record.
const recordVersion byte = 1

// ErrCorrupt reports a record that fails to decode: truncated, an unknown
// version, a bad checksum or a malformed field.
var ErrCorrupt = errors.New("corrupt record")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// minRecordLen is the smallest possible record: version, a one-byte id
// length, a one-byte At and the checksum.
const minRecordLen = 1 + 1 + 1 + crc32.Size

// encodeRecord returns the on-disk form of e; e.Seq is not part of it (it is
// the key).
func encodeRecord(e Entry) []byte {
	ms := e.At.UnixMilli()
	n := 1 + uvarintLen(uint64(len(e.ID))) + len(e.ID) + varintLen(ms) + len(e.Data) + crc32.Size
	b := make([]byte, 0, n)
	b = append(b, recordVersion)
	b = binary.AppendUvarint(b, uint64(len(e.ID)))
	b = append(b, e.ID...)
	b = binary.AppendVarint(b, ms)
	b = append(b, e.Data...)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// decodeRecord parses a record written by encodeRecord. The returned Entry
// has Seq 0 and owns its Data (b may be bbolt's memory map). Any malformed
// input is an error wrapping ErrCorrupt; decodeRecord never panics. It
// accepts exactly the encodings encodeRecord produces, so encoding the
// result gives b back.
func decodeRecord(b []byte) (Entry, error) {
	if len(b) < minRecordLen {
		return Entry{}, fmt.Errorf("%w: %d bytes, want at least %d", ErrCorrupt, len(b), minRecordLen)
	}
	body, sum := b[:len(b)-crc32.Size], binary.BigEndian.Uint32(b[len(b)-crc32.Size:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return Entry{}, fmt.Errorf("%w: checksum %08x, want %08x", ErrCorrupt, got, sum)
	}
	if body[0] != recordVersion {
		return Entry{}, fmt.Errorf("%w: version %d, want %d", ErrCorrupt, body[0], recordVersion)
	}
	rest := body[1:]

	idLen, n := binary.Uvarint(rest)
	if n <= 0 || n != uvarintLen(idLen) {
		return Entry{}, fmt.Errorf("%w: bad id length", ErrCorrupt)
	}
	rest = rest[n:]
	if idLen > uint64(len(rest)) {
		return Entry{}, fmt.Errorf("%w: id length %d exceeds record", ErrCorrupt, idLen)
	}
	id := string(rest[:idLen])
	rest = rest[idLen:]

	ms, n := binary.Varint(rest)
	if n <= 0 || n != varintLen(ms) {
		return Entry{}, fmt.Errorf("%w: bad timestamp", ErrCorrupt)
	}
	rest = rest[n:]

	return Entry{
		ID:   id,
		Data: append([]byte(nil), rest...),
		At:   time.UnixMilli(ms),
	}, nil
}

// uvarintLen is the length of the canonical (shortest) uvarint encoding of
// v. decodeRecord insists on it, so every record has exactly one encoding.
func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// varintLen is the length of binary.AppendVarint(nil, v).
func varintLen(v int64) int {
	u := uint64(v) << 1
	if v < 0 {
		u = ^u
	}
	return uvarintLen(u)
}
