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
func Parse(m *kafka.Message, maxPayload int) (*Fields, error) {
	if maxPayload > 0 && len(m.Value) > maxPayload {
		return nil, hostile("payload of %d bytes is over the limit of %d", len(m.Value), maxPayload)
	}
	if len(m.Headers) == 0 {
		return nil, hostile("no headers: not a delayq record")
	}
	if len(m.Headers) > task.MaxHeaders+16 {
		return nil, hostile("%d headers", len(m.Headers))
	}
	dq := map[string]string{}
	var own map[string]string
	for _, h := range m.Headers {
		if strings.HasPrefix(strings.ToLower(h.Key), "dq-") {
			if _, dup := dq[h.Key]; dup {
				return nil, hostile("header %s given twice", short(h.Key))
			}
			dq[h.Key] = string(h.Value)
			continue
		}
		if own == nil {
			own = map[string]string{}
		}
		own[h.Key] = string(h.Value)
	}
	r := &Fields{Headers: own, Shard: -1}
	var ok bool
	if r.ID, ok = dq[HeaderID]; !ok {
		return nil, hostile("no %s header", HeaderID)
	}
	if err := task.ValidateStoredID(r.ID); err != nil {
		return nil, hostile("bad %s header: %v", HeaderID, err)
	}
	if r.Type, ok = dq[HeaderType]; !ok || r.Type == "" || len(r.Type) > task.MaxTypeLen {
		return nil, hostile("missing or bad %s header", HeaderType)
	}
	var err error
	if r.Gen, err = parseUint(dq, HeaderGen, true); err != nil {
		return nil, err
	}
	att, err := parseUint(dq, HeaderAttempt, true)
	if err != nil {
		return nil, err
	}
	if att < 1 || att > task.MaxMaxAttempts {
		return nil, hostile("%s header %d out of range", HeaderAttempt, att)
	}
	r.Attempt = int(att)
	if r.DueAt, err = parseMillis(dq, HeaderDueAt, true); err != nil {
		return nil, err
	}
	if r.FiredAt, err = parseMillis(dq, HeaderFiredAt, false); err != nil {
		return nil, err
	}
	if v, ok := dq[HeaderShard]; ok {
		sh, err := strconv.Atoi(v)
		if err != nil || sh < 0 || sh >= 1<<16 {
			return nil, hostile("bad %s header %q", HeaderShard, short(v))
		}
		r.Shard = sh
	}
	to, err := parseUint(dq, HeaderTimeoutMS, false)
	if err != nil {
		return nil, err
	}
	if to > uint64(task.MaxTimeout.Milliseconds()) {
		return nil, hostile("%s header %d out of range", HeaderTimeoutMS, to)
	}
	r.Timeout = time.Duration(to) * time.Millisecond
	if _, err := parseUint(dq, HeaderMaxAttempts, false); err != nil {
		return nil, err
	}
	if p, ok := dq[HeaderPriority]; ok {
		if _, err := strconv.Atoi(p); err != nil {
			return nil, hostile("bad %s header %q", HeaderPriority, short(p))
		}
	}
	r.ContentType = dq[HeaderContentType]
	return r, nil
}

func parseUint(h map[string]string, name string, required bool) (uint64, error) {
	v, ok := h[name]
	if !ok {
		if required {
			return 0, hostile("no %s header", name)
		}
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, hostile("bad %s header %q", name, short(v))
	}
	return n, nil
}

func parseMillis(h map[string]string, name string, required bool) (time.Time, error) {
	n, err := parseUint(h, name, required)
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
