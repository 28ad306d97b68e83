package task

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"
)

// The body is the immutable part of a task as the store keeps it: a version
// byte, a byte of flags saying which optional fields follow, then the type and
// payload and the optional fields as uvarint-length-prefixed strings and
// uvarints. It is compact on purpose (memory per pending task is a published
// figure: a task with only a type and a payload costs 3 bytes beyond them)
// and deterministic (equal tasks encode to equal bytes, which is how the
// store recognises an identical re-submit).
const bodyVersion = 1

const (
	flagJSON = 1 << iota
	flagTopic
	flagKey
	flagHeaders
	flagAttempts
	flagTimeout
	flagPriority
	flagAll = 1<<iota - 1
)

// ErrCorrupt is returned for a body that cannot be decoded.
var ErrCorrupt = errors.New("corrupt task body")

// EncodeBody encodes the producer-set fields except ID and DueAt.
func EncodeBody(t *Task) []byte { return AppendBody(nil, t) }

// AppendBody appends EncodeBody(t) to dst (the store puts a record's
// header before it without copying the body again).
func AppendBody(dst []byte, t *Task) []byte {
	n := 8 + len(t.Type) + len(t.Payload) + len(t.Topic) + len(t.Key)
	for k, v := range t.Headers {
		n += len(k) + len(v) + 4
	}
	var flags byte
	set := func(f byte, on bool) {
		if on {
			flags |= f
		}
	}
	set(flagJSON, t.PayloadJSON)
	set(flagTopic, t.Topic != "")
	set(flagKey, t.Key != "")
	set(flagHeaders, len(t.Headers) > 0)
	set(flagAttempts, t.MaxAttempts > 0)
	set(flagTimeout, t.Timeout.Milliseconds() > 0)
	set(flagPriority, t.Priority != 0)
	b := slices.Grow(dst, n)
	b = append(b, bodyVersion, flags)
	b = appendString(b, t.Type)
	b = appendBytes(b, t.Payload)
	if flags&flagTopic != 0 {
		b = appendString(b, t.Topic)
	}
	if flags&flagKey != 0 {
		b = appendString(b, t.Key)
	}
	if flags&flagHeaders != 0 {
		keys := make([]string, 0, len(t.Headers))
		for k := range t.Headers {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b = binary.AppendUvarint(b, uint64(len(keys)))
		for _, k := range keys {
			b = appendString(b, k)
			b = appendString(b, t.Headers[k])
		}
	}
	if flags&flagAttempts != 0 {
		b = binary.AppendUvarint(b, uint64(t.MaxAttempts))
	}
	if flags&flagTimeout != 0 {
		b = binary.AppendUvarint(b, uint64(t.Timeout.Milliseconds()))
	}
	if flags&flagPriority != 0 {
		b = binary.AppendVarint(b, int64(t.Priority))
	}
	return b
}

// DecodeBody fills the body fields of t from b. t keeps no reference to b.
func DecodeBody(b []byte, t *Task) error {
	return decodeBody(decoder{b: b}, t)
}

// DecodeBodyOwned is DecodeBody for a b the caller hands over: t's payload
// is a sub-slice of b instead of a copy (one allocation less per record on
// the fire path). The caller must not use b afterwards.
func DecodeBodyOwned(b []byte, t *Task) error {
	return decodeBody(decoder{b: b, owned: true}, t)
}

func decodeBody(d decoder, t *Task) error {
	if v := d.byte(); v != bodyVersion {
		if d.err != nil {
			return d.err
		}
		return fmt.Errorf("%w: unknown version %d", ErrCorrupt, v)
	}
	flags := d.byte()
	if flags&^flagAll != 0 {
		return fmt.Errorf("%w: unknown flags %#x", ErrCorrupt, flags)
	}
	t.Type = d.string()
	t.Payload = d.bytes()
	t.PayloadJSON = flags&flagJSON != 0
	t.Topic, t.Key, t.Headers = "", "", nil
	t.MaxAttempts, t.Timeout, t.Priority = 0, 0, 0
	if flags&flagTopic != 0 {
		t.Topic = d.nonEmpty()
	}
	if flags&flagKey != 0 {
		t.Key = d.nonEmpty()
	}
	if flags&flagHeaders != 0 {
		nh := d.uvarint()
		if nh == 0 || nh > MaxHeaders {
			return fmt.Errorf("%w: %d headers", ErrCorrupt, nh)
		}
		t.Headers = make(map[string]string, nh)
		prev := ""
		for i := range nh {
			k := d.string()
			if d.err == nil && i > 0 && k <= prev {
				return fmt.Errorf("%w: headers not in canonical order", ErrCorrupt)
			}
			prev = k
			t.Headers[k] = d.string()
		}
	}
	if flags&flagAttempts != 0 {
		ma := d.uvarint()
		if ma == 0 || ma > MaxMaxAttempts {
			return fmt.Errorf("%w: max attempts %d", ErrCorrupt, ma)
		}
		t.MaxAttempts = int(ma)
	}
	if flags&flagTimeout != 0 {
		to := d.uvarint()
		if to == 0 || to > uint64(MaxTimeout.Milliseconds()) {
			return fmt.Errorf("%w: timeout %d", ErrCorrupt, to)
		}
		t.Timeout = time.Duration(to) * time.Millisecond
	}
	if flags&flagPriority != 0 {
		pr := d.varint()
		if pr == 0 || pr < -1000 || pr > 1000 {
			return fmt.Errorf("%w: priority %d", ErrCorrupt, pr)
		}
		t.Priority = int(pr)
	}
	if d.err != nil {
		return d.err
	}
	if len(d.b) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(d.b))
	}
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
	b     []byte
	err   error
	owned bool // bytes() may return sub-slices of b
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
	if d.owned {
		return s
	}
	return append([]byte(nil), s...)
}

func (d *decoder) string() string {
	n := d.uvarint()
	if d.err != nil || n > uint64(len(d.b)) {
		d.fail("field")
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// nonEmpty reads an optional string whose flag says it is present.
func (d *decoder) nonEmpty() string {
	s := d.string()
	if s == "" && d.err == nil {
		d.err = fmt.Errorf("%w: empty optional field", ErrCorrupt)
	}
	return s
}
