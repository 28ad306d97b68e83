package client

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/delayq/delayq/api"
)

// The operator API: list and search tasks, act on many at once, pause a
// task type, read the cluster's state and the rate limits.

// Task states, as TaskInfo.State and ListOptions.State spell them.
const (
	StateScheduled = "scheduled"
	StateRetrying  = "retrying"
	StateFired     = "fired"
	StatePaused    = "paused" // parked by a worker because its type is paused; runs when resumed
	StateDead      = "dead"
	StateSucceeded = "succeeded"
	StateCancelled = "cancelled"
	// StateDelivered: fired to a topic no delayq work process handles,
	// and Kafka acknowledged the record; the task ended there.
	StateDelivered = "delivered"
)

// MaxBulkIDs is the most ids the daemon takes in one bulk request; the
// bulk methods send longer lists in chunks of this size.
const MaxBulkIDs = 10000

// ErrNoProgress is returned by a bulk method when the daemon keeps
// answering "more" without changing anything, so repeating the request
// would not end.
var ErrNoProgress = errors.New("delayq: the daemon answers more but changes nothing")

// maxIdleRounds is how many answers in a row with more=true and nothing
// changed a bulk method takes before it gives up with ErrNoProgress.
const maxIdleRounds = 3

// ListOptions selects the tasks ListTasks and Tasks return.
type ListOptions struct {
	// State is one of the State constants; empty: scheduled and retrying
	// (the tasks waiting to fire).
	State string
	Type  string // empty: any type
	// DueAfter (inclusive) and DueBefore (exclusive) bound the due time
	// (to the millisecond, like every due time); zero: open.
	DueAfter  time.Time
	DueBefore time.Time
	// Limit is the page size, 1 to 1000; 0: the daemon's default of 100.
	// A page may hold fewer tasks and still have a next page: the daemon
	// bounds the work of each request.
	Limit int
	// Cursor continues a walk: a TaskPage.NextCursor of the same options.
	// Empty: from the start.
	Cursor string
}

