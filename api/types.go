package api

import (
	"encoding/json"
	"fmt"
	"time"
)

// TypeInfo is a task type as GET /v1/types lists it: the types paused,
// with a rate limit, with parked tasks, or scheduled through the daemon
// since it started.
type TypeInfo struct {
	Type     string
	Paused   bool
	PausedAt time.Time  // zero while running (or when etcd did not say)
	Parked   int64      // tasks waiting for a resume
	Limit    *LimitRule // nil: no rate limit
}

// typeInfoJSON is TypeInfo's JSON form: paused_at and limit left out when
// there are none.
type typeInfoJSON struct {
	Type     string     `json:"type"`
	Paused   bool       `json:"paused"`
	PausedAt string     `json:"paused_at,omitempty"`
	Parked   int64      `json:"parked"`
	Limit    *LimitRule `json:"limit,omitempty"`
}

// MarshalJSON writes t as GET /v1/types shows it.
func (t TypeInfo) MarshalJSON() ([]byte, error) {
	return json.Marshal(typeInfoJSON{Type: t.Type, Paused: t.Paused, PausedAt: formatTime(t.PausedAt), Parked: t.Parked, Limit: t.Limit})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (t *TypeInfo) UnmarshalJSON(b []byte) error {
	var v typeInfoJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	at, err := parseTime(v.PausedAt)
	if err != nil {
		return fmt.Errorf("type %q: paused_at: %w", v.Type, err)
	}
	*t = TypeInfo{Type: v.Type, Paused: v.Paused, PausedAt: at, Parked: v.Parked, Limit: v.Limit}
	return nil
}

// Types is the answer of GET /v1/types.
type Types struct {
	Types []TypeInfo `json:"types"`
}
