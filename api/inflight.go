package api

import (
	"encoding/json"
	"fmt"
	"time"
)

// InFlight is the answer of GET /v1/inflight: the tasks a worker holds an
// execution claim of right now, soonest claim deadline first.
type InFlight struct {
	Tasks []InFlightTask `json:"tasks"`
	// Truncated tells that more claims are held than the limit listed.
	Truncated bool `json:"truncated"`
}

// InFlightTask is one task being run.
type InFlightTask struct {
	ID      string
	Type    string
	Shard   int
	Attempt int // the attempt being run
	// Owner is the claim's owner: the work process's identity and its
	// run's number ("<process>:<n>").
	Owner string
	// ExpiresAt is the claim's deadline, by Redis' clock: the worker
	// extends it while the handler runs; past it, another worker may run
	// the task.
	ExpiresAt time.Time
}

// inFlightTaskJSON is InFlightTask's JSON form (times in RFC 3339 with
// milliseconds).
type inFlightTaskJSON struct {
	ID        string `json:"id"`
	Type      string `json:"type"`
	Shard     int    `json:"shard"`
	Attempt   int    `json:"attempt"`
	Owner     string `json:"owner"`
	ExpiresAt string `json:"expires_at"`
}

// MarshalJSON writes t as GET /v1/inflight shows it.
func (t InFlightTask) MarshalJSON() ([]byte, error) {
	return json.Marshal(inFlightTaskJSON{ID: t.ID, Type: t.Type, Shard: t.Shard, Attempt: t.Attempt, Owner: t.Owner,
		ExpiresAt: formatTime(t.ExpiresAt)})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (t *InFlightTask) UnmarshalJSON(b []byte) error {
	var v inFlightTaskJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	at, err := parseTime(v.ExpiresAt)
	if err != nil {
		return fmt.Errorf("in-flight task %q: expires_at: %w", v.ID, err)
	}
	*t = InFlightTask{ID: v.ID, Type: v.Type, Shard: v.Shard, Attempt: v.Attempt, Owner: v.Owner, ExpiresAt: at}
	return nil
}
