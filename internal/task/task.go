package task

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// State is where a task is in its life. The names are part of the API contract.
type State string

// The states, exactly as the API names them.
const (
	StateJournaled State = "journaled" // only in a daemon's local journal so far
	StateScheduled State = "scheduled" // waiting in its shard's due set
	StateFired     State = "fired"     // taken by a shard leader: in Kafka, or being written there
	StateSucceeded State = "succeeded" // a worker's handler finished
	StateRetrying  State = "retrying"  // back in the due set with attempt+1
	StateDead      State = "dead"      // out of attempts or failed permanently
	StateCancelled State = "cancelled" // cancelled before it fired
	StatePaused    State = "paused"    // parked by a worker because its type is paused; runs when resumed
	StateDelivered State = "delivered" // fired to a topic no delayq work process handles, and Kafka acknowledged it
)

// Limits and defaults shared by every entry point.
const (
	MaxIDLen           = 200
	MaxTypeLen         = 200
	MaxTopicLen        = 249 // Kafka's own limit
	MaxHeaders         = 64
	DefaultMaxAttempts = 10
	MaxMaxAttempts     = 1000
	MaxTimeout         = 24 * time.Hour
	DefaultTopic       = "dq.tasks"
)

// MaxDueMillis is the latest due time, in unix ms, that a task may have:
// 2^43 - 1 (2248-09-26T15:10:22.207Z). The Redis store's due-set score is
// the due time in ms plus the record's bucket/1024 (see redisstore's
// common.lua); a double holds that fraction exactly only below 2^43 ms, so
// a later task would be looked up in the wrong bucket when due.
const MaxDueMillis = 1<<43 - 1

// MaxDueAt is MaxDueMillis as a time.
var MaxDueAt = FromMillis(MaxDueMillis)

// MaxDueText is MaxDueAt as the API writes times, for messages.
const MaxDueText = "2248-09-26T15:10:22.207Z"

// Task is one delayed task. The first group of fields is set by the producer
// and never changes once scheduled (except DueAt); the second group is kept
// by the store.
type Task struct {
	ID          string
	Type        string
	Payload     []byte
	PayloadJSON bool // Payload is a JSON value (sent with content type application/json)
	DueAt       time.Time
	Topic       string // empty: the default topic
	Key         string // empty: the id
	Headers     map[string]string
	MaxAttempts int           // 0: DefaultMaxAttempts
	Timeout     time.Duration // 0: the worker's default
	Priority    int

	State     State
	Attempt   int    // 1-based number of the current (or next) execution
	Gen       uint64 // generation: increases whenever the task waits again with something new (retry, deferral, reschedule, update, redrive); a Kafka copy of another generation is stale
	Shard     int
	LastError string
	// DiedAt is when a dead task died (its dead-set score); zero for a
	// task in any other state.
	DiedAt time.Time
	// Receipt is where and when the task's latest copy was fired (nil:
	// never fired since the receipt was introduced).
	Receipt *Receipt
	// History is the task's ended attempts the store recorded, oldest
	// first (failures always, a success when the task failed before; only
	// a read of one task fills it, not a list);
	// HistoryDropped counts the older ones it no longer keeps. (Not
	// "Attempts": that is the method giving MaxAttempts' default.)
	History        []Attempt
	HistoryDropped int
}

// Attempt is one ended attempt of a task, in its history.
type Attempt struct {
	Attempt   int
	StartedAt time.Time // when the worker began running it; zero: unknown
	EndedAt   time.Time // when its outcome was stored (Redis' clock); zero: unknown
	Outcome   string    // OutcomeRetry, OutcomeDead or OutcomeSucceeded
	Error     string    // the handler's error ("" for a success)
}

// The outcomes of an attempt, as the API names them.
const (
	OutcomeRetry     = "retry"
	OutcomeDead      = "dead"
	OutcomeSucceeded = "succeeded"
)

// Receipt is the fire receipt of a task: what Kafka acknowledged for the
// latest fired copy. It is kept through retries and after the task
// finished (until the retention purges the task).
type Receipt struct {
	FiredAt   time.Time // when the record was produced (Redis' clock, ms); the record's timestamp
	DueAt     time.Time // the due time of the generation that was fired: FiredAt - DueAt is its lateness
	Partition int32     // of the record Kafka acknowledged
	Offset    int64     // of the record Kafka acknowledged
	Attempt   int       // the attempt that was fired
	Gen       uint64    // the generation that was fired
	Token     int64     // the fencing token of the shard leader that fired it (its etcd election revision)
	Delivered bool      // fired to a topic no delayq work process handles: the task ended there
}

// ContentType is the MIME type of the payload.
func (t *Task) ContentType() string {
	if t.PayloadJSON {
		return "application/json"
	}
	return "application/octet-stream"
}

