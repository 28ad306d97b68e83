package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/delayq/delayq/api"
)

// Client talks to one delayq daemon. It is safe for concurrent use.
type Client struct {
	base  string
	token string
	hc    *http.Client
	ca    *x509.CertPool // from WithCA; applied by New

	noCoalesce bool      // WithoutScheduleCoalescing
	co         coalescer // concurrent Schedule calls (coalesce.go)
}

// Option configures a Client.
type Option func(*Client)

// WithToken sends "Authorization: Bearer <token>" (the daemon's
// DQ_API_TOKEN). An empty token sends nothing.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithHTTPClient uses hc instead of a client with a 30 s timeout.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithCA trusts the CAs of pool, instead of the system's roots, for an
// https daemon whose certificate a private CA signed (the daemon's
// DQ_HTTP_TLS_CERT). With WithHTTPClient too, that client's transport (an
// *http.Transport, or http.DefaultTransport when nil) is copied with the
// pool; another RoundTripper is left as it is. A nil pool does nothing.
func WithCA(pool *x509.CertPool) Option { return func(c *Client) { c.ca = pool } }

// New returns a client for the daemon at baseURL (e.g. "http://127.0.0.1:7070"
// or "https://delayq.internal:7070").
func New(baseURL string, opts ...Option) *Client {
	c := &Client{base: strings.TrimRight(baseURL, "/"), hc: &http.Client{Timeout: 30 * time.Second}}
	for _, o := range opts {
		o(c)
	}
	if c.ca != nil {
		c.hc = withRoots(c.hc, c.ca)
	}
	return c
}

