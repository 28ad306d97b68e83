package api

import (
	"encoding/json"
	"fmt"
	"time"
)

// Attempt is one ended attempt of a task, as GET /v1/tasks/{id} lists them
// ("attempts", oldest first; at most the last 16, "attempts_dropped"
// counts the older ones no longer kept).
type Attempt struct {
	Attempt int
	// StartedAt is when the worker began running the attempt; zero when
	// unknown (a task that died before any worker ran it, or one recorded
	// before the history existed).
	StartedAt time.Time
	// EndedAt is when its outcome was stored, by Redis' clock; zero when
	// unknown (recorded before the history existed).
	EndedAt time.Time
	Outcome string // AttemptRetry, AttemptDead or AttemptSucceeded
	Error   string // the handler's error; empty for a success
}

// The outcomes of an attempt.
const (
	AttemptRetry     = "retry"     // it failed and the task runs again
	AttemptDead      = "dead"      // it failed and the task died
	AttemptSucceeded = "succeeded" // the handler finished
)

// attemptJSON is Attempt's JSON form: times in RFC 3339 with
// milliseconds, left out when unknown, as an empty error.
type attemptJSON struct {
	Attempt   int    `json:"attempt"`
	StartedAt string `json:"started_at,omitempty"`
	EndedAt   string `json:"ended_at,omitempty"`
	Outcome   string `json:"outcome"`
	Error     string `json:"error,omitempty"`
}

// MarshalJSON writes a as GET /v1/tasks/{id} shows it.
func (a Attempt) MarshalJSON() ([]byte, error) {
	return json.Marshal(attemptJSON{Attempt: a.Attempt, StartedAt: formatTime(a.StartedAt), EndedAt: formatTime(a.EndedAt),
		Outcome: a.Outcome, Error: a.Error})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (a *Attempt) UnmarshalJSON(b []byte) error {
	var v attemptJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	out := Attempt{Attempt: v.Attempt, Outcome: v.Outcome, Error: v.Error}
	var err error
	if out.StartedAt, err = parseTime(v.StartedAt); err != nil {
		return fmt.Errorf("attempt %d: started_at: %w", v.Attempt, err)
	}
	if out.EndedAt, err = parseTime(v.EndedAt); err != nil {
		return fmt.Errorf("attempt %d: ended_at: %w", v.Attempt, err)
	}
	*a = out
	return nil
}
