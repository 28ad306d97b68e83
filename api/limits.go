package api

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"
)

// LimitRule is the rate limit of a task type (PUT /v1/limits/{type}, and
// "rule" in the answers): any subset of the three kinds, at least one.
//
// Scope says what each limit counts: the whole type ("type", the
// default, also when empty), each task key ("key": the task's key, which
// defaults to its id) or each value of a task header ("header:<name>",
// e.g. "header:tenant"; tasks without the header share one value, the
// empty one). With a key or header scope every limit applies per distinct
// value, and the tasks of one value start in due order (FIFO: a deferred
// or retried task is not overtaken by a later one of its value) unless
// Unordered is set.
type LimitRule struct {
	Scope       string       `json:"scope,omitempty"`
	Unordered   bool         `json:"unordered,omitempty"`
	WindowQuota *WindowQuota `json:"window_quota,omitempty"`
	TokenBucket *TokenBucket `json:"token_bucket,omitempty"`
	Concurrency *Concurrency `json:"concurrency,omitempty"`
}

// Keyed reports whether the rule limits each value of a key or header
// scope apart, rather than the whole type.
func (r *LimitRule) Keyed() bool { return r.Scope != "" && r.Scope != ScopeType }

// The scopes of a LimitRule.
const (
	ScopeType         = "type"
	ScopeKey          = "key"
	ScopeHeaderPrefix = "header:"
)

// WindowQuota admits at most Limit tasks per fixed Window. Windows are
// aligned on the Unix epoch by Redis' clock, so every worker agrees on
// them.
type WindowQuota struct {
	Limit  int64    `json:"limit"`
	Window Duration `json:"window"`
}

// TokenBucket admits Rate tasks per second on average with bursts of up to
// Burst (0 in a request: one second's worth, at least one). When taking a
// token would leave fewer than Reserve tokens, only tasks with a priority
// of at least MinPriority may take it.
type TokenBucket struct {
	Rate        float64 `json:"rate"`
	Burst       int64   `json:"burst"`
	Reserve     int64   `json:"reserve"`
	MinPriority int     `json:"min_priority"`
}

// Concurrency admits at most Limit tasks of the type running at once
// across all workers; a slot a crashed worker holds frees itself after
// SlotTTL (0 in a request: the daemon's default, 5m).
type Concurrency struct {
	Limit   int64    `json:"limit"`
	SlotTTL Duration `json:"slot_ttl,omitempty"`
}

// LimitUsage is a rule's live usage. With a key or header scope the
// three figures are the sums over the active values (Tokens: of the
// listed ones), ActiveKeys counts the values with state in Redis and Keys
// lists the busiest of them (bounded; most slots held, then most tasks
// waiting in order, then most admitted in the window).
type LimitUsage struct {
	WindowCount int64      `json:"window_count"` // admitted in the current window
	Tokens      float64    `json:"tokens"`       // in the bucket now
	Running     int64      `json:"running"`      // concurrency slots held
	ActiveKeys  int64      `json:"active_keys,omitempty"`
	Keys        []KeyUsage `json:"keys,omitempty"`
}

// KeyUsage is the usage of one value of a keyed rule's scope.
type KeyUsage struct {
	Key         string  `json:"key"`
	WindowCount int64   `json:"window_count"`
	Tokens      float64 `json:"tokens"`
	Running     int64   `json:"running"`
	Waiting     int64   `json:"waiting"` // deferred or retried tasks its later tasks wait behind (FIFO)
}

// TypeLimit is the rate limit of one type with its usage (GET
// /v1/limits/{type}, an item of GET /v1/limits).
type TypeLimit struct {
	Type       string      `json:"type"`
	Rule       LimitRule   `json:"rule"`
	Usage      *LimitUsage `json:"usage"`                 // nil when UsageError is set or usage is not read
	UsageError string      `json:"usage_error,omitempty"` // why usage could not be read (Redis)
}

// Limits is the answer of GET /v1/limits.
type Limits struct {
	Limits []TypeLimit `json:"limits"`
}

// LimitDeleted is the answer of DELETE /v1/limits/{type}.
type LimitDeleted struct {
	Type    string `json:"type"`
	Deleted bool   `json:"deleted"`
}

// Duration is a time.Duration written in JSON as a Go duration string
// ("10s", "1m30s").
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return strconv.AppendQuote(nil, time.Duration(d).String()), nil
}

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	v, err := ParseDuration(b)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// ParseDuration reads a JSON duration string; its errors quote at most 32
// bytes of what they refuse.
func ParseDuration(raw []byte) (time.Duration, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return 0, fmt.Errorf("expected a duration string such as \"10s\", got %s", truncate(string(raw), 32))
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration such as \"10s\"", truncate(s, 32))
	}
	return v, nil
}

// truncate cuts s to at most n bytes at a character boundary, marked with
// "…" when cut (as the daemon quotes what it refuses).
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
