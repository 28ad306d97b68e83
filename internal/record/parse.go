package record

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delayq/delayq/internal/task"
)

// HostileError is a record a consumer cannot treat as a delayq task; its
// message is a short reason for the dead letter.
type HostileError struct{ Reason string }

func (e *HostileError) Error() string { return e.Reason }

func hostile(format string, args ...any) error {
	return &HostileError{Reason: fmt.Sprintf(format, args...)}
}

// Fields is what a consumer reads from a Kafka record's headers before it
// looks the task up in Redis.
type Fields struct {
	ID          string
	Type        string
	Gen         uint64
	Attempt     int
	DueAt       time.Time
	FiredAt     time.Time // zero when absent
	ContentType string
	Timeout     time.Duration     // zero when absent
	Headers     map[string]string // the task's own (non dq-*) headers; nil when none
	// Shard is the shard the record was fired from (dq-shard), -1 when
	// the header is absent.
	Shard int
}

// Parse reads and checks the dq-* headers of m, and that its value is at
// most maxPayload bytes (when maxPayload > 0). Any problem is a
// *HostileError with a short reason for the dead letter.
//
// It runs once per record a worker reads: the known headers are found by
// position and the numbers parsed from their bytes, so that only what
// Fields keeps is allocated (a map of the dq-* headers and a string per
// value cost a work process ~10 allocations per record). A dq-* header
// (the prefix in any case) given twice under the same name is refused,
// and the task's own headers go to Fields.Headers, as before.
func Parse(m *kafka.Message, maxPayload int) (*Fields, error) {
	if maxPayload > 0 && len(m.Value) > maxPayload {
		return nil, hostile("payload of %d bytes is over the limit of %d", len(m.Value), maxPayload)
	}
	hs := m.Headers
	if len(hs) == 0 {
		return nil, hostile("no headers: not a delayq record")
	}
	if len(hs) > task.MaxHeaders+16 {
		return nil, hostile("%d headers", len(hs))
	}
	var known [numKnown]hval // each header Parse reads, as found
	var own map[string]string
	for i, h := range hs {
		if !isDQ(h.Key) {
			if own == nil {
				own = map[string]string{}
			}
			own[h.Key] = string(h.Value)
			continue
		}
		for _, p := range hs[:i] {
			if p.Key == h.Key {
				return nil, hostile("header %s given twice", short(h.Key))
			}
		}
		if k := knownHeader(h.Key); k >= 0 {
			known[k] = hval{h.Value, true}
		}
	}
	r := &Fields{Headers: own, Shard: -1}
	id := known[kID]
	if !id.ok {
		return nil, hostile("no %s header", HeaderID)
	}
	r.ID = string(id.v)
	if err := task.ValidateStoredID(r.ID); err != nil {
		return nil, hostile("bad %s header: %v", HeaderID, err)
	}
	typ := known[kType]
	if !typ.ok || len(typ.v) == 0 || len(typ.v) > task.MaxTypeLen {
		return nil, hostile("missing or bad %s header", HeaderType)
	}
	r.Type = string(typ.v)
	var err error
	if r.Gen, err = uintHeader(known[kGen], HeaderGen, true); err != nil {
		return nil, err
	}
	att, err := uintHeader(known[kAttempt], HeaderAttempt, true)
	if err != nil {
		return nil, err
	}
	if att < 1 || att > task.MaxMaxAttempts {
		return nil, hostile("%s header %d out of range", HeaderAttempt, att)
	}
	r.Attempt = int(att)
	if r.DueAt, err = millisHeader(known[kDueAt], HeaderDueAt, true); err != nil {
		return nil, err
	}
	if r.FiredAt, err = millisHeader(known[kFiredAt], HeaderFiredAt, false); err != nil {
		return nil, err
	}
	if v := known[kShard]; v.ok {
		sh, err := strconv.Atoi(string(v.v)) // not kept: no copy on the heap
		if err != nil || sh < 0 || sh >= 1<<16 {
			return nil, hostile("bad %s header %q", HeaderShard, short(string(v.v)))
		}
		r.Shard = sh
	}
	to, err := uintHeader(known[kTimeoutMS], HeaderTimeoutMS, false)
	if err != nil {
		return nil, err
	}
	if to > uint64(task.MaxTimeout.Milliseconds()) {
		return nil, hostile("%s header %d out of range", HeaderTimeoutMS, to)
	}
	r.Timeout = time.Duration(to) * time.Millisecond
	if _, err := uintHeader(known[kMaxAttempts], HeaderMaxAttempts, false); err != nil {
		return nil, err
	}
	if p := known[kPriority]; p.ok {
		if _, err := strconv.Atoi(string(p.v)); err != nil {
			return nil, hostile("bad %s header %q", HeaderPriority, short(string(p.v)))
		}
	}
	if ct := known[kContentType]; ct.ok {
		r.ContentType = string(ct.v)
	}
	return r, nil
}

// The headers Parse reads, by position in Parse's table.
const (
	kID = iota
	kType
	kGen
	kAttempt
	kDueAt
	kFiredAt
	kShard
	kTimeoutMS
	kMaxAttempts
	kPriority
	kContentType
	numKnown
)

// knownHeader is the position of a header Parse reads, -1 for any other.
func knownHeader(key string) int {
	switch key {
	case HeaderID:
		return kID
	case HeaderType:
		return kType
	case HeaderGen:
		return kGen
	case HeaderAttempt:
		return kAttempt
	case HeaderDueAt:
		return kDueAt
	case HeaderFiredAt:
		return kFiredAt
	case HeaderShard:
		return kShard
	case HeaderTimeoutMS:
		return kTimeoutMS
	case HeaderMaxAttempts:
		return kMaxAttempts
	case HeaderPriority:
		return kPriority
	case HeaderContentType:
		return kContentType
	}
	return -1
}

// isDQ reports whether a header name has the reserved prefix, in any case.
func isDQ(key string) bool { return len(key) >= 3 && strings.EqualFold(key[:3], "dq-") }

// hval is a header's value as Parse found it: ok when present.
type hval struct {
	v  []byte
	ok bool
}

// uintHeader parses the value h of the header name as strconv.ParseUint
// does; an absent one is 0, or refused when required.
func uintHeader(h hval, name string, required bool) (uint64, error) {
	if !h.ok {
		if required {
			return 0, hostile("no %s header", name)
		}
		return 0, nil
	}
	n, err := strconv.ParseUint(string(h.v), 10, 64) // not kept: no copy on the heap
	if err != nil {
		return 0, hostile("bad %s header %q", name, short(string(h.v)))
	}
	return n, nil
}

// millisHeader is uintHeader of a unix-ms time (0 or absent: the zero time).
func millisHeader(h hval, name string, required bool) (time.Time, error) {
	n, err := uintHeader(h, name, required)
	if err != nil || n == 0 {
		return time.Time{}, err
	}
	if n > 253402300799999 { // 9999-12-31
		return time.Time{}, hostile("%s header %d out of range", name, n)
	}
	return task.FromMillis(int64(n)), nil
}

// IsHostile reports whether err is (or wraps) a *HostileError.
func IsHostile(err error) bool {
	var h *HostileError
	return errors.As(err, &h)
}

// short quotes at most 64 bytes of a hostile value in a reason.
func short(s string) string { return task.Truncate(s, 64) }
