package ratelimit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/delayq/delayq/api"
	"github.com/delayq/delayq/internal/task"
)

// Errors of rule decoding and validation. DecodeRule and Rules.Put wrap one
// of them; the API maps them to its error codes.
var (
	ErrInvalidJSON  = errors.New("invalid JSON")        // not one JSON object of the rule's shape
	ErrUnknownField = errors.New("unknown field")       // a field the rule does not have
	ErrTooLarge     = errors.New("rule body too large") // more than maxBytes
	ErrInvalidRule  = errors.New("invalid rule")        // a field has a wrong value (*FieldError)
	ErrInvalidType  = errors.New("invalid task type")   // see ValidateType
)

// Bounds of rule values.
const (
	MaxLimit  = 1_000_000_000  // window_quota.limit, concurrency.limit, token_bucket.burst
	MaxRate   = 1_000_000      // token_bucket.rate, per second
	MaxWindow = 24 * time.Hour // window_quota.window
	// MinRate is the smallest token_bucket.rate a rule may be set to: one
	// token a day (the longest window), so that the wait for one token
	// fits MaxDeferral. A rule stored before this bound still applies
	// (see MaxDeferral).
	MinRate = 1.0 / (24 * 60 * 60)
	// MaxDeferral bounds how far ahead a deferred task is due: a longer
	// wait (a low-priority task behind a large reserve, a rule stored
	// before MinRate) is cut to it, and the task, due again then, is
	// deferred once more if the limit still holds it back. No deferral
	// is due after task.MaxDueMillis either.
	MaxDeferral = 24 * time.Hour
	MinSlotTTL  = time.Second // concurrency.slot_ttl
	// DefaultSlotTTL is concurrency.slot_ttl when a rule sent to the API
	// leaves it out: how long a crashed worker's slot stays taken.
	DefaultSlotTTL = 5 * time.Minute
	MaxSlotTTL     = 24 * time.Hour
	MinPriority    = -1000 // the task priority range (task.Validate)
	MaxPriority    = 1000
	DefaultMaxRaw  = 64 << 10 // DecodeRule's limit when maxBytes <= 0
)

// Rule is the set of limits of one task type: the API's wire type
// (api.LimitRule, declared once for the daemon and the Go client), with
// the validation below. Any subset of the three kinds may be set; at least
// one must be. Its JSON is also the value stored in etcd.
type Rule api.LimitRule

// The kinds of limit and the duration of their JSON: package api's.
type (
	// WindowQuota admits at most Limit tasks per fixed window. Windows
	// are aligned on the Unix epoch by Redis' clock, so every worker
	// agrees on them.
	WindowQuota = api.WindowQuota
	// TokenBucket admits tasks at Rate per second on average with bursts
	// of up to Burst. When taking a token would leave fewer than Reserve
	// tokens, only tasks with priority >= MinPriority may take it.
	TokenBucket = api.TokenBucket
	// Concurrency admits at most Limit tasks of the type running at once
	// across all workers. A slot not released within SlotTTL (a crashed
	// worker) frees itself.
	Concurrency = api.Concurrency
	// Duration is a time.Duration written in JSON as a Go duration
	// string ("10s", "1m30s").
	Duration = api.Duration
)

func parseDuration(raw []byte) (time.Duration, error) { return api.ParseDuration(raw) }

