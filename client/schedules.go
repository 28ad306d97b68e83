package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Schedules: periodic tasks. A schedule is a cron expression (or @every
// interval) in a time zone plus a task template; the scheduler inside the
// event processes turns each tick into an ordinary task whose id is
// "<schedule id>@<tick in unix milliseconds>", exactly once per tick.
// Schedules live in etcd: a daemon without DQ_ETCD_ENDPOINTS, or whose
// etcd does not answer, answers 503 "unavailable".

// Catch-up policies (ScheduleSpec.Catchup): what happens to the ticks
// missed while no scheduler ran.
const (
	CatchupNone = "none" // skip them
	CatchupLast = "last" // fire the most recent one once (the default)
	CatchupAll  = "all"  // fire each (at most 1000 per scheduler pass)
)

// ScheduleSpec is what a schedule is made of (PUT /v1/schedules/{id}).
type ScheduleSpec struct {
	// Cron is 5 fields (minute hour day-of-month month day-of-week), or 6
	// with leading seconds ("*/5 * * * * *": every 5 seconds), or a
	// descriptor: @yearly, @monthly, @weekly, @daily, @hourly, or
	// "@every 10s" (at least 1s).
	Cron string
	// Timezone is the IANA zone the cron fields are read in (e.g.
	// "Europe/Berlin"); empty: UTC. A wall-clock time that does not exist
	// (DST starts) is skipped; one that occurs twice (DST ends) fires once,
	// unless the hour field is "*".
	Timezone string
	Task     ScheduleTask // what each tick schedules
	Paused   bool         // no tick is materialized while paused
	// Catchup is one of the Catchup constants; empty: CatchupLast.
	Catchup string
	// StartAt and EndAt bound the ticks (inclusive); zero: unbounded.
	StartAt time.Time
	EndAt   time.Time
}

// ScheduleTask is the task each tick becomes: the fields of Task without
// ID, DueAt and Delay (a tick's id is "<schedule id>@<unix ms>", its due
// time the tick).
type ScheduleTask struct {
	Type string // required; the rule of Task.Type
	// Payload is a JSON value; PayloadBytes a binary payload (sent
	// base64-encoded). Set at most one.
	Payload      json.RawMessage
	PayloadBytes []byte
	Topic        string            // Kafka topic; empty: the default topic
	Key          string            // Kafka key; empty: the tick's task id
	Headers      map[string]string // extra Kafka headers
	MaxAttempts  int               // 0: the default (10)
	Timeout      time.Duration     // handler timeout; 0: the worker's default
	Priority     int               // -1000..1000
}

// Schedule is a stored schedule as the daemon shows it.
type Schedule struct {
	ID string
	// ScheduleSpec holds the effective values: Timezone "UTC" and
	// Catchup "last" when none were given.
	ScheduleSpec
	CreatedAt time.Time
	UpdatedAt time.Time
	Revision  int64 // etcd revision of the last change
	// Next are the next (up to) 5 ticks in the schedule's zone, also
	// while paused; fewer once EndAt is near. NextError says why the
	// daemon could not compute them (then Next is empty).
	Next      []time.Time
	NextError string
	// LastTick is the latest tick that was materialized (zero: none yet),
	// LastTaskID its task's id.
	LastTick   time.Time
	LastTaskID string
	// Created is set by PutSchedule: the schedule is new (not replaced).
	Created bool
	// Changed is set by PauseSchedule and ResumeSchedule: false when it
	// was paused (or running) already.
	Changed bool
}

// scheduleTaskJSON is ScheduleTask on the wire.
type scheduleTaskJSON struct {
	Type          string            `json:"type"`
	Payload       json.RawMessage   `json:"payload,omitempty"`
	PayloadBase64 []byte            `json:"payload_base64,omitempty"`
	Topic         string            `json:"topic,omitempty"`
	Key           string            `json:"key,omitempty"`
	Headers       map[string]string `json:"headers,omitempty"`
	MaxAttempts   int               `json:"max_attempts,omitempty"`
	Timeout       string            `json:"timeout,omitempty"`
	Priority      int               `json:"priority,omitempty"`
}

// MarshalJSON writes the task template in the API's format.
func (t ScheduleTask) MarshalJSON() ([]byte, error) {
	w := scheduleTaskJSON{Type: t.Type, Payload: t.Payload, PayloadBase64: t.PayloadBytes, Topic: t.Topic, Key: t.Key,
		Headers: t.Headers, MaxAttempts: t.MaxAttempts, Priority: t.Priority}
	if len(t.Payload) > 0 && !json.Valid(t.Payload) {
		return nil, errors.New("delayq: schedule task: Payload is not valid JSON (use PayloadBytes for binary data)")
	}
	if t.Timeout != 0 {
		w.Timeout = t.Timeout.String()
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads a task template in the API's format.
func (t *ScheduleTask) UnmarshalJSON(b []byte) error {
	var w scheduleTaskJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*t = ScheduleTask{Type: w.Type, Payload: w.Payload, PayloadBytes: w.PayloadBase64, Topic: w.Topic, Key: w.Key,
		Headers: w.Headers, MaxAttempts: w.MaxAttempts, Priority: w.Priority}
	if w.Timeout != "" {
		d, err := time.ParseDuration(w.Timeout)
		if err != nil {
			return fmt.Errorf("timeout: %w", err)
		}
		t.Timeout = d
	}
	return nil
}

// scheduleSpecJSON is ScheduleSpec on the wire.
type scheduleSpecJSON struct {
	Cron     string       `json:"cron"`
	Timezone string       `json:"timezone,omitempty"`
	Task     ScheduleTask `json:"task"`
	Paused   bool         `json:"paused,omitempty"`
	Catchup  string       `json:"catchup,omitempty"`
	StartAt  *time.Time   `json:"start_at,omitempty"`
	EndAt    *time.Time   `json:"end_at,omitempty"`
}

// MarshalJSON writes the spec as PUT /v1/schedules/{id} takes it.
func (s ScheduleSpec) MarshalJSON() ([]byte, error) {
	w := scheduleSpecJSON{Cron: s.Cron, Timezone: s.Timezone, Task: s.Task, Paused: s.Paused, Catchup: s.Catchup}
	if !s.StartAt.IsZero() {
		at := s.StartAt.UTC()
		w.StartAt = &at
	}
	if !s.EndAt.IsZero() {
		at := s.EndAt.UTC()
		w.EndAt = &at
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads a spec in the API's format.
func (s *ScheduleSpec) UnmarshalJSON(b []byte) error {
	var w scheduleSpecJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*s = ScheduleSpec{Cron: w.Cron, Timezone: w.Timezone, Task: w.Task, Paused: w.Paused, Catchup: w.Catchup}
	if w.StartAt != nil {
		s.StartAt = *w.StartAt
	}
	if w.EndAt != nil {
		s.EndAt = *w.EndAt
	}
	return nil
}

// scheduleJSON is the rest of a schedule view (the spec is read apart).
type scheduleJSON struct {
	ID         string      `json:"id"`
	CreatedAt  time.Time   `json:"created_at"`
	UpdatedAt  time.Time   `json:"updated_at"`
	Revision   int64       `json:"revision"`
	Next       []time.Time `json:"next"`
	NextError  string      `json:"next_error,omitempty"`
	LastTick   *time.Time  `json:"last_tick"`
	LastTaskID *string     `json:"last_task_id"`
	Created    *bool       `json:"created,omitempty"`
	Changed    *bool       `json:"changed,omitempty"`
}

// UnmarshalJSON reads a schedule as the daemon answers it.
func (s *Schedule) UnmarshalJSON(b []byte) error {
	var spec ScheduleSpec
	if err := json.Unmarshal(b, &spec); err != nil {
		return err
	}
	var w scheduleJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*s = Schedule{ID: w.ID, ScheduleSpec: spec, CreatedAt: w.CreatedAt, UpdatedAt: w.UpdatedAt, Revision: w.Revision,
		Next: w.Next, NextError: w.NextError}
	if w.LastTick != nil {
		s.LastTick = *w.LastTick
	}
	if w.LastTaskID != nil {
		s.LastTaskID = *w.LastTaskID
	}
	s.Created = w.Created != nil && *w.Created
	s.Changed = w.Changed != nil && *w.Changed
	return nil
}

// MarshalJSON writes the schedule in the daemon's format (without created
// and changed).
func (s Schedule) MarshalJSON() ([]byte, error) {
	spec, err := json.Marshal(s.ScheduleSpec)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(spec, &m); err != nil {
		return nil, err
	}
	w := scheduleJSON{ID: s.ID, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt, Revision: s.Revision, Next: s.Next, NextError: s.NextError}
	if w.Next == nil {
		w.Next = []time.Time{}
	}
	if !s.LastTick.IsZero() {
		w.LastTick, w.LastTaskID = &s.LastTick, &s.LastTaskID
	}
	rest, err := json.Marshal(w)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(rest, &m); err != nil {
		return nil, err
	}
	m["paused"] = json.RawMessage(fmt.Sprint(s.Paused))
	return json.Marshal(m)
}

// PutSchedule creates or replaces schedule id (PUT /v1/schedules/{id});
// the whole spec is replaced. The answer's Created says whether it is new.
// A wrong field is an *APIError with status 422, code "invalid_schedule",
// whose message starts with the field ("cron: ...", "task.type: ...",
// "end_at: ..." for an end in the past). A new schedule beyond the
// daemon's DQ_MAX_SCHEDULES is a 422 with code "too_many_schedules"
// (retrying does not help; replacing an existing schedule is allowed).
// The scheduler applies the change within its next pass: ticks before it
// are not caught up.
func (c *Client) PutSchedule(ctx context.Context, id string, spec ScheduleSpec) (*Schedule, error) {
	return c.schedule(ctx, http.MethodPut, id, "", spec)
}

// GetSchedule reads schedule id (GET /v1/schedules/{id}) with its next
// ticks and its last fired tick; an unknown id is ErrNotFound.
func (c *Client) GetSchedule(ctx context.Context, id string) (*Schedule, error) {
	return c.schedule(ctx, http.MethodGet, id, "", nil)
}

// ListSchedules reads every schedule, sorted by id, page after page of
// GET /v1/schedules (Schedules walks them without holding them all).
func (c *Client) ListSchedules(ctx context.Context) ([]Schedule, error) {
	var list []Schedule
	for s, err := range c.Schedules(ctx, ScheduleListOptions{Limit: 1000}) {
		if err != nil {
			return nil, err
		}
		list = append(list, s)
	}
	return list, nil
}

// ScheduleListOptions selects a page of schedules (ListSchedulesPage,
// Schedules).
type ScheduleListOptions struct {
	// Limit is the page size, 1 to 1000; 0: the daemon's default of 100.
	Limit int
	// Cursor continues a walk: a SchedulePage.NextCursor. Empty: from the
	// first schedule.
	Cursor string
}

func (o ScheduleListOptions) query() string {
	q := url.Values{}
	if o.Limit != 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

// SchedulePage is one page of schedules.
type SchedulePage struct {
	Schedules []Schedule `json:"schedules"`
	// NextCursor continues the walk (ScheduleListOptions.Cursor); empty
	// when the walk is complete.
	NextCursor string `json:"next_cursor"`
}

// ListSchedulesPage reads one page of schedules in id order (GET
// /v1/schedules?limit=&cursor=). A bad limit or cursor is an *APIError
// with status 422 whose message names the parameter.
func (c *Client) ListSchedulesPage(ctx context.Context, o ScheduleListOptions) (*SchedulePage, error) {
	var p SchedulePage
	if err := c.do(ctx, http.MethodGet, "/v1/schedules"+o.query(), nil, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// Schedules walks every schedule in id order, page by page (o.Limit a
// request), from o.Cursor on. It stops at the first error, which it
// yields. A schedule that exists throughout the walk is seen exactly
// once; one created or deleted meanwhile may or may not be.
func (c *Client) Schedules(ctx context.Context, o ScheduleListOptions) iter.Seq2[Schedule, error] {
	return walkPages("list schedules", o.Cursor, func(cursor string) ([]Schedule, string, error) {
		o.Cursor = cursor
		p, err := c.ListSchedulesPage(ctx, o)
		if err != nil {
			return nil, "", err
		}
		return p.Schedules, p.NextCursor, nil
	})
}

// DeleteSchedule removes schedule id (DELETE /v1/schedules/{id}): no tick
// is materialized any more, and the ticks materialized ahead of time that
// have not fired are cancelled. An unknown id is ErrNotFound.
func (c *Client) DeleteSchedule(ctx context.Context, id string) error {
	if id == "" {
		return errors.New("delayq: delete schedule: the id is empty")
	}
	return c.do(ctx, http.MethodDelete, "/v1/schedules/"+segment(id), nil, nil)
}

// PauseSchedule pauses schedule id (POST /v1/schedules/{id}/pause): no
// tick is materialized until it is resumed, and the ticks that pass
// meanwhile are not caught up. Pausing a paused schedule changes nothing
// (Changed false).
func (c *Client) PauseSchedule(ctx context.Context, id string) (*Schedule, error) {
	return c.schedule(ctx, http.MethodPost, id, "/pause", nil)
}

// ResumeSchedule resumes schedule id (POST /v1/schedules/{id}/resume):
// its ticks from now on fire.
func (c *Client) ResumeSchedule(ctx context.Context, id string) (*Schedule, error) {
	return c.schedule(ctx, http.MethodPost, id, "/resume", nil)
}

func (c *Client) schedule(ctx context.Context, method, id, suffix string, in any) (*Schedule, error) {
	if id == "" {
		return nil, errors.New("delayq: schedule: the id is empty")
	}
	var s Schedule
	if err := c.do(ctx, method, "/v1/schedules/"+segment(id)+suffix, in, &s); err != nil {
		return nil, err
	}
	return &s, nil
}
