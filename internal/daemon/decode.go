package daemon

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"sync"
	"time"

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
//   - "due_at" (RFC 3339, kept at millisecond precision) or "delay" (Go
//     duration, >= 0) or neither (now); both is 422. A delay is resolved
//     against Redis' clock when the task is stored (Submit.Relative); the
//     daemon's own clock only serves validation and, when Redis is down,
//     the absolute due time written to the journal.
//   - A null value is the same as an absent field.
//   - A missing id is generated (UUIDv7); an empty one is 422.

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

// due is a resolved due time: absolute, or relative to Redis' clock.
type due struct {
	At       time.Time // absolute due time (for relative ones: daemon clock + Delay)
	Delay    time.Duration
	Relative bool
}

// decodeTask decodes one task object and validates it. now is the daemon's
// clock, used for a relative due time's absolute estimate.
func decodeTask(b []byte, now time.Time) (redisstore.Submit, *apiError) {
	req, e := readTask(b)
	if e != nil {
		return redisstore.Submit{}, e
	}
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
	} else {
		id, err := uuid.NewV7()
		if err != nil {
			return redisstore.Submit{}, errInternal("generate id: " + err.Error())
		}
		t.ID = id.String()
	}
	hasJSON := len(req.Payload) > 0
	switch {
	case hasJSON && req.PayloadBase64 != nil:
		return redisstore.Submit{}, errInvalidTask("payload, payload_base64: set at most one")
	case hasJSON:
		t.Payload, t.PayloadJSON = req.Payload, true
	case req.PayloadBase64 != nil:
		p, err := base64.StdEncoding.DecodeString(*req.PayloadBase64)
		if err != nil {
			return redisstore.Submit{}, errInvalidTask("payload_base64: not standard base64 with padding")
		}
		if len(p) > 0 {
			t.Payload = p
		}
	}
	if req.Timeout != nil {
		d, err := time.ParseDuration(*req.Timeout)
		if err != nil {
			return redisstore.Submit{}, errInvalidTask(fmt.Sprintf("timeout: %q is not a Go duration (e.g. 30s)", truncateString(*req.Timeout, 64)))
		}
		t.Timeout = d
	}
	d, e := parseDue(req.DueAt, req.Delay, now, true)
	if e != nil {
		return redisstore.Submit{}, e
	}
	t.DueAt = d.At
	if err := t.Validate(); err != nil {
		return redisstore.Submit{}, errInvalidTask(validationMessage(err))
	}
	return redisstore.Submit{Task: t, Delay: d.Delay, Relative: d.Relative}, nil
}

// parseDue resolves "due_at" / "delay". With optional, neither means now.
func parseDue(dueAt, delay *string, now time.Time, optional bool) (due, *apiError) {
	switch {
	case dueAt != nil && delay != nil:
		return due{}, errInvalidTask("due_at, delay: set at most one")
	case dueAt != nil:
		at, err := time.Parse(time.RFC3339Nano, *dueAt)
		if err != nil {
			return due{}, errInvalidTask(fmt.Sprintf("due_at: %q is not an RFC 3339 time (e.g. 2026-01-02T15:04:05.123Z)", truncateString(*dueAt, 64)))
		}
		at = at.Truncate(time.Millisecond).UTC()
		if y := at.Year(); y < 1970 || y > 9999 {
			return due{}, errInvalidTask("due_at: out of range (years 1970 to 9999)")
		}
		return due{At: at}, nil
	case delay != nil:
		d, err := time.ParseDuration(*delay)
		if err != nil {
			return due{}, errInvalidTask(fmt.Sprintf("delay: %q is not a Go duration (e.g. 90s, 1h30m)", truncateString(*delay, 64)))
		}
		if d < 0 {
			return due{}, errInvalidTask("delay: must not be negative")
		}
		return due{At: now.Add(d).Truncate(time.Millisecond).UTC(), Delay: d, Relative: true}, nil
	case optional:
		return due{At: now.Truncate(time.Millisecond).UTC(), Relative: true}, nil
	default:
		return due{}, errInvalidTask("due_at, delay: set one of them")
	}
}

