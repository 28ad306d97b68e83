package task

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"time"
)

// The body is the immutable part of a task as the store keeps it: a version
// byte, then uvarint-length-prefixed strings and uvarint numbers. It is
// compact on purpose (memory per pending task is a published figure) and
// deterministic (equal tasks encode to equal bytes, which is how the store
// recognises an identical re-submit).
const bodyVersion = 1

const flagJSON = 1

// ErrCorrupt is returned for a body that cannot be decoded.
var ErrCorrupt = errors.New("corrupt task body")

// EncodeBody encodes the producer-set fields except ID and DueAt.
func EncodeBody(t *Task) []byte {
	n := 16 + len(t.Type) + len(t.Payload) + len(t.Topic) + len(t.Key)
	for k, v := range t.Headers {
		n += len(k) + len(v) + 4
	}
	b := make([]byte, 0, n)
	b = append(b, bodyVersion)
	b = appendString(b, t.Type)
	b = appendBytes(b, t.Payload)
	var flags uint64
	if t.PayloadJSON {
		flags |= flagJSON
	}
	b = binary.AppendUvarint(b, flags)
	b = appendString(b, t.Topic)
	b = appendString(b, t.Key)
	b = binary.AppendUvarint(b, uint64(len(t.Headers)))
	if len(t.Headers) > 0 {
		keys := make([]string, 0, len(t.Headers))
		for k := range t.Headers {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			b = appendString(b, k)
			b = appendString(b, t.Headers[k])
		}
	}
	b = binary.AppendUvarint(b, uint64(max(t.MaxAttempts, 0)))
	b = binary.AppendUvarint(b, uint64(max(t.Timeout.Milliseconds(), 0)))
	b = binary.AppendVarint(b, int64(t.Priority))
	return b
}

// DecodeBody fills the body fields of t from b.
func DecodeBody(b []byte, t *Task) error {
	d := decoder{b: b}
	if v := d.byte(); v != bodyVersion {
		if d.err != nil {
			return d.err
		}
		return fmt.Errorf("%w: unknown version %d", ErrCorrupt, v)
	}
	t.Type = d.string()
	t.Payload = d.bytes()
	flags := d.uvarint()
	t.PayloadJSON = flags&flagJSON != 0
	t.Topic = d.string()
	t.Key = d.string()
	nh := d.uvarint()
	if nh > MaxHeaders {
		return fmt.Errorf("%w: %d headers", ErrCorrupt, nh)
	}
	t.Headers = nil
	if nh > 0 {
		t.Headers = make(map[string]string, nh)
		for range nh {
			k := d.string()
			t.Headers[k] = d.string()
		}
	}
	ma := d.uvarint()
	to := d.uvarint()
	pr := d.varint()
	if d.err != nil {
		return d.err
	}
	if len(d.b) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(d.b))
	}
	if ma > MaxMaxAttempts || to > uint64(MaxTimeout.Milliseconds()) || pr < -1000 || pr > 1000 {
		return fmt.Errorf("%w: field out of range", ErrCorrupt)
	}
	t.MaxAttempts = int(ma)
	t.Timeout = time.Duration(to) * time.Millisecond
	t.Priority = int(pr)
	return nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBytes(b, s []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: truncated %s", ErrCorrupt, what)
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if len(d.b) < 1 {
		d.fail("version")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("number")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("number")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil || n > uint64(len(d.b)) {
		d.fail("field")
		return nil
	}
	s := d.b[:n:n]
	d.b = d.b[n:]
	if n == 0 {
		return nil
	}
	return append([]byte(nil), s...)
}

func (d *decoder) string() string { return string(d.bytes()) }
