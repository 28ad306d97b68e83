package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"mime"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
)

// Request decoding. Policy, the same for every endpoint:
//
//   - The body must be exactly one JSON value of the expected shape with
//     Content-Type application/json (parameters such as charset are
//     allowed); anything else is 415.
//   - Unknown fields are rejected (400 unknown_field, naming the field):
//     a misspelt "delay" must not silently schedule a task for now. Names
//     match exactly ("Type" is unknown), unlike encoding/json's default,
//     and a field given twice is 400 invalid_json.
//   - Syntax errors, trailing data and a non-object body are 400
//     invalid_json; a field of the wrong JSON type or with a wrong value is
//     422 invalid_task, naming the field.
//   - "payload" is any JSON value and is kept byte for byte as sent
//     (PayloadJSON); "payload_base64" carries raw bytes (standard base64
//     with padding); both at once is 422. A null or absent payload means
//     no payload.
//   - "due_at" (RFC 3339, kept at millisecond precision; the offset must
//     be Z or ±hh:mm with hh <= 23) or "delay" (Go duration, >= 0) or
//     neither (now); both is 422. Neither may end after task.MaxDueAt
//     (2248-09-26T15:10:22.207Z, what the due-set score holds exactly):
//     422 stating that time. A delay is resolved
//     against Redis' clock when the task is stored (Submit.Relative); the
//     daemon's own clock only serves validation and, when Redis is down,
//     the absolute due time written to the journal.
//   - A null value is the same as an absent field.
//   - A missing id is generated (UUIDv7); an empty one is 422.
//   - Every string (id, type, topic, key, header names and values, and
//     each string inside "payload") must be valid UTF-8 with no unpaired
//     \u surrogate escape: 422 naming the field otherwise. encoding/json
//     would repair such a string to U+FFFD, silently merging distinct
//     ids; binary data goes through payload_base64.

// taskRequest is one task as sent (POST /v1/tasks, batch items); nil
// pointers are absent (or null) fields.
type taskRequest struct {
	ID            *string
	Type          string
	Payload       []byte // raw JSON value, verbatim
	PayloadBase64 *string
	DueAt         *string
	Delay         *string
	Topic         string
	Key           string
	Headers       map[string]string
	MaxAttempts   int
	Timeout       *string
	Priority      int
}

// Due is a resolved due time: absolute, or relative to Redis' clock.
type Due struct {
	At       time.Time // absolute due time (for relative ones: daemon clock + Delay)
	Delay    time.Duration
	Relative bool
}

// DecodeTask decodes one task object and validates it. now is the daemon's
// clock, used for a relative due time's absolute estimate.
func DecodeTask(b []byte, now time.Time) (redisstore.Submit, *Error) {
	req, e := readTask(b)
	if e != nil {
		return redisstore.Submit{}, e
	}
	return req.submit(now)
}

// submit normalises and validates a task as sent.
func (req *taskRequest) submit(now time.Time) (redisstore.Submit, *Error) {
	t := &task.Task{
		Type:        req.Type,
		Topic:       req.Topic,
		Key:         req.Key,
		Headers:     req.Headers,
		MaxAttempts: req.MaxAttempts,
		Priority:    req.Priority,
	}
	if len(t.Headers) == 0 {
		t.Headers = nil
	}
	if req.ID != nil {
		t.ID = *req.ID
	} else if e := newID(t); e != nil {
		return redisstore.Submit{}, e
	}
	hasJSON := len(req.Payload) > 0
	switch {
	case hasJSON && req.PayloadBase64 != nil:
		return redisstore.Submit{}, payloadsConflict()
	case hasJSON:
		t.Payload, t.PayloadJSON = req.Payload, true
	case req.PayloadBase64 != nil:
		p, err := base64.StdEncoding.DecodeString(*req.PayloadBase64)
		if err != nil {
			return redisstore.Submit{}, InvalidTask("payload_base64: not standard base64 with padding")
		}
		if len(p) > 0 {
			t.Payload = p
		}
	}
	if req.Timeout != nil {
		d, err := time.ParseDuration(*req.Timeout)
		if err != nil {
			return redisstore.Submit{}, InvalidTask(fmt.Sprintf("timeout: %q is not a Go duration (e.g. 30s)", task.Truncate(*req.Timeout, 64)))
		}
		if e := checkTimeout(d, *req.Timeout); e != nil {
			return redisstore.Submit{}, e
		}
		t.Timeout = d
	}
	d, e := parseDue(req.DueAt, req.Delay, now, true)
	if e != nil {
		return redisstore.Submit{}, e
	}
	return validated(t, d)
}

