package schedule

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/delayq/delayq/internal/task"
)

// MaxIDLen is the longest schedule id. A tick's task id adds "@" and the
// tick's unix milliseconds (at most 14 characters) and stays well inside
// task.MaxIDLen.
const MaxIDLen = 128

// Errors of this package. Every validation error is a *FieldError wrapping
// ErrInvalid (bad input: an API answers 422 naming the field); ErrSyntax and
// ErrUnknownField come from DecodeSpec (400); ErrTooMany from Store.Put
// beyond the store's limit. A failed etcd call is an *EtcdError (an
// infrastructure error, and so is ErrBusy); anything else is a bug.
var (
	ErrInvalid      = errors.New("invalid schedule")
	ErrNotFound     = errors.New("schedule not found")
	ErrSyntax       = errors.New("invalid JSON")
	ErrUnknownField = errors.New("unknown field")
	ErrTooMany      = errors.New("too many schedules")
	ErrBusy         = errors.New("changed concurrently too often, try again")
)

// EtcdError is a failed etcd call of the store: etcd's trouble, never
// bad input.
type EtcdError struct {
	Op  string // what the store did ("read schedule x")
	Err error
}

func (e *EtcdError) Error() string { return e.Op + ": " + e.Err.Error() }

// Unwrap is etcd's error.
func (e *EtcdError) Unwrap() error { return e.Err }

func etcdFailed(err error, format string, args ...any) error {
	return &EtcdError{Op: fmt.Sprintf(format, args...), Err: err}
}