// withRoots is a copy of hc whose transport verifies servers with pool.
func withRoots(hc *http.Client, pool *x509.CertPool) *http.Client {
	rt := hc.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	tr, ok := rt.(*http.Transport)
	if !ok {
		return hc
	}
	tr = tr.Clone()
	if tr.TLSClientConfig == nil {
		tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	tr.TLSClientConfig.RootCAs = pool
	cp := *hc
	cp.Transport = tr
	return &cp
}

// Task is a task to schedule.
type Task struct {
	// ID is the idempotency key (≤ 200 printable bytes, no white space,
	// not "/", "." or "..": those cannot be a path segment of the API).
	// Empty: the daemon generates a UUIDv7.
	ID string
	// Type routes the task to a handler; required (≤ 200 printable
	// bytes, no white space, not "/", "." or "..": the type is the {type}
	// path segment of the pause and limit endpoints, which also refuse a
	// type with a "/" inside).
	Type string
	// Payload is a JSON value, stored and delivered byte for byte.
	Payload json.RawMessage
	// PayloadBytes is a binary payload (sent base64-encoded). Set at most
	// one of Payload and PayloadBytes.
	PayloadBytes []byte
	// DueAt (millisecond precision) or Delay (from now on Redis' clock);
	// neither: now. Set at most one.
	DueAt       time.Time
	Delay       time.Duration
	Topic       string            // Kafka topic; empty: the default topic
	Key         string            // Kafka key; empty: the id
	Headers     map[string]string // extra Kafka headers (names must not start with "dq-")
	MaxAttempts int               // 0: the default (10)
	Timeout     time.Duration     // handler timeout; 0: the worker's default
	Priority    int               // -1000..1000
}

// MarshalJSON encodes the task in the API's JSON (the body of POST
// /v1/tasks), as Schedule sends it.
func (t Task) MarshalJSON() ([]byte, error) { return t.encode() }

// encode writes the task in the API's wire format. The JSON payload is
// spliced in as is: encoding/json would compact it and escape HTML
// characters, and the daemon keeps the payload byte for byte.
func (t *Task) encode() ([]byte, error) {
	type wire struct {
		ID            string            `json:"id,omitempty"`
		Type          string            `json:"type"`
		PayloadBase64 *string           `json:"payload_base64,omitempty"`
		DueAt         string            `json:"due_at,omitempty"`
		Delay         string            `json:"delay,omitempty"`
		Topic         string            `json:"topic,omitempty"`
		Key           string            `json:"key,omitempty"`
		Headers       map[string]string `json:"headers,omitempty"`
		MaxAttempts   int               `json:"max_attempts,omitempty"`
		Timeout       string            `json:"timeout,omitempty"`
		Priority      int               `json:"priority,omitempty"`
	}
	w := wire{ID: t.ID, Type: t.Type, Topic: t.Topic, Key: t.Key,
		Headers: t.Headers, MaxAttempts: t.MaxAttempts, Priority: t.Priority}
	if t.PayloadBytes != nil {
		s := base64.StdEncoding.EncodeToString(t.PayloadBytes)
		w.PayloadBase64 = &s
	}
	if !t.DueAt.IsZero() {
		w.DueAt = t.DueAt.UTC().Format(timeLayout)
	}
	if t.Delay != 0 {
		w.Delay = t.Delay.String()
	}
	if t.Timeout != 0 {
		w.Timeout = t.Timeout.String()
	}
	b, err := json.Marshal(w)
	if err != nil || len(t.Payload) == 0 {
		return b, err
	}
	if !json.Valid(t.Payload) {
		return nil, fmt.Errorf("delayq: task %q: Payload is not valid JSON (use PayloadBytes for binary data)", t.ID)
	}
	b = append(b[:len(b)-1], `,"payload":`...)
	b = append(b, bytes.TrimSpace(t.Payload)...)
	return append(b, '}'), nil
}

const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// Result is the daemon's answer to one scheduled task.
type Result struct {
	ID      string `json:"id"`
	State   string `json:"state"`   // "scheduled", or "journaled" while Redis was unreachable, or the existing task's state
	Outcome string `json:"outcome"` // "created", "unchanged", "updated" or "journaled"
	// Kept says what of an existing task stood against this submission
	// (Outcome "unchanged"): KeptDueAt or KeptState; "" when nothing did.
	// KeptDueAt and Ended read it.
	Kept  string    `json:"kept,omitempty"`
	DueAt time.Time `json:"due_at"` // the task's due time (with Kept set: the stored one, not the one asked)
	Shard int       `json:"shard"`
}

// The values of Result.Kept.
const (
	// KeptDueAt: the task waits (or runs) at the due time of an earlier
	// submission of its id. A relative due time (Delay, or none) is not
	// computed again on a re-submit, so that a retried call does not push
	// the task back; Client.Reschedule moves it.
	KeptDueAt = "due_at"
	// KeptState: the task had already ended (State is "succeeded",
	// "dead", "cancelled" or "delivered") and nothing was scheduled: the
	// id is spent. Schedule the work under another id, or Redrive a dead
	// task.
	KeptState = "state"
)

// Journaled reports whether the daemon kept the task in its journal
// because Redis was unreachable; it reaches Redis later.
func (r Result) Journaled() bool { return r.State == "journaled" }

// KeptDueAt reports whether the task kept the due time of an earlier
// submission of its id (DueAt is that one, not the one asked).
func (r Result) KeptDueAt() bool { return r.Kept == KeptDueAt }

// Ended reports whether the id names a task that had already ended
// (State says how): the call scheduled nothing and will not run it
// again. Schedule still answers it without an error, as the idempotent
// re-submit it is; a caller for whom it is one checks Ended.
func (r Result) Ended() bool { return r.Kept == KeptState }

// BatchResult is one task's result in a batch: Err is set (an *APIError)
// when that task was refused; the other tasks are unaffected.
type BatchResult struct {
	Result
	Err error
}

// TaskInfo is a task as GET /v1/tasks/{id} shows it.
type TaskInfo struct {
	ID           string            `json:"id"`
	Type         string            `json:"type"`
	State        string            `json:"state"` // journaled, or one of the State constants
	DueAt        time.Time         `json:"due_at"`
	Attempt      int               `json:"attempt"`
	Shard        int               `json:"shard"`
	Topic        string            `json:"topic"`
	Key          string            `json:"key"`
	Headers      map[string]string `json:"headers"`
	Payload      json.RawMessage   `json:"payload"`        // a JSON payload, as sent
	PayloadBytes []byte            `json:"payload_base64"` // a binary payload
	MaxAttempts  int               `json:"max_attempts"`
	Timeout      Duration          `json:"timeout"`
	Priority     int               `json:"priority"`
	LastError    string            `json:"last_error"`
	DiedAt       time.Time         `json:"died_at"` // a dead task: when it died (zero otherwise)
	// Attempts are the task's ended attempts, oldest first: at most the
	// last 16, AttemptsDropped counts the older ones the store no longer
	// keeps. Failed attempts are always there, a success only when the
	// task failed before (none for a first-attempt success). GET of one
	// task only (Get): the lists leave them out.
	Attempts        []Attempt `json:"attempts"`
	AttemptsDropped int       `json:"attempts_dropped"`

	// The fire receipt of the task's latest fired copy: what Kafka
	// acknowledged. All zero when the task was never fired (HasReceipt
	// tells; partition 0 and offset 0 are real values).
	FiredAt      time.Time `json:"fired_at"`      // when the record was produced (its timestamp)
	Partition    int32     `json:"partition"`     // of the record Kafka acknowledged
	Offset       int64     `json:"offset"`        // of the record Kafka acknowledged
	FiredAttempt int       `json:"fired_attempt"` // the attempt that was fired
	FiredDueAt   time.Time `json:"fired_due_at"`  // the due time of the copy that was fired
	LateMs       int64     `json:"late_ms"`       // FiredAt - FiredDueAt in ms, at least 0
	LeaderToken  int64     `json:"leader_token"`  // the fencing token of the shard leader that fired it
}

// HasReceipt reports whether t carries a fire receipt (FiredAt,
// Partition, Offset, FiredAttempt, FiredDueAt, LateMs, LeaderToken).
func (t TaskInfo) HasReceipt() bool { return !t.FiredAt.IsZero() }

// Duration is a time.Duration written in JSON as a Go duration string
// ("1m30s"): the daemon's wire type, declared once in package api.
type Duration = api.Duration

// DeadTask is a task in the dead set. Its DiedAt is the one the list
// answers (TaskInfo.DiedAt, shadowed, stays zero).
type DeadTask struct {
	TaskInfo
	DiedAt time.Time `json:"died_at"`
}

// The daemon's figures (GET /v1/stats): its wire types, declared once in
// package api.
type (
	// ShardStats are one shard's figures.
	ShardStats = api.ShardStats
	// Stats are the daemon's figures.
	Stats = api.Stats
)

// Sentinels for errors.Is on an *APIError.
var (
	ErrNotFound = errors.New("delayq: not found")
	ErrConflict = errors.New("delayq: conflict")
)

// APIError is an error answer of the daemon.
type APIError struct {
	Status  int    // HTTP status; for an item of a batch, the status the task would have got alone
	Code    string `json:"code"` // e.g. "invalid_task", "not_found", "conflict", "unavailable"
	Message string `json:"message"`
}

func (e *APIError) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("delayq: %s: %s", e.Code, e.Message)
	}
	return fmt.Sprintf("delayq: %d %s: %s", e.Status, e.Code, e.Message)
}