// KafkaKey is the record key: the task's key, or its id.
func (t *Task) KafkaKey() string {
	if t.Key != "" {
		return t.Key
	}
	return t.ID
}

// Attempts is the effective maximum number of attempts.
func (t *Task) Attempts() int {
	if t.MaxAttempts <= 0 {
		return DefaultMaxAttempts
	}
	return t.MaxAttempts
}

// ErrInvalid is wrapped by every validation error.
var ErrInvalid = errors.New("invalid task")

// FieldError says which field is wrong and why.
type FieldError struct {
	Field, Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }
func (e *FieldError) Unwrap() error { return ErrInvalid }

func invalid(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// PathSegment reports whether s can be a whole segment of an API path
// (the {id} of /v1/tasks/{id}, the {type} of /v1/types/{type}/pause):
// not "/", "." or "..". No URL carries those three there: clients,
// browsers and proxies resolve the dot segments (also when escaped as
// %2E), and Go's http.ServeMux takes the escaped "/" (%2F) of a whole
// segment for a trailing slash. The one owner of that rule: new ids,
// types, pauses and rate-limit rules are checked with it.
func PathSegment(s string) bool { return s != "/" && s != "." && s != ".." }

// ValidateID checks the id of a new task: what ValidateStoredID checks,
// and a PathSegment (/v1/tasks/{id}, /v1/dead/{id}/redrive): such a task
// could be created but never read, changed or cancelled by id.
func ValidateID(id string) error {
	if err := ValidateStoredID(id); err != nil {
		return err
	}
	if !PathSegment(id) {
		return invalid("id", "must not be %q: it cannot be a path segment of the API (/v1/tasks/{id})", id)
	}
	return nil
}

// ValidateStoredID checks an id that may name a task stored before
// ValidateID refused "/", "." and "..": 1..MaxIDLen bytes of printable
// UTF-8 with no white space or control characters. It is the rule where an
// id reaches us from stored data (journal entries, Kafka records and
// outcomes) or names tasks to act on (a path's {id}, the ids of a bulk
// request), so such tasks keep being delivered and can still be cancelled,
// redriven or deleted by a bulk request's ids.
func ValidateStoredID(id string) error {
	if id == "" {
		return invalid("id", "must not be empty")
	}
	if len(id) > MaxIDLen {
		return invalid("id", "longer than %d bytes", MaxIDLen)
	}
	if !utf8.ValidString(id) {
		return invalid("id", "not valid UTF-8")
	}
	for _, r := range id {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return invalid("id", "contains a control or white-space character (%U)", r)
		}
	}
	return nil
}

// ValidateType checks the type of a new task (or of a schedule's task
// template, a pause or a rate-limit rule being set): what
// ValidateStoredType checks, and a PathSegment (/v1/types/{type}/pause,
// /v1/limits/{type}). A "/" inside a type ("email/send")
// is accepted: producers use such types, and they reach the routes
// escaped; the pause state and the rate-limit rules refuse them (their
// etcd keys), with a 422 that says so.
func ValidateType(typ string) error {
	if err := ValidateStoredType(typ); err != nil {
		return err
	}
	if !PathSegment(typ) {
		return invalid("type", "must not be %q: it cannot be a path segment of the API (/v1/types/{type}, /v1/limits/{type})", typ)
	}
	return nil
}

// ValidateStoredType checks a type that may be that of a task stored
// before ValidateType refused "/", "." and "..":
// 1..MaxTypeLen bytes of printable UTF-8 without white space. It is the
// rule where a type reaches us from stored data (journal entries, stored
// schedules) or names tasks to act on (a list's or a bulk filter's type),
// so such tasks keep being delivered and can still be found by type.
func ValidateStoredType(typ string) error {
	if typ == "" {
		return invalid("type", "is required")
	}
	if len(typ) > MaxTypeLen || !printable(typ) {
		return invalid("type", "must be 1..%d printable characters without white space", MaxTypeLen)
	}
	return nil
}

// Truncate shortens s to at most n bytes for a message, marking the cut
// with "…". The cut falls on a character boundary (see Clip).
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return Clip(s, n) + "…"
}

// Clip cuts s to at most n bytes, unmarked (text kept under a size cap,
// such as a task's last error), at a character boundary: a cut inside a
// multi-byte UTF-8 character would leave invalid UTF-8, which a JSON
// answer shows as U+FFFD. Bytes that are not UTF-8 are cut where asked.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	n = max(n, 0)
	// the last character that starts before the cut: split by it?
	for j := n - 1; j >= 0 && j > n-utf8.UTFMax; j-- {
		if utf8.RuneStart(s[j]) {
			if r, size := utf8.DecodeRuneInString(s[j:]); (r != utf8.RuneError || size > 1) && j+size > n {
				return s[:j]
			}
			break
		}
	}
	return s[:n]
}

