package api

import (
	"encoding/json"
	"fmt"
	"time"
)

// The census endpoints: the tasks per type and state (GET /v1/counts),
// the coming load (GET /v1/load) and the recent history (GET /v1/history).
// GET /v1/search answers task list items, which the client declares
// (client.SearchPage).

// Time is a time written in JSON as the daemon writes times: RFC 3339 in
// UTC with milliseconds ("2026-01-02T03:04:05.006Z"); "" for the zero time.
type Time struct{ time.Time }

// MarshalJSON writes t with milliseconds, in UTC.
func (t Time) MarshalJSON() ([]byte, error) {
	return json.Marshal(formatTime(t.Time))
}

// UnmarshalJSON reads an RFC 3339 time ("" is the zero time).
func (t *Time) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("expected a time string, got %s", truncate(string(b), 32))
	}
	v, err := parseTime(s)
	if err != nil {
		return fmt.Errorf("%q is not an RFC 3339 time", truncate(s, 40))
	}
	t.Time = v
	return nil
}

// CountFigures are the census' figures of one task type, or their totals.
type CountFigures struct {
	Scheduled int64 `json:"scheduled"` // waiting at attempt 1, not paused
	Retrying  int64 `json:"retrying"`  // waiting after a failed attempt, not paused
	Paused    int64 `json:"paused"`    // parked until their type is resumed (exact)
	Succeeded int64 `json:"succeeded"` // in the done sets, within the retention
	Dead      int64 `json:"dead"`
}

// TypeCount is one task type's figures.
type TypeCount struct {
	Type string `json:"type"`
	CountFigures
}

// Counts is the answer of GET /v1/counts: the tasks per type and state,
// from a scan of the shards' sets (cached a few seconds by the daemon).
// While Sampled is false every figure is exact. A scan stops after a cap
// of members per set and shard: Sampled is then true, the per-type figures
// are the counts of the members scanned (lower bounds, not scaled up),
// Totals.Dead and Totals.Paused stay exact, and the rest of Totals splits
// the members left unscanned in the proportions of those scanned (an
// estimate).
type Counts struct {
	At      Time         `json:"at"` // when the scan began (Redis' clock)
	Types   []TypeCount  `json:"types"`
	Totals  CountFigures `json:"totals"`
	Sampled bool         `json:"sampled"`
	Scanned int64        `json:"scanned"` // set members examined
}

// LoadBucket is one step of the coming load.
type LoadBucket struct {
	Start Time  `json:"start"`
	Count int64 `json:"count"`
}

// TypeLoad is one task type's coming load: a count per bucket of
// Load.Buckets, and its overdue tasks.
type TypeLoad struct {
	Type    string  `json:"type"`
	Counts  []int64 `json:"counts"`
	Overdue int64   `json:"overdue"`
}

// Load is the answer of GET /v1/load: the waiting tasks due in each step
// of the next horizon (paused ones not counted). Overdue and Buckets are
// exact; Types come from a capped scan (Sampled: lower bounds). The last
// bucket ends at From + Horizon (shorter than Step when Step does not
// divide Horizon).
type Load struct {
	From    Time         `json:"from"` // Redis' clock: the first bucket's start
	Step    Duration     `json:"step"`
	Horizon Duration     `json:"horizon"`
	Overdue int64        `json:"overdue"` // due before From
	Buckets []LoadBucket `json:"buckets"`
	Types   []TypeLoad   `json:"types"`
	Sampled bool         `json:"sampled"`
}

// HistoryPoint is one step of the history: the tasks that finished in
// [At, At + step).
type HistoryPoint struct {
	At        Time  `json:"at"`
	Succeeded int64 `json:"succeeded"` // finished into the done sets (cancelled ones included)
	Dead      int64 `json:"dead"`
}

// Gauge is one of the daemon's samples of the GET /v1/stats totals.
type Gauge struct {
	At           Time  `json:"at"`
	Scheduled    int64 `json:"scheduled"`
	Firing       int64 `json:"firing"`
	Dead         int64 `json:"dead"`
	Overdue      int64 `json:"overdue"`
	JournalDepth int   `json:"journal_depth"`
}

// History is the answer of GET /v1/history: the finished tasks per step of
// the window (exact, from the sets' scores), and the daemon's own samples
// of its stats over the window (taken every 15 s while it runs, the last
// hour kept in memory: empty right after a start, and per daemon).
type History struct {
	Step   Duration       `json:"step"`
	Window Duration       `json:"window"`
	Points []HistoryPoint `json:"points"`
	Gauges []Gauge        `json:"gauges"`
}
