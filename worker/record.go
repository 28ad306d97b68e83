package worker

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delayq/delayq/internal/task"
)

// The Kafka record headers delayq writes (the pinned record contract) and
// the ones the worker adds to dead letters.
const (
	HeaderID          = "dq-id"
	HeaderType        = "dq-type"
	HeaderDueAt       = "dq-due-at"   // unix ms, decimal
	HeaderFiredAt     = "dq-fired-at" // unix ms, decimal
	HeaderAttempt     = "dq-attempt"  // 1-based
	HeaderGen         = "dq-gen"      // fire generation, decimal
	HeaderContentType = "dq-content-type"
	HeaderMaxAttempts = "dq-max-attempts"
	HeaderTimeoutMS   = "dq-timeout-ms"
	HeaderPriority    = "dq-priority"

	HeaderError        = "dq-error"        // dead letters: why
	HeaderDeadAt       = "dq-dead-at"      // dead letters: unix ms
	HeaderSourceTopic  = "dq-source-topic" // dead letters: where the record was read
	HeaderSourcePart   = "dq-source-partition"
	HeaderSourceOffset = "dq-source-offset"
	HeaderPayloadBytes = "dq-payload-bytes" // dead letters whose value was left out: its size
)

// hostileError is a record the worker cannot treat as a delayq task.
type hostileError struct{ reason string }

func (e *hostileError) Error() string { return e.reason }

func hostile(format string, args ...any) error {
	return &hostileError{reason: fmt.Sprintf(format, args...)}
}

// record is what the worker reads from a Kafka record's headers before it
// looks the task up in Redis.
type record struct {
	id          string
	typ         string
	gen         uint64
	attempt     int
	dueAt       time.Time
	firedAt     time.Time // zero when absent
	contentType string
	timeout     time.Duration // zero when absent
	headers     map[string]string
}

// parseRecord reads and checks the dq-* headers of m. Any problem is a
// *hostileError with a short reason for the dead letter.
func parseRecord(m *kafka.Message, maxPayload int) (*record, error) {
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
	r := &record{headers: own}
	var ok bool
	if r.id, ok = dq[HeaderID]; !ok {
		return nil, hostile("no %s header", HeaderID)
	}
	if err := task.ValidateID(r.id); err != nil {
		return nil, hostile("bad %s header: %v", HeaderID, err)
	}
	if r.typ, ok = dq[HeaderType]; !ok || r.typ == "" || len(r.typ) > task.MaxTypeLen {
		return nil, hostile("missing or bad %s header", HeaderType)
	}
	var err error
	if r.gen, err = parseUint(dq, HeaderGen, true); err != nil {
		return nil, err
	}
	att, err := parseUint(dq, HeaderAttempt, true)
	if err != nil {
		return nil, err
	}
	if att < 1 || att > task.MaxMaxAttempts {
		return nil, hostile("%s header %d out of range", HeaderAttempt, att)
	}
	r.attempt = int(att)
	if r.dueAt, err = parseMillis(dq, HeaderDueAt, true); err != nil {
		return nil, err
	}
	if r.firedAt, err = parseMillis(dq, HeaderFiredAt, false); err != nil {
		return nil, err
	}
	to, err := parseUint(dq, HeaderTimeoutMS, false)
	if err != nil {
		return nil, err
	}
	if to > uint64(task.MaxTimeout.Milliseconds()) {
		return nil, hostile("%s header %d out of range", HeaderTimeoutMS, to)
	}
	r.timeout = time.Duration(to) * time.Millisecond
	if _, err := parseUint(dq, HeaderMaxAttempts, false); err != nil {
		return nil, err
	}
	if p, ok := dq[HeaderPriority]; ok {
		if _, err := strconv.Atoi(p); err != nil {
			return nil, hostile("bad %s header %q", HeaderPriority, short(p))
		}
	}
	r.contentType = dq[HeaderContentType]
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

// short quotes at most 64 bytes of a hostile value in a reason.
func short(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

func isHostile(err error) bool {
	var h *hostileError
	return errors.As(err, &h)
}

// deadMessage is the dead letter for m: the same key, value and headers,
// with dq-error, dq-attempt (when known), dq-dead-at and where it was read.
// A value larger than maxValue is left out (its size in dq-payload-bytes).
func deadMessage(m *kafka.Message, reason string, attempt int, now time.Time, maxValue int) kafka.Message {
	drop := map[string]bool{HeaderError: true, HeaderDeadAt: true, HeaderSourceTopic: true,
		HeaderSourcePart: true, HeaderSourceOffset: true, HeaderPayloadBytes: true}
	if attempt > 0 {
		drop[HeaderAttempt] = true
	}
	hs := make([]kafka.Header, 0, len(m.Headers)+7)
	for _, h := range m.Headers {
		if !drop[h.Key] {
			hs = append(hs, h)
		}
	}
	if len(reason) > 1024 {
		reason = reason[:1024]
	}
	hs = append(hs,
		kafka.Header{Key: HeaderError, Value: []byte(reason)},
		kafka.Header{Key: HeaderDeadAt, Value: []byte(strconv.FormatInt(task.Millis(now), 10))},
		kafka.Header{Key: HeaderSourceTopic, Value: []byte(m.Topic)},
		kafka.Header{Key: HeaderSourcePart, Value: []byte(strconv.Itoa(m.Partition))},
		kafka.Header{Key: HeaderSourceOffset, Value: []byte(strconv.FormatInt(m.Offset, 10))},
	)
	if attempt > 0 {
		hs = append(hs, kafka.Header{Key: HeaderAttempt, Value: []byte(strconv.Itoa(attempt))})
	}
	value := m.Value
	if maxValue >= 0 && len(value) > maxValue {
		hs = append(hs, kafka.Header{Key: HeaderPayloadBytes, Value: []byte(strconv.Itoa(len(value)))})
		value = nil
	}
	return kafka.Message{Key: m.Key, Value: value, Headers: hs}
}