// ValidateKeyType checks a type that names a per-type etcd key (a pause
// of the type, its rate-limit rule: "<prefix><type>", one segment), as
// stored before ValidateType refused "." and "..": 1..MaxTypeLen bytes
// of printable UTF-8 without white space, and no "/". Its error is the
// bare reason, with the type quoted (at most 64 bytes of it) where it
// helps; pause and ratelimit wrap it in their ErrInvalidType.
func ValidateKeyType(typ string) error {
	switch {
	case typ == "":
		return errors.New("must not be empty")
	case len(typ) > MaxTypeLen:
		return fmt.Errorf("longer than %d bytes", MaxTypeLen)
	case !utf8.ValidString(typ):
		return errors.New("not valid UTF-8")
	case strings.Contains(typ, "/"):
		return fmt.Errorf("%q: must not contain '/'", Truncate(typ, 64))
	}
	for _, r := range typ {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return fmt.Errorf("%q: contains a control or white-space character (%U)", Truncate(typ, 64), r)
		}
	}
	return nil
}

// Validate checks every producer-set field of a new task.
func (t *Task) Validate() error {
	if err := ValidateID(t.ID); err != nil {
		return err
	}
	if err := ValidateType(t.Type); err != nil {
		return err
	}
	return t.validateFields()
}

// ValidateStored checks every producer-set field of a task that may have
// been stored before the id and type rules grew (see ValidateStoredID and
// ValidateStoredType).
func (t *Task) ValidateStored() error {
	if err := ValidateStoredID(t.ID); err != nil {
		return err
	}
	if err := ValidateStoredType(t.Type); err != nil {
		return err
	}
	return t.validateFields()
}

// validateFields checks the producer-set fields but the id and the type.
func (t *Task) validateFields() error {
	if err := ValidateTopic(t.Topic); err != nil {
		return err
	}
	if len(t.Key) > MaxIDLen {
		return invalid("key", "longer than %d bytes", MaxIDLen)
	}
	if !utf8.ValidString(t.Key) {
		return invalid("key", "not valid UTF-8")
	}
	if len(t.Headers) > MaxHeaders {
		return invalid("headers", "more than %d headers", MaxHeaders)
	}
	for k, v := range t.Headers {
		if !ValidHeaderName(k) {
			return invalid("headers", "bad header name %q (1..256 printable characters, not starting with dq-)", k)
		}
		if len(v) > 4096 {
			return invalid("headers", "value of %q longer than 4096 bytes", k)
		}
		if !utf8.ValidString(v) {
			return invalid("headers", "value of %q is not valid UTF-8", k)
		}
	}
	if t.MaxAttempts < 0 || t.MaxAttempts > MaxMaxAttempts {
		return invalid("max_attempts", "must be between 1 and %d", MaxMaxAttempts)
	}
	if t.Timeout < 0 || t.Timeout > MaxTimeout || (t.Timeout > 0 && t.Timeout < time.Millisecond) {
		return invalid("timeout", "must be 0 (the worker's default) or between 1ms and %s", MaxTimeout)
	}
	if t.Priority < -1000 || t.Priority > 1000 {
		return invalid("priority", "must be between -1000 and 1000")
	}
	if t.DueAt.IsZero() {
		return invalid("due_at", "is required")
	}
	if t.DueAt.Before(time.Unix(0, 0)) || Millis(t.DueAt) > MaxDueMillis {
		return invalid("due_at", "out of range (1970-01-01T00:00:00Z to %s)", MaxDueText)
	}
	return nil
}

// ValidHeaderName reports whether k may name a task header: 1..256 bytes
// of printable, non-space UTF-8, not starting with "dq-" in any case (the
// dq-* headers are delayq's own).
func ValidHeaderName(k string) bool {
	return k != "" && len(k) <= 256 && !strings.HasPrefix(strings.ToLower(k), "dq-") && printable(k)
}

func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return false
		}
	}
	return true
}

// ValidateTopic checks a task's topic (empty: the default topic): up to
// MaxTopicLen characters of [a-zA-Z0-9._-], not "." or "..". The error is
// a *FieldError naming "topic".
func ValidateTopic(topic string) error {
	if len(topic) > MaxTopicLen || !validTopic(topic) {
		return invalid("topic", "must be up to %d characters of [a-zA-Z0-9._-]", MaxTopicLen)
	}
	return nil
}

func validTopic(s string) bool {
	for i := 0; i < len(s); i++ {
		if !topicByte(s[i]) {
			return false
		}
	}
	return s != "." && s != ".."
}

// topicByte reports whether c may appear in a topic name: [a-zA-Z0-9._-].
func topicByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

// Millis is t as Unix milliseconds, the unit every stored time uses.
func Millis(t time.Time) int64 { return t.UnixMilli() }

// FromMillis is the inverse of Millis, in UTC.
func FromMillis(ms int64) time.Time { return time.UnixMilli(ms).UTC() }