// FieldError is a rule field with a wrong value. It wraps ErrInvalidRule;
// its message starts with the field's JSON path.
type FieldError struct {
	Field  string // JSON path, e.g. "token_bucket.reserve"
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Unwrap makes errors.Is(err, ErrInvalidRule) true.
func (e *FieldError) Unwrap() error { return ErrInvalidRule }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Validate checks every value of the rule; the error (a *FieldError) names
// the first wrong field.
func (r Rule) Validate() error { return r.validate(MinRate) }

// validateStored is Validate for a rule read back from etcd: it accepts
// the token rates below MinRate that Put accepted before that bound, so
// that such a rule keeps limiting its type (the Limiter cuts the waits it
// gives to MaxDeferral) instead of being dropped as undecodable.
func (r Rule) validateStored() error { return r.validate(0) }

// validate checks the rule with minRate as the least token rate (0: any
// rate above 0).
func (r Rule) validate(minRate float64) error {
	if err := r.validateScope(); err != nil {
		return err
	}
	if r.WindowQuota == nil && r.TokenBucket == nil && r.Concurrency == nil {
		return fieldErr("rule", "at least one of window_quota, token_bucket or concurrency is required")
	}
	if q := r.WindowQuota; q != nil {
		if err := checkCount("window_quota.limit", q.Limit); err != nil {
			return err
		}
		if err := checkDuration("window_quota.window", q.Window.D(), time.Millisecond, MaxWindow); err != nil {
			return err
		}
	}
	if b := r.TokenBucket; b != nil {
		if math.IsNaN(b.Rate) || b.Rate <= 0 || b.Rate < minRate || b.Rate > MaxRate {
			return fieldErr("token_bucket.rate", "must be a number of tokens per second from %v (one a day) to %d, got %v", MinRate, MaxRate, b.Rate)
		}
		if err := checkCount("token_bucket.burst", b.Burst); err != nil {
			return err
		}
		if b.Reserve < 0 || b.Reserve >= b.Burst {
			return fieldErr("token_bucket.reserve", "must be at least 0 and below burst (%d), got %d", b.Burst, b.Reserve)
		}
		if b.MinPriority < MinPriority || b.MinPriority > MaxPriority {
			return fieldErr("token_bucket.min_priority", "must be between %d and %d, got %d", MinPriority, MaxPriority, b.MinPriority)
		}
	}
	if c := r.Concurrency; c != nil {
		if err := checkCount("concurrency.limit", c.Limit); err != nil {
			return err
		}
		if err := checkDuration("concurrency.slot_ttl", c.SlotTTL.D(), MinSlotTTL, MaxSlotTTL); err != nil {
			return err
		}
	}
	return nil
}

// validateScope checks Scope and Unordered. "" and "type" both mean the
// whole type and are kept as given (a rule reads back as it was set);
// Unordered is refused with the type scope rather than ignored: the type
// scope has no order to opt out of, and a flag that silently does nothing
// hides a rule that does not say what its author meant.
func (r Rule) validateScope() error {
	switch {
	case r.Scope == "" || r.Scope == api.ScopeType || r.Scope == api.ScopeKey:
	case strings.HasPrefix(r.Scope, api.ScopeHeaderPrefix):
		name := r.Scope[len(api.ScopeHeaderPrefix):]
		if !task.ValidHeaderName(name) {
			return fieldErr("scope", "header name %q must be 1..256 printable characters, not starting with dq- (the rule of task headers)", task.Truncate(name, 64))
		}
	default:
		return fieldErr("scope", "must be \"type\", \"key\" or \"header:<name>\", got %q", task.Truncate(r.Scope, 64))
	}
	if r.Unordered && !r.keyed() {
		return fieldErr("unordered", "applies only to a rule with a key or header scope (the type scope has no order per value)")
	}
	return nil
}

// keyed reports whether the rule limits each value of its scope apart
// (a key or header scope) rather than the whole type.
func (r Rule) keyed() bool { return (*api.LimitRule)(&r).Keyed() }

// ordered reports whether the tasks of one scope value start in due order
// (a keyed rule without Unordered).
func (r Rule) ordered() bool { return r.keyed() && !r.Unordered }

func checkCount(field string, v int64) error {
	if v < 1 || v > MaxLimit {
		return fieldErr(field, "must be between 1 and %d, got %d", MaxLimit, v)
	}
	return nil
}

func checkDuration(field string, d, lo, hi time.Duration) error {
	switch {
	case d <= 0:
		return fieldErr(field, "must be a positive duration such as \"10s\", got %q", d.String())
	case d < lo || d > hi:
		return fieldErr(field, "must be between %s and %s, got %s", lo, hi, d)
	case d%time.Millisecond != 0:
		return fieldErr(field, "must be a whole number of milliseconds, got %s", d)
	}
	return nil
}

// ValidateType checks the type of a rule being set: what
// ValidateStoredType checks, and a task.PathSegment (no URL carries "."
// or ".." as the {type} segment of /v1/limits/{type}).
// The error wraps ErrInvalidType.
func ValidateType(typ string) error {
	if err := ValidateStoredType(typ); err != nil {
		return err
	}
	if !task.PathSegment(typ) { // "/" is refused above
		return fmt.Errorf("%w %q: must not be %q: it cannot be a path segment of the API (/v1/limits/{type})", ErrInvalidType, typ, typ)
	}
	return nil
}

// ValidateStoredType checks a task type used as the name of a rule that
// may be stored already (set before ValidateType refused "." and ".."):
// task.ValidateKeyType, the rule of a type that names an etcd key (no
// '/', which would break the key layout). It is the rule of reading and
// deleting a rule and of the stored keys, so such a rule keeps applying
// and can be removed. The error wraps ErrInvalidType.
func ValidateStoredType(typ string) error {
	if err := task.ValidateKeyType(typ); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidType, err)
	}
	return nil
}

// wire is the decoding shape of a rule: durations stay raw so that their
// errors can name the field.
type wire struct {
	Scope       string `json:"scope"`
	Unordered   bool   `json:"unordered"`
	WindowQuota *struct {
		Limit  int64           `json:"limit"`
		Window json.RawMessage `json:"window"`
	} `json:"window_quota"`
	TokenBucket *TokenBucket `json:"token_bucket"`
	Concurrency *struct {
		Limit   int64           `json:"limit"`
		SlotTTL json.RawMessage `json:"slot_ttl"`
	} `json:"concurrency"`
}