// Fields is one task as a Go program gives it (package embedded): the
// typed twin of the API's task object. NewTask checks it by the API's
// rules, in the API's order, so that a task refused here gets the answer
// the same task gets as JSON (client.Task.MarshalJSON then DecodeTask: a
// fuzz test holds the two to it), without encoding it to JSON and
// decoding it back (a fifth of the embedded producer's CPU per task).
// One difference, on purpose: a string that is not valid UTF-8 is refused
// naming its field, where json.Marshal would have replaced its bytes.
type Fields struct {
	ID           string // "": a generated UUIDv7
	Type         string
	Payload      []byte    // a JSON value, kept byte for byte (surrounding white space trimmed); nil or "null": none
	PayloadBytes []byte    // binary; non-nil counts as set, as payload_base64 does
	DueAt        time.Time // zero: not set
	Delay        time.Duration
	Topic        string
	Key          string
	Headers      map[string]string
	MaxAttempts  int
	Timeout      time.Duration
	Priority     int
}

// NewTask validates f as DecodeTask validates the same task in JSON. The
// task holds copies of f's slices and map.
func NewTask(f *Fields, now time.Time) (redisstore.Submit, *Error) {
	for _, s := range [...]struct{ field, v string }{{"id", f.ID}, {"type", f.Type}, {"topic", f.Topic}, {"key", f.Key}} {
		if !utf8.ValidString(s.v) {
			return redisstore.Submit{}, errNotUTF8(s.field)
		}
	}
	for k, v := range f.Headers {
		if !utf8.ValidString(k) {
			return redisstore.Submit{}, errHeaderName(k)
		}
		if !utf8.ValidString(v) {
			return redisstore.Submit{}, errNotUTF8("headers." + k)
		}
	}
	payload := bytes.TrimSpace(f.Payload)
	if string(payload) == "null" {
		payload = nil
	}
	if len(payload) > 0 && !json.Valid(payload) {
		return redisstore.Submit{}, InvalidTask("payload: not a JSON value; send binary data as payload_base64 (PayloadBytes)")
	}
	if len(payload) > 0 && !validText(payload) {
		return redisstore.Submit{}, errPayloadNotUTF8()
	}
	t := &task.Task{
		ID:          f.ID,
		Type:        f.Type,
		Topic:       f.Topic,
		Key:         f.Key,
		Headers:     maps.Clone(f.Headers),
		MaxAttempts: f.MaxAttempts,
		Priority:    f.Priority,
	}
	if len(t.Headers) == 0 {
		t.Headers = nil
	}
	if t.ID == "" {
		if e := newID(t); e != nil {
			return redisstore.Submit{}, e
		}
	}
	switch {
	case len(payload) > 0 && f.PayloadBytes != nil:
		return redisstore.Submit{}, payloadsConflict()
	case len(payload) > 0:
		t.Payload, t.PayloadJSON = bytes.Clone(payload), true
	case len(f.PayloadBytes) > 0:
		t.Payload = bytes.Clone(f.PayloadBytes)
	}
	if f.Timeout != 0 {
		if e := checkTimeout(f.Timeout, f.Timeout.String()); e != nil {
			return redisstore.Submit{}, e
		}
		t.Timeout = f.Timeout
	}
	var d Due
	var e *Error
	switch {
	case !f.DueAt.IsZero() && f.Delay != 0:
		e = duesConflict()
	case !f.DueAt.IsZero():
		d, e = absoluteDue(f.DueAt)
	case f.Delay != 0:
		d, e = relativeDue(f.Delay, f.Delay.String(), now)
	default:
		d = nowDue(now)
	}
	if e != nil {
		return redisstore.Submit{}, e
	}
	return validated(t, d)
}