func (o ListOptions) query() string {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("state", o.State)
	set("type", o.Type)
	set("due_after", formatQueryTime(o.DueAfter))
	set("due_before", formatQueryTime(o.DueBefore))
	if o.Limit != 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	set("cursor", o.Cursor)
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

// formatQueryTime is t in RFC 3339 with its full precision, so that an
// exclusive bound keeps its meaning; "" for the zero time.
func formatQueryTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// ListedTask is a task as GET /v1/tasks lists it.
type ListedTask struct {
	TaskInfo
	DiedAt time.Time `json:"died_at"` // dead tasks: when the task died; zero otherwise
}

// TaskPage is one page of a listing.
type TaskPage struct {
	Tasks []ListedTask `json:"tasks"`
	// NextCursor continues the walk (ListOptions.Cursor); empty when the
	// walk is complete.
	NextCursor string `json:"next_cursor"`
}

// ListTasks reads one page of the tasks o selects (GET /v1/tasks). The
// walk goes by time across every shard, oldest first, then by id: waiting
// and paused tasks by due time, dead ones by the time they died, succeeded
// and cancelled ones by the time their record expires (finish time plus
// the daemon's retention); fired and delivered tasks shard by shard. A bad
// option or cursor (one of an earlier daemon, which walked every state
// shard by shard, included) is an *APIError with a 4xx status whose
// message names the parameter.
func (c *Client) ListTasks(ctx context.Context, o ListOptions) (*TaskPage, error) {
	var p TaskPage
	if err := c.do(ctx, http.MethodGet, "/v1/tasks"+o.query(), nil, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// Tasks walks every task o selects, page by page (o.Limit tasks a
// request), following the cursors from o.Cursor on. It stops at the first
// error, which it yields. Tasks added or moved while the walk runs may or
// may not be seen; a task that stays put is seen once.
//
//	for t, err := range c.Tasks(ctx, client.ListOptions{State: client.StateDead, Type: "email.send"}) {
//		if err != nil {
//			return err
//		}
//		fmt.Println(t.ID, t.LastError)
//	}
func (c *Client) Tasks(ctx context.Context, o ListOptions) iter.Seq2[ListedTask, error] {
	return walkPages("list tasks", o.Cursor, func(cursor string) ([]ListedTask, string, error) {
		o.Cursor = cursor
		p, err := c.ListTasks(ctx, o)
		if err != nil {
			return nil, "", err
		}
		return p.Tasks, p.NextCursor, nil
	})
}

// Selection picks the tasks of a bulk operation: IDs, or a filter (Type,
// DueAfter, DueBefore; the fields set must all match), or All. Exactly one
// of the three must be given, so that a forgotten field never selects
// every task.
type Selection struct {
	IDs       []string
	Type      string
	DueAfter  time.Time // inclusive
	DueBefore time.Time // exclusive
	All       bool
}

// bulkFilter is the "filter" object of a bulk request.
type bulkFilter struct {
	Type      string `json:"type,omitempty"`
	DueAfter  string `json:"due_after,omitempty"`
	DueBefore string `json:"due_before,omitempty"`
}

// check validates s for an operation whose filter takes due bounds or not.
func (s Selection) check(op string, dueBounds bool) error {
	filter := s.Type != "" || !s.DueAfter.IsZero() || !s.DueBefore.IsZero()
	n := 0
	for _, b := range []bool{len(s.IDs) > 0, filter, s.All} {
		if b {
			n++
		}
	}
	switch {
	case n == 0:
		return fmt.Errorf("delayq: %s: the selection is empty: set IDs, a filter or All", op)
	case n > 1:
		return fmt.Errorf("delayq: %s: set only one of IDs, a filter and All", op)
	case !dueBounds && (!s.DueAfter.IsZero() || !s.DueBefore.IsZero()):
		return fmt.Errorf("delayq: %s: the filter takes a type only, not due bounds", op)
	}
	return nil
}

func (s Selection) filter() bulkFilter {
	return bulkFilter{Type: s.Type, DueAfter: formatQueryTime(s.DueAfter), DueBefore: formatQueryTime(s.DueBefore)}
}

// bulkAnswer is the answer of every bulk request.
type bulkAnswer struct {
	Changed int  `json:"changed"`
	More    bool `json:"more"`
}

// repeat sends a bulk request (send) again while the daemon answers that
// there is more, and sums what changed. Each request is bounded on the
// daemon's side; an answer with more=true that changed nothing
// maxIdleRounds times in a row ends it with ErrNoProgress.
func repeat(ctx context.Context, op string, send func() (bulkAnswer, error)) (int, error) {
	total, idle := 0, 0
	for {
		a, err := send()
		total += a.Changed
		if err != nil {
			return total, err
		}
		if !a.More {
			return total, nil
		}
		if a.Changed > 0 {
			idle = 0
		} else if idle++; idle >= maxIdleRounds {
			return total, fmt.Errorf("%w (%s, %d answers in a row)", ErrNoProgress, op, idle)
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
	}
}

// bulk runs op with s as the body of method path: ids in chunks of
// MaxBulkIDs, or the filter ({} for All), each repeated while more.
func (c *Client) bulk(ctx context.Context, method, path string, s Selection) (int, error) {
	if len(s.IDs) == 0 {
		body := struct {
			Filter bulkFilter `json:"filter"`
		}{s.filter()}
		return repeat(ctx, path, func() (bulkAnswer, error) {
			var a bulkAnswer
			err := c.do(ctx, method, path, body, &a)
			return a, err
		})
	}
	total := 0
	for ids := range chunks(s.IDs, MaxBulkIDs) {
		body := struct {
			IDs []string `json:"ids"`
		}{ids}
		n, err := repeat(ctx, path, func() (bulkAnswer, error) {
			var a bulkAnswer
			err := c.do(ctx, method, path, body, &a)
			return a, err
		})
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// chunks yields s in pieces of at most n.
func chunks[T any](s []T, n int) iter.Seq[[]T] {
	return func(yield func([]T) bool) {
		for len(s) > 0 {
			k := min(n, len(s))
			if !yield(s[:k]) {
				return
			}
			s = s[k:]
		}
	}
}

// CancelTasks cancels the waiting tasks (scheduled, retrying or paused)
// that s selects (POST /v1/tasks/cancel) and returns how many it
// cancelled. Tasks not found or not waiting are skipped, not errors, so it
// is safe to repeat. The daemon works in bounded pages; CancelTasks
// repeats the request while the daemon has more. On an error the count is
// what changed before it.
func (c *Client) CancelTasks(ctx context.Context, s Selection) (int, error) {
	if err := s.check("cancel tasks", true); err != nil {
		return 0, err
	}
	return c.bulk(ctx, http.MethodPost, "/v1/tasks/cancel", s)
}

// RedriveDeadTasks schedules the dead tasks s selects (IDs, a Type or All;
// no due bounds) again now with fresh attempts (POST /v1/dead/redrive)
// and returns how many it redrove. Like CancelTasks it skips what is no
// longer dead and repeats while the daemon has more.
func (c *Client) RedriveDeadTasks(ctx context.Context, s Selection) (int, error) {
	if err := s.check("redrive dead tasks", false); err != nil {
		return 0, err
	}
	return c.bulk(ctx, http.MethodPost, "/v1/dead/redrive", s)
}

// DeleteDeadTasks removes the dead tasks s selects (IDs, a Type or All; no
// due bounds) for good and returns how many it removed: DELETE
// /v1/dead?type= for a type, DELETE /v1/dead {"filter":{}} for all, one
// DELETE /v1/dead/{id} per id (ids not found or not dead are skipped). It
// repeats while the daemon has more.
//
// Every request names its tasks in a way that a daemon from before
// DELETE /v1/dead took a body reads the same: such a daemon ignored the
// body and deleted every dead task, so ids and a type never travel in it.
func (c *Client) DeleteDeadTasks(ctx context.Context, s Selection) (int, error) {
	if err := s.check("delete dead tasks", false); err != nil {
		return 0, err
	}
	if len(s.IDs) == 0 {
		path := "/v1/dead"
		var body any = struct {
			Filter bulkFilter `json:"filter"`
		}{} // {"filter":{}}: every dead task
		if s.Type != "" {
			path, body = path+"?type="+url.QueryEscape(s.Type), nil
		}
		return repeat(ctx, path, func() (bulkAnswer, error) {
			var a bulkAnswer
			err := c.do(ctx, http.MethodDelete, path, body, &a)
			return a, err
		})
	}
	n := 0
	for _, id := range s.IDs {
		err := c.DeleteDead(ctx, id)
		switch {
		case err == nil:
			n++
		case errors.Is(err, ErrNotFound), errors.Is(err, ErrConflict):
		default:
			return n, err
		}
	}
	return n, nil
}

// TypeInfo is a task type as GET /v1/types lists it: the types paused,
// with a rate limit, with parked tasks, or scheduled through this daemon
// since it started. It is the daemon's wire type, declared once in
// package api.
type TypeInfo = api.TypeInfo

// TypeState is the daemon's answer to a pause or a resume.
type TypeState struct {
	Type    string `json:"type"`
	Paused  bool   `json:"paused"`
	Changed bool   `json:"changed"` // false: it was already so
	Resumed int    `json:"resumed"` // resume: parked tasks put back to run
	// UnparkError says why a resume could not put the parked tasks back at
	// once (Redis); the work processes put them back within 10 s anyway.
	UnparkError string `json:"unpark_error"`
}

// Types lists the task types the daemon knows of (GET /v1/types).
func (c *Client) Types(ctx context.Context) ([]TypeInfo, error) {
	var r api.Types
	err := c.do(ctx, http.MethodGet, "/v1/types", nil, &r)
	return r.Types, err
}

// PauseType pauses a task type (POST /v1/types/{type}/pause): every work
// process parks its due tasks, without spending an attempt, until it is
// resumed. Pausing a paused type changes nothing (Changed false). A daemon
// without etcd answers 503 "unavailable".
func (c *Client) PauseType(ctx context.Context, typ string) (*TypeState, error) {
	return c.typeAction(ctx, typ, "pause")
}

// ResumeType resumes a paused type (POST /v1/types/{type}/resume): its
// parked tasks go back to their due times, so they run now, in their
// order (Resumed counts them).
func (c *Client) ResumeType(ctx context.Context, typ string) (*TypeState, error) {
	return c.typeAction(ctx, typ, "resume")
}

func (c *Client) typeAction(ctx context.Context, typ, action string) (*TypeState, error) {
	if typ == "" {
		return nil, fmt.Errorf("delayq: %s type: the type is empty", action)
	}
	var s TypeState
	if err := c.do(ctx, http.MethodPost, "/v1/types/"+segment(typ)+"/"+action, nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// The cluster view (GET /v1/cluster): the daemon's wire types, declared
// once in package api.
type (
	// Cluster is the state of the whole system as the daemon sees it.
	// Parts it could not read are empty and named in RedisError or
	// EtcdError.
	Cluster = api.Cluster
	// ClusterShard is one shard in Cluster.
	ClusterShard = api.ClusterShard
	// Leader is the process leading a shard.
	Leader = api.Leader
	// Process is one running daemon, event or work process.
	Process = api.Process
	// WorkedTopic is a Kafka topic that delayq work processes declared
	// they consume (ForgetWorkedTopic removes it).
	WorkedTopic = api.WorkedTopic
)

// Cluster reads the state of the shards, processes and worked topics (GET
// /v1/cluster).
func (c *Client) Cluster(ctx context.Context) (*Cluster, error) {
	var cl Cluster
	if err := c.do(ctx, http.MethodGet, "/v1/cluster", nil, &cl); err != nil {
		return nil, err
	}
	return &cl, nil
}

// ForgetWorkedTopic removes topic from the worked topics (DELETE
// /v1/cluster/worked/{topic}), for a topic no delayq work process handles
// any more: its tasks fired from then on end "delivered" once Kafka
// acknowledged them. forgotten is false when it was not worked. A work
// process consuming the topic declares it again when it starts. A bad
// topic name is a 422 "invalid_task" naming topic; a daemon without etcd
// answers 503 "unavailable".
func (c *Client) ForgetWorkedTopic(ctx context.Context, topic string) (forgotten bool, err error) {
	if topic == "" {
		return false, errors.New("delayq: forget worked topic: the topic is empty")
	}
	var r api.ForgottenTopic
	if err := c.do(ctx, http.MethodDelete, "/v1/cluster/worked/"+segment(topic), nil, &r); err != nil {
		return false, err
	}
	return r.Forgotten, nil
}

// The rate limits (/v1/limits): the daemon's wire types, declared once
// in package api.
type (
	// LimitRule is the rate limit of a task type: any of the three kinds,
	// at least one.
	LimitRule = api.LimitRule
	// WindowQuota admits at most Limit tasks per fixed Window.
	WindowQuota = api.WindowQuota
	// TokenBucket admits Rate tasks per second on average with bursts of
	// up to Burst; below Reserve tokens only tasks with a priority of at
	// least MinPriority are admitted.
	TokenBucket = api.TokenBucket
	// Concurrency admits at most Limit tasks running at once; a slot a
	// crashed worker holds frees itself after SlotTTL (0: the daemon's
	// default, 5m).
	Concurrency = api.Concurrency
	// LimitUsage is a rule's live usage (with a key or header scope: the
	// sums, the active values and the busiest of them).
	LimitUsage = api.LimitUsage
	// KeyUsage is the usage of one value of a keyed rule's scope.
	KeyUsage = api.KeyUsage
	// TypeLimit is the rate limit of one type with its usage.
	TypeLimit = api.TypeLimit
)

// Limits lists every rate limit with its usage (GET /v1/limits).
func (c *Client) Limits(ctx context.Context) ([]TypeLimit, error) {
	var r api.Limits
	err := c.do(ctx, http.MethodGet, "/v1/limits", nil, &r)
	return r.Limits, err
}

// GetLimit reads the rate limit of a type (GET /v1/limits/{type}); a type
// without one is ErrNotFound.
func (c *Client) GetLimit(ctx context.Context, typ string) (*TypeLimit, error) {
	return c.limit(ctx, http.MethodGet, typ, nil)
}

// SetLimit creates or replaces the rate limit of a type (PUT
// /v1/limits/{type}); every worker applies it within a second. A wrong
// field is an *APIError with status 422, code "invalid_rule", whose
// message names the field.
func (c *Client) SetLimit(ctx context.Context, typ string, r LimitRule) (*TypeLimit, error) {
	return c.limit(ctx, http.MethodPut, typ, r)
}

// DeleteLimit removes the rate limit of a type (DELETE
// /v1/limits/{type}); a type without one is ErrNotFound.
func (c *Client) DeleteLimit(ctx context.Context, typ string) error {
	if typ == "" {
		return errors.New("delayq: delete limit: the type is empty")
	}
	return c.do(ctx, http.MethodDelete, "/v1/limits/"+segment(typ), nil, nil)
}

func (c *Client) limit(ctx context.Context, method, typ string, in any) (*TypeLimit, error) {
	if typ == "" {
		return nil, errors.New("delayq: limit: the type is empty")
	}
	var l TypeLimit
	if err := c.do(ctx, method, "/v1/limits/"+segment(typ), in, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// OpenAPI returns the daemon's OpenAPI 3.1 description of its API (GET
// /v1/openapi.yaml), as YAML.
func (c *Client) OpenAPI(ctx context.Context) ([]byte, error) {
	var b rawBody
	err := c.do(ctx, http.MethodGet, "/v1/openapi.yaml", nil, &b)
	return b, err
}