// DecodeRule reads one rule as JSON from r (at most maxBytes; <= 0 means
// 64 KiB) and validates it. Decoding is strict: unknown fields, trailing
// data and a body that is not one object are errors. The error wraps
// ErrTooLarge, ErrInvalidJSON, ErrUnknownField or ErrInvalidRule.
func DecodeRule(r io.Reader, maxBytes int64) (Rule, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxRaw
	}
	b, err := io.ReadAll(io.LimitReader(r, maxBytes+1))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return Rule{}, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, maxBytes)
		}
		return Rule{}, fmt.Errorf("%w: reading body: %v", ErrInvalidJSON, err) //nolint:errorlint // ErrInvalidJSON is the one category callers map to an API code; the read error is detail
	}
	if int64(len(b)) > maxBytes {
		return Rule{}, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, maxBytes)
	}
	return decodeRule(b, Rule.Validate)
}

// decodeRule decodes a rule and checks it with validate: Rule.Validate
// for a rule being set, Rule.validateStored for one read from etcd.
func decodeRule(b []byte, validate func(Rule) error) (Rule, error) {
	var w wire
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return Rule{}, jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Rule{}, fmt.Errorf("%w: trailing data after the rule object", ErrInvalidJSON)
	}
	if bytes.TrimSpace(b)[0] != '{' {
		// null decodes into the zero wire without an error.
		return Rule{}, fmt.Errorf("%w: the rule must be a JSON object", ErrInvalidJSON)
	}
	rule := Rule{Scope: w.Scope, Unordered: w.Unordered}
	if q := w.WindowQuota; q != nil {
		win, err := rawDuration("window_quota.window", q.Window)
		if err != nil {
			return Rule{}, err
		}
		rule.WindowQuota = &WindowQuota{Limit: q.Limit, Window: Duration(win)}
	}
	rule.TokenBucket = w.TokenBucket
	if b := rule.TokenBucket; b != nil && b.Burst == 0 && b.Rate > 0 && b.Rate <= MaxRate {
		// burst left out: one second's worth of tokens, at least one
		b.Burst = max(1, int64(math.Ceil(b.Rate)))
	}
	if c := w.Concurrency; c != nil {
		ttl := DefaultSlotTTL
		if len(c.SlotTTL) > 0 && string(c.SlotTTL) != "null" {
			var err error
			if ttl, err = rawDuration("concurrency.slot_ttl", c.SlotTTL); err != nil {
				return Rule{}, err
			}
		}
		rule.Concurrency = &Concurrency{Limit: c.Limit, SlotTTL: Duration(ttl)}
	}
	if err := validate(rule); err != nil {
		return Rule{}, err
	}
	return rule, nil
}

func rawDuration(field string, raw json.RawMessage) (time.Duration, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, fieldErr(field, "is required (a duration such as \"10s\")")
	}
	d, err := parseDuration(raw)
	if err != nil {
		return 0, fieldErr(field, "%s", err.Error())
	}
	return d, nil
}

// jsonError classifies an encoding/json error.
func jsonError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return fmt.Errorf("%w: empty body, expected a JSON object", ErrInvalidJSON)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: truncated JSON", ErrInvalidJSON)
	case errors.As(err, &syn):
		return fmt.Errorf("%w at byte %d: %s", ErrInvalidJSON, syn.Offset, syn.Error())
	case errors.As(err, &typ):
		if typ.Field == "" {
			return fmt.Errorf("%w: the rule must be a JSON object, not %s", ErrInvalidJSON, typ.Value)
		}
		return fieldErr(typ.Field, "expected %s, got JSON %s", jsonKind(typ.Type.Kind()), typ.Value)
	}
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return fmt.Errorf("%w %s (unknown fields are rejected)", ErrUnknownField, name)
	}
	return fmt.Errorf("%w: %s", ErrInvalidJSON, strings.TrimPrefix(msg, "json: "))
}

func jsonKind(k reflect.Kind) string {
	switch k {
	case reflect.Int, reflect.Int64:
		return "an integer (in range)"
	case reflect.Float64:
		return "a number (in range)"
	case reflect.Pointer, reflect.Struct:
		return "an object"
	case reflect.Slice: // json.RawMessage never fails; kept for completeness
		return "a duration string"
	}
	return "another type"
}

// clone returns a deep copy of r.
func (r Rule) clone() Rule {
	if r.WindowQuota != nil {
		q := *r.WindowQuota
		r.WindowQuota = &q
	}
	if r.TokenBucket != nil {
		b := *r.TokenBucket
		r.TokenBucket = &b
	}
	if r.Concurrency != nil {
		c := *r.Concurrency
		r.Concurrency = &c
	}
	return r
}