// newID gives t a generated id (UUIDv7), for a task sent without one.
func newID(t *task.Task) *Error {
	id, err := uuid.NewV7()
	if err != nil {
		return Internal("generate id: " + err.Error())
	}
	t.ID = id.String()
	return nil
}

func errPayloadNotUTF8() *Error {
	return InvalidTask(`payload: a string in it is not valid UTF-8 (invalid bytes or an unpaired \u surrogate escape); send binary data as payload_base64`)
}

func errHeaderName(k string) *Error {
	return InvalidTask(fmt.Sprintf("headers: name %q is not valid UTF-8", task.Truncate(k, 64)))
}

// nowDue is the due time of a task sent with neither due_at nor delay.
func nowDue(now time.Time) Due {
	return Due{At: now.Truncate(time.Millisecond).UTC(), Relative: true}
}

func payloadsConflict() *Error { return InvalidTask("payload, payload_base64: set at most one") }

func duesConflict() *Error { return InvalidTask("due_at, delay: set at most one") }

// checkTimeout is the handler timeout's rule; text is the timeout as sent.
func checkTimeout(d time.Duration, text string) *Error {
	if d != 0 && d < time.Millisecond {
		return InvalidTask(fmt.Sprintf("timeout: %q is below 1ms, the smallest timeout (0 means the worker's default)", task.Truncate(text, 64)))
	}
	return nil
}

// validated checks the task due at d and makes it a store submit.
func validated(t *task.Task, d Due) (redisstore.Submit, *Error) {
	t.DueAt = d.At
	if err := t.Validate(); err != nil {
		return redisstore.Submit{}, InvalidTask(ValidationMessage(err))
	}
	return redisstore.Submit{Task: t, Delay: d.Delay, Relative: d.Relative}, nil
}

// parseDue resolves "due_at" / "delay". With optional, neither means now.
func parseDue(dueAt, delay *string, now time.Time, optional bool) (Due, *Error) {
	switch {
	case dueAt != nil && delay != nil:
		return Due{}, duesConflict()
	case dueAt != nil:
		at, err := time.Parse(time.RFC3339Nano, *dueAt)
		if err != nil {
			return Due{}, InvalidTask(fmt.Sprintf("due_at: %q is not an RFC 3339 time (e.g. 2026-01-02T15:04:05.123Z)", task.Truncate(*dueAt, 64)))
		}
		if !task.RFC3339Offset(*dueAt) {
			return Due{}, InvalidTask(fmt.Sprintf("due_at: %q has no valid RFC 3339 offset (Z or ±hh:mm with hh at most 23, mm at most 59)", task.Truncate(*dueAt, 64)))
		}
		return absoluteDue(at)
	case delay != nil:
		d, err := time.ParseDuration(*delay)
		if err != nil {
			return Due{}, InvalidTask(fmt.Sprintf("delay: %q is not a Go duration (e.g. 90s, 1h30m)", task.Truncate(*delay, 64)))
		}
		return relativeDue(d, *delay, now)
	case optional:
		return nowDue(now), nil
	default:
		return Due{}, InvalidTask("due_at, delay: set one of them")
	}
}

// absoluteDue is a due_at time, to the millisecond, within range.
func absoluteDue(at time.Time) (Due, *Error) {
	at = at.Truncate(time.Millisecond).UTC()
	if at.Before(time.Unix(0, 0)) || task.Millis(at) > task.MaxDueMillis {
		return Due{}, InvalidTask("due_at: out of range: the latest accepted time is " + task.MaxDueText + " (and the earliest 1970-01-01T00:00:00Z)")
	}
	return Due{At: at}, nil
}

// relativeDue is a delay from now (on Redis' clock; now estimates it); text
// is the delay as sent.
func relativeDue(d time.Duration, text string, now time.Time) (Due, *Error) {
	if d < 0 {
		return Due{}, InvalidTask("delay: must not be negative")
	}
	at := now.Add(d).Truncate(time.Millisecond).UTC()
	if task.Millis(at) > task.MaxDueMillis {
		return Due{}, InvalidTask(fmt.Sprintf("delay: %s from now is after the latest accepted time, %s", task.Truncate(text, 64), task.MaxDueText))
	}
	return Due{At: at, Delay: d, Relative: true}, nil
}