// decodeReschedule decodes a PATCH body.
func decodeReschedule(b []byte, now time.Time) (due, *apiError) {
	if e := scanOne(b); e != nil {
		return due{}, e
	}
	r := &reader{b: b, i: skipWS(b, 0)}
	if r.b[r.i] != '{' {
		return due{}, notObject(r, "request")
	}
	var dueAt, delay *string
	var seen [2]bool
	e := r.object("request", func(key []byte) *apiError {
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
		return due{}, e
	}
	return parseDue(dueAt, delay, now, false)
}

// decodeBatch decodes the batch envelope {"tasks":[...]} into the raw
// items (sub-slices of b) and checks the batch limit before any item is
// looked at.
func decodeBatch(b []byte, maxBatch int) ([][]byte, *apiError) {
	if e := scanOne(b); e != nil {
		return nil, e
	}
	r := &reader{b: b, i: skipWS(b, 0)}
	if r.b[r.i] != '{' {
		return nil, notObject(r, "request")
	}
	var items [][]byte
	seen := false
	e := r.object("request", func(key []byte) *apiError {
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
				return &apiError{http.StatusRequestEntityTooLarge, codeBatchTooLarge,
					fmt.Sprintf("tasks: more than %d tasks, at most %d per batch", maxBatch, maxBatch)}
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
		return nil, errInvalidTask("tasks: is required (an array of tasks)")
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
func readTask(b []byte) (taskRequest, *apiError) {
	var req taskRequest
	if e := scanOne(b); e != nil {
		return req, e
	}
	r := &reader{b: b, i: skipWS(b, 0)}
	if r.b[r.i] != '{' {
		return req, notObject(r, "task")
	}
	var seen uint16
	e := r.object("task", func(key []byte) *apiError {
		f := taskField(key)
		if f < 0 {
			return unknownField(key)
		}
		if seen&(1<<f) != 0 {
			return duplicateField(key)
		}
		seen |= 1 << f
		var e *apiError
		switch f {
		case fID:
			e = r.optString("id", &req.ID)
		case fType:
			e = r.plainString("type", &req.Type)
		case fPayload:
			if req.Payload = r.skip(); string(req.Payload) == "null" {
				req.Payload = nil
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
func (r *reader) optString(field string, p **string) *apiError {
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
func (r *reader) plainString(field string, p *string) *apiError {
	if r.null() {
		return nil
	}
	s, e := r.str(field)
	*p = s
	return e
}

// headers reads an object of strings (null values become "", a repeated
// name keeps the last value, as encoding/json does).
func (r *reader) headers(p *map[string]string) *apiError {
	if r.null() {
		return nil
	}
	if r.b[r.i] != '{' {
		e := typeError("headers", "an object of strings", r)
		r.skip()
		return e
	}
	m := make(map[string]string)
	e := r.object("headers", func(key []byte) *apiError {
		k := string(key)
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

// validationMessage is a task validation error as the API shows it: it
// starts with the field name ("type: is required").
func validationMessage(err error) string {
	var fe *task.FieldError
	if errors.As(err, &fe) {
		return fe.Field + ": " + fe.Reason
	}
	return err.Error()
}

func truncateString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// readJSONBody checks the content type and reads the body within the
// limit into buf (grown as needed) and returns it.
func readJSONBody(w http.ResponseWriter, r *http.Request, limit int64, buf *bytes.Buffer) ([]byte, *apiError) {
	if ct := r.Header.Get("Content-Type"); !isJSONContentType(ct) {
		return nil, &apiError{http.StatusUnsupportedMediaType, codeUnsupportedMedia,
			fmt.Sprintf("Content-Type %q: must be application/json", truncateString(ct, 64))}
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
		return nil, errInvalidJSON("reading body: " + err.Error())
	}
	return buf.Bytes(), nil
}

// bodyReadTimeout bounds reading one request body.
const bodyReadTimeout = 30 * time.Second

// bufPool recycles request and response buffers of the batch endpoint
// (hundreds of kilobytes each). A task's payload points into the request
// buffer, so a buffer goes back to the pool only once the request is
// answered: nothing keeps a task beyond its request (the store and the
// journal copy what they keep).
var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func getBuf() *bytes.Buffer { return bufPool.Get().(*bytes.Buffer) }

func putBuf(b *bytes.Buffer) {
	if b.Cap() > 8<<20 {
		return
	}
	b.Reset()
	bufPool.Put(b)
}

func tooLarge(limit int64) *apiError {
	return &apiError{http.StatusRequestEntityTooLarge, codeTooLarge, fmt.Sprintf("body larger than %d bytes", limit)}
}

func isJSONContentType(ct string) bool {
	if ct == "application/json" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "application/json"
}