// Is matches ErrNotFound and ErrConflict by code.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return e.Code == "not_found"
	case ErrConflict:
		return e.Code == "conflict"
	}
	return false
}

// Schedule schedules one task.
func (c *Client) Schedule(ctx context.Context, t Task) (Result, error) {
	b, err := tracedTask(ctx, &t).encode() // trace.go
	if err != nil {
		return Result{}, err
	}
	return c.scheduleTask(ctx, b)
}

// ScheduleBatch schedules tasks in one request (at most the daemon's
// DQ_MAX_BATCH, 1000 by default). The results are in the order of tasks;
// the error is set only when the whole request failed.
func (c *Client) ScheduleBatch(ctx context.Context, tasks []Task) ([]BatchResult, error) {
	bodies := make([][]byte, len(tasks))
	for i := range tasks {
		b, err := tracedTask(ctx, &tasks[i]).encode() // trace.go
		if err != nil {
			return nil, err
		}
		bodies[i] = b
	}
	return c.batchRaw(ctx, func(yield func([]byte) bool) {
		for _, b := range bodies {
			if !yield(b) {
				return
			}
		}
	}, len(bodies))
}

// Get reads a task.
func (c *Client) Get(ctx context.Context, id string) (*TaskInfo, error) {
	var t TaskInfo
	if err := c.do(ctx, http.MethodGet, "/v1/tasks/"+segment(id), nil, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// Reschedule moves a waiting task to dueAt and returns the new due time.
func (c *Client) Reschedule(ctx context.Context, id string, dueAt time.Time) (time.Time, error) {
	return c.reschedule(ctx, id, map[string]string{"due_at": dueAt.UTC().Format(timeLayout)})
}

// RescheduleIn moves a waiting task to delay from now (Redis' clock).
func (c *Client) RescheduleIn(ctx context.Context, id string, delay time.Duration) (time.Time, error) {
	return c.reschedule(ctx, id, map[string]string{"delay": delay.String()})
}

func (c *Client) reschedule(ctx context.Context, id string, body any) (time.Time, error) {
	var r struct {
		DueAt time.Time `json:"due_at"`
	}
	err := c.do(ctx, http.MethodPatch, "/v1/tasks/"+segment(id), body, &r)
	return r.DueAt, err
}

// Cancel cancels a waiting task.
func (c *Client) Cancel(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/tasks/"+segment(id), nil, nil)
}

// Stats reads the daemon's figures.
func (c *Client) Stats(ctx context.Context) (*Stats, error) {
	var s Stats
	if err := c.do(ctx, http.MethodGet, "/v1/stats", nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// ListDead lists up to limit dead tasks, most recent first (limit <= 0:
// the daemon's default of 100).
func (c *Client) ListDead(ctx context.Context, limit int) ([]DeadTask, error) {
	path := "/v1/dead"
	if limit > 0 {
		path += "?limit=" + strconv.Itoa(limit)
	}
	var r struct {
		Dead []DeadTask `json:"dead"`
	}
	err := c.do(ctx, http.MethodGet, path, nil, &r)
	return r.Dead, err
}

// Redrive schedules a dead task again now with fresh attempts and returns
// its due time.
func (c *Client) Redrive(ctx context.Context, id string) (time.Time, error) {
	var r struct {
		DueAt time.Time `json:"due_at"`
	}
	err := c.do(ctx, http.MethodPost, "/v1/dead/"+segment(id)+"/redrive", nil, &r)
	return r.DueAt, err
}

// DeleteDead removes a dead task for good.
func (c *Client) DeleteDead(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/dead/"+segment(id), nil, nil)
}

// rawBody is a request body that is already JSON; as do's out, it takes
// the answer's body as it is.
type rawBody []byte

// do sends one request and decodes a 2xx answer into out (when not nil);
// any other answer becomes an *APIError.
func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if raw, ok := in.(rawBody); ok {
		body = bytes.NewReader(raw)
	} else if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("delayq: encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return fmt.Errorf("delayq: %w", err)
	}
	if in != nil || (method != http.MethodGet && method != http.MethodHead) {
		// every write is JSON, body or not: the daemon refuses other
		// types (415), which keeps browser forms from writing
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	traceRequest(ctx, req.Header) // trace.go
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("delayq: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("delayq: %s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		var eb struct {
			Error *APIError `json:"error"`
		}
		if json.Unmarshal(b, &eb) != nil || eb.Error == nil {
			return &APIError{Status: resp.StatusCode, Code: "http_error", Message: strings.TrimSpace(string(b))}
		}
		eb.Error.Status = resp.StatusCode
		return eb.Error
	}
	if out == nil {
		return nil
	}
	if raw, ok := out.(*rawBody); ok {
		*raw = b
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("delayq: %s %s: decode answer: %w", method, path, err)
	}
	return nil
}

// segment escapes s as one path segment of a request to the daemon.
// url.PathEscape leaves the dot segments "." and ".." as they are, and the
// daemon's http.ServeMux resolves them, answering for another route
// (GET /v1/tasks/. was redirected to GET /v1/tasks/, the list). Escaped as
// %2E they reach the route they name, since the mux matches the escaped
// path; the daemon then answers for them (a new task cannot have such an
// id, but an old one may).
func segment(s string) string {
	switch s {
	case ".":
		return "%2E"
	case "..":
		return "%2E%2E"
	}
	return url.PathEscape(s)
}