// DecodeReschedule decodes a PATCH body.
func DecodeReschedule(b []byte, now time.Time) (Due, *Error) {
	if e := scanOne(b); e != nil {
		return Due{}, e
	}
	r := &reader{b: b, i: skipWS(b, 0)}
	if r.b[r.i] != '{' {
		return Due{}, notObject(r, "request")
	}
	var dueAt, delay *string
	var seen [2]bool
	e := r.object(func(key []byte) *Error {
		var f int
		var p **string
		switch string(key) {
		case "due_at":
			f, p = 0, &dueAt
		case "delay":
			f, p = 1, &delay
		default:
			return unknownField(key)
		}
		if seen[f] {
			return duplicateField(key)
		}
		seen[f] = true
		return r.optString(string(key), p)
	})
	if e != nil {
		return Due{}, e
	}
	return parseDue(dueAt, delay, now, false)
}

// DecodeBatch decodes the batch envelope {"tasks":[...]} into the raw
// items (sub-slices of b) and checks the batch limit before any item is
// looked at.
func DecodeBatch(b []byte, maxBatch int) ([][]byte, *Error) {
	if e := scanOne(b); e != nil {
		return nil, e
	}
	r := &reader{b: b, i: skipWS(b, 0)}
	if r.b[r.i] != '{' {
		return nil, notObject(r, "request")
	}
	var items [][]byte
	seen := false
	e := r.object(func(key []byte) *Error {
		if string(key) != "tasks" {
			return unknownField(key)
		}
		if seen {
			return duplicateField(key)
		}
		seen = true
		if r.null() {
			return nil
		}
		if r.b[r.i] != '[' {
			e := typeError("tasks", "an array of tasks", r)
			r.skip()
			return e
		}
		items = make([][]byte, 0, min(maxBatch+1, 1024))
		r.i = skipWS(r.b, r.i+1)
		for r.b[r.i] != ']' {
			if len(items) == maxBatch {
				return BatchTooLarge(maxBatch)
			}
			items = append(items, r.skip())
			if r.i = skipWS(r.b, r.i); r.b[r.i] == ',' {
				r.i = skipWS(r.b, r.i+1)
			}
		}
		r.i++
		return nil
	})
	if e != nil {
		return nil, e
	}
	if items == nil {
		return nil, InvalidTask("tasks: is required (an array of tasks)")
	}
	return items, nil
}

// Field names of a task object, matched exactly (encoding/json would also
// take "Type" for "type").
const (
	fID = iota
	fType
	fPayload
	fPayloadBase64
	fDueAt
	fDelay
	fTopic
	fKey
	fHeaders
	fMaxAttempts
	fTimeout
	fPriority
)

func taskField(key []byte) int {
	switch string(key) {
	case "id":
		return fID
	case "type":
		return fType
	case "payload":
		return fPayload
	case "payload_base64":
		return fPayloadBase64
	case "due_at":
		return fDueAt
	case "delay":
		return fDelay
	case "topic":
		return fTopic
	case "key":
		return fKey
	case "headers":
		return fHeaders
	case "max_attempts":
		return fMaxAttempts
	case "timeout":
		return fTimeout
	case "priority":
		return fPriority
	}
	return -1
}

// readTask reads one task object. A null value is the same as an absent
// field.
func readTask(b []byte) (taskRequest, *Error) {
	var req taskRequest
	if e := scanOne(b); e != nil {
		return req, e
	}
	r := &reader{b: b, i: skipWS(b, 0)}
	if r.b[r.i] != '{' {
		return req, notObject(r, "task")
	}
	var seen uint16
	e := r.object(func(key []byte) *Error {
		f := taskField(key)
		if f < 0 {
			return unknownField(key)
		}
		if seen&(1<<f) != 0 {
			return duplicateField(key)
		}
		seen |= 1 << f
		var e *Error
		switch f {
		case fID:
			e = r.optString("id", &req.ID)
		case fType:
			e = r.plainString("type", &req.Type)
		case fPayload:
			if req.Payload = r.skip(); string(req.Payload) == "null" {
				req.Payload = nil
			} else if !validText(req.Payload) {
				e = errPayloadNotUTF8()
			}
		case fPayloadBase64:
			e = r.optString("payload_base64", &req.PayloadBase64)
		case fDueAt:
			e = r.optString("due_at", &req.DueAt)
		case fDelay:
			e = r.optString("delay", &req.Delay)
		case fTopic:
			e = r.plainString("topic", &req.Topic)
		case fKey:
			e = r.plainString("key", &req.Key)
		case fHeaders:
			e = r.headers(&req.Headers)
		case fMaxAttempts:
			if !r.null() {
				req.MaxAttempts, e = r.integer("max_attempts")
			}
		case fTimeout:
			e = r.optString("timeout", &req.Timeout)
		case fPriority:
			if !r.null() {
				req.Priority, e = r.integer("priority")
			}
		}
		return e
	})
	return req, e
}