// FieldError says which field of a schedule is wrong and why.
type FieldError struct {
	Field, Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Unwrap makes every FieldError an ErrInvalid.
func (e *FieldError) Unwrap() error { return ErrInvalid }

func invalid(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// ValidateID checks a schedule id: 1..MaxIDLen characters of
// [A-Za-z0-9._:-], not "." or ".." (it is a path segment of the API and
// of an etcd key, and the prefix of its ticks' task ids, which end in
// "@<unix ms>").
func ValidateID(id string) error {
	switch {
	case id == "":
		return invalid("id", "must not be empty")
	case len(id) > MaxIDLen:
		return invalid("id", "longer than %d characters", MaxIDLen)
	case id == "." || id == "..":
		return invalid("id", "must not be %q", id)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-'
		if !ok {
			return invalid("id", "%q: only letters, digits and . _ : - are allowed", id)
		}
	}
	return nil
}

// Catchup says what happens to ticks that were missed because no scheduler
// ran at their time (an outage longer than the lookahead).
type Catchup string

// The catch-up policies.
const (
	CatchupNone Catchup = "none" // missed ticks are skipped
	CatchupLast Catchup = "last" // the most recent missed tick fires once (the default)
	CatchupAll  Catchup = "all"  // every missed tick fires (at most MaxCatchup per pass)
)

// MaxCatchup bounds the missed ticks one scheduler pass materializes under
// CatchupAll; the rest are skipped and counted.
const MaxCatchup = 1000

// Template is the task each tick becomes: the fields of POST /v1/tasks
// without id, due_at and delay (a tick's id is TaskID, its due time the
// tick).
type Template struct {
	Type          string            `json:"type"`
	Payload       json.RawMessage   `json:"payload,omitempty"`
	PayloadBase64 string            `json:"payload_base64,omitempty"`
	Topic         string            `json:"topic,omitempty"`
	Key           string            `json:"key,omitempty"`
	Headers       map[string]string `json:"headers,omitempty"`
	MaxAttempts   int               `json:"max_attempts,omitempty"`
	Timeout       string            `json:"timeout,omitempty"`
	Priority      int               `json:"priority,omitempty"`
}

// Spec is a schedule as a user writes it (PUT /v1/schedules/{id}).
type Spec struct {
	// Cron is a cron expression of 5 fields (minute hour day-of-month
	// month day-of-week) or 6 with leading seconds, or a descriptor:
	// @yearly (@annually), @monthly, @weekly, @daily (@midnight), @hourly,
	// @every <duration> (at least 1s).
	Cron string `json:"cron"`
	// Timezone is the IANA zone the cron fields are read in ("" = UTC).
	Timezone string `json:"timezone,omitempty"`
	// Task is what every tick schedules.
	Task Template `json:"task"`
	// Paused schedules materialize no ticks.
	Paused bool `json:"paused,omitempty"`
	// Catchup is the policy for missed ticks ("" = last).
	Catchup Catchup `json:"catchup,omitempty"`
	// StartAt and EndAt bound the ticks: none before StartAt, none after
	// EndAt (both inclusive).
	StartAt *time.Time `json:"start_at,omitempty"`
	EndAt   *time.Time `json:"end_at,omitempty"`
}

// EffectiveCatchup is the policy with the default applied.
func (s Spec) EffectiveCatchup() Catchup {
	if s.Catchup == "" {
		return CatchupLast
	}
	return s.Catchup
}

// MaxSpecBytes bounds an encoded spec (it is one etcd value).
const MaxSpecBytes = 256 << 10

// DecodeSpec decodes a spec strictly, by the API's decoding policy
// (internal/daemon/wire/decode.go): one JSON object (ErrSyntax
// otherwise, also for a field given twice), field names matching exactly
// (ErrUnknownField, naming it), every string valid UTF-8 (a *FieldError);
// then Validate at now. A field of the wrong JSON type or a bad time is a
// *FieldError naming it. Times are kept at millisecond precision.
func DecodeSpec(b []byte, now time.Time) (Spec, error) {
	if err := strictSpecJSON(b); err != nil {
		return Spec{}, err
	}
	var raw struct {
		Spec
		StartAt *string `json:"start_at,omitempty"`
		EndAt   *string `json:"end_at,omitempty"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return Spec{}, decodeError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Spec{}, fmt.Errorf("%w: data after the JSON object", ErrSyntax)
	}
	s := raw.Spec
	var err error
	if s.StartAt, err = parseTime("start_at", raw.StartAt); err != nil {
		return Spec{}, err
	}
	if s.EndAt, err = parseTime("end_at", raw.EndAt); err != nil {
		return Spec{}, err
	}
	if err := s.Validate(now); err != nil {
		return Spec{}, err
	}
	return s, nil
}

func parseTime(field string, v *string) (*time.Time, error) {
	if v == nil {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339Nano, *v)
	if err != nil || !task.RFC3339Offset(*v) {
		return nil, invalid(field, "%q is not an RFC 3339 time with an offset of Z or -23:59 to +23:59 (e.g. 2026-01-02T15:04:05Z)", task.Truncate(*v, 64))
	}
	t = t.Truncate(time.Millisecond)
	return &t, nil
}

func decodeError(err error) error {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		// (DecodeSpec decodes into a struct that embeds Spec)
		field := strings.TrimPrefix(typeErr.Field, "Spec.")
		if field == "" {
			return fmt.Errorf("%w: expected a JSON object", ErrSyntax)
		}
		return invalid(field, "must be a JSON %s, not %s", jsonKind(typeErr.Type.Kind().String()), typeErr.Value)
	case errors.As(err, &syntaxErr), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: %w", ErrSyntax, err)
	}
	// encoding/json's only other decode errors: unknown fields and bad
	// time strings
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return fmt.Errorf("%w %s", ErrUnknownField, f)
	}
	return fmt.Errorf("%w: %w", ErrSyntax, err)
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "string"
	case "bool":
		return "boolean"
	case "map", "struct":
		return "object"
	case "slice":
		return "string"
	}
	return "number"
}

// Validate checks every field of a new spec at now, naming the first
// wrong one: the cron expression and time zone parse, the catch-up policy
// is known, StartAt and EndAt are in range with an offset JSON can write,
// EndAt is after StartAt and not before now (a schedule that has ended
// already is a mistake, not a schedule), and the template makes a valid
// task (fields "task.<name>") of a type a new task may have
// (task.ValidateType: not "/", "." or ".."). A stored spec is only
// compiled (Compile), so a schedule stored before a rule grew (or whose
// end passed) keeps its place. Every spec that validates encodes to
// JSON and decodes back to itself (FuzzDecodeSpec).
func (s Spec) Validate(now time.Time) error {
	if _, err := Compile(s); err != nil {
		return err
	}
	if s.EndAt != nil && s.EndAt.Before(now) {
		return invalid("end_at", "%s is in the past (now is %s): the schedule would never tick",
			s.EndAt.Format(time.RFC3339Nano), now.UTC().Truncate(time.Millisecond).Format(time.RFC3339Nano))
	}
	if err := task.ValidateType(s.Task.Type); err != nil {
		var fe *task.FieldError
		if errors.As(err, &fe) {
			return invalid("task."+fe.Field, "%s", fe.Reason)
		}
		return invalid("task.type", "%v", err)
	}
	return nil
}

// buildTask makes the template's task (without id and due time), checking
// its fields.
func (t Template) buildTask() (*task.Task, error) {
	tk := &task.Task{
		Type:        t.Type,
		Topic:       t.Topic,
		Key:         t.Key,
		Headers:     t.Headers,
		MaxAttempts: t.MaxAttempts,
		Priority:    t.Priority,
	}
	if len(tk.Headers) == 0 {
		tk.Headers = nil
	}
	hasJSON := len(t.Payload) > 0 && !bytes.Equal(bytes.TrimSpace(t.Payload), []byte("null"))
	switch {
	case hasJSON && t.PayloadBase64 != "":
		return nil, invalid("task.payload", "set at most one of payload and payload_base64")
	case hasJSON:
		if !json.Valid(t.Payload) || !utf8.Valid(t.Payload) {
			return nil, invalid("task.payload", "not a valid JSON value")
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, t.Payload); err != nil {
			return nil, invalid("task.payload", "not a valid JSON value")
		}
		tk.Payload, tk.PayloadJSON = compact.Bytes(), true
	case t.PayloadBase64 != "":
		p, err := base64.StdEncoding.DecodeString(t.PayloadBase64)
		if err != nil {
			return nil, invalid("task.payload_base64", "not standard base64 with padding")
		}
		tk.Payload = p
	}
	if t.Timeout != "" {
		d, err := time.ParseDuration(t.Timeout)
		if err != nil {
			return nil, invalid("task.timeout", "%q is not a Go duration (e.g. 30s)", t.Timeout)
		}
		tk.Timeout = d
	}
	// the id and due time are the tick's; stand-ins let ValidateStored
	// check the rest (the stored rule: Compile also compiles stored specs,
	// whose type may predate task.ValidateType; Spec.Validate adds it)
	tk.ID, tk.DueAt = "x", time.UnixMilli(1)
	if err := tk.ValidateStored(); err != nil {
		var fe *task.FieldError
		if errors.As(err, &fe) {
			return nil, invalid("task."+fe.Field, "%s", fe.Reason)
		}
		return nil, invalid("task", "%v", err)
	}
	return tk, nil
}