// optString reads a string or null into *p.
func (r *reader) optString(field string, p **string) *Error {
	if r.null() {
		*p = nil
		return nil
	}
	s, e := r.str(field)
	if e == nil {
		*p = &s
	}
	return e
}

// plainString reads a string into *p; null leaves it empty.
func (r *reader) plainString(field string, p *string) *Error {
	if r.null() {
		return nil
	}
	s, e := r.str(field)
	*p = s
	return e
}

// headers reads an object of strings (null values become "", a repeated
// name keeps the last value, as encoding/json does).
func (r *reader) headers(p *map[string]string) *Error {
	if r.null() {
		return nil
	}
	if r.b[r.i] != '{' {
		e := typeError("headers", "an object of strings", r)
		r.skip()
		return e
	}
	m := make(map[string]string)
	e := r.object(func(key []byte) *Error {
		k := string(key)
		if r.badKey {
			r.skip()
			return errHeaderName(k)
		}
		if r.null() {
			m[k] = ""
			return nil
		}
		v, e := r.str("headers." + k)
		m[k] = v
		return e
	})
	*p = m
	return e
}

// ValidationMessage is a task validation error as the API shows it: it
// starts with the field name ("type: is required").
func ValidationMessage(err error) string {
	var fe *task.FieldError
	if errors.As(err, &fe) {
		return fe.Field + ": " + fe.Reason
	}
	return err.Error()
}

// ReadJSONBody checks the content type and reads the body within the
// limit into buf (grown as needed) and returns it.
func ReadJSONBody(w http.ResponseWriter, r *http.Request, limit int64, buf *bytes.Buffer) ([]byte, *Error) {
	if ct := r.Header.Get("Content-Type"); !IsJSONContentType(ct) {
		return nil, &Error{http.StatusUnsupportedMediaType, CodeUnsupportedMedia,
			fmt.Sprintf("Content-Type %q: must be application/json", task.Truncate(ct, 64))}
	}
	if r.ContentLength > limit {
		return nil, tooLarge(limit)
	}
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength) + 1)
	}
	// A client that sends its body slowly must not hold a request forever
	// (the server only bounds the headers). Not supported by every
	// ResponseWriter (e.g. in tests); then the server's limits apply.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(bodyReadTimeout))
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return nil, tooLarge(limit)
		}
		return nil, InvalidJSON("reading body: " + err.Error())
	}
	return buf.Bytes(), nil
}

// bodyReadTimeout bounds reading one request body.
const bodyReadTimeout = 30 * time.Second

// BatchTooLarge is the 413 batch_too_large answer to a batch of more than
// maxBatch tasks (DQ_MAX_BATCH).
func BatchTooLarge(maxBatch int) *Error {
	return &Error{http.StatusRequestEntityTooLarge, CodeBatchTooLarge,
		fmt.Sprintf("tasks: more than %d tasks, at most %d per batch", maxBatch, maxBatch)}
}

func tooLarge(limit int64) *Error {
	return &Error{http.StatusRequestEntityTooLarge, CodeTooLarge, fmt.Sprintf("body larger than %d bytes", limit)}
}

// IsJSONContentType reports whether the Content-Type header value ct is
// application/json (parameters such as charset allowed).
func IsJSONContentType(ct string) bool {
	if ct == "application/json" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "application/json"
}
