package daemon

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/delayq/delayq/internal/daemon/wire"
	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/schedule"
	"github.com/delayq/delayq/internal/task"
)

// The schedule endpoints (periodic tasks, package schedule):
//
//	PUT    /v1/schedules/{id}         create (201) or replace (200) a schedule
//	GET    /v1/schedules?limit=&cursor=  the schedules in id order, a page at a time
//	GET    /v1/schedules/{id}         one schedule
//	DELETE /v1/schedules/{id}         remove it (its waiting ticks are cancelled by the scheduler)
//	POST   /v1/schedules/{id}/pause   stop materializing ticks (idempotent)
//	POST   /v1/schedules/{id}/resume  start again (idempotent)
//
// Schedules live in etcd: without DQ_ETCD_ENDPOINTS, or while etcd does
// not answer, these endpoints answer 503. The scheduler inside the event
// processes follows the changes live. Every answer about a schedule is its
// view: the stored schedule with the effective time zone and catch-up
// policy, the next NextTicks ticks (also while paused: the ticks it would
// fire) and the last tick that fired.
//
// A namespace holds at most DQ_MAX_SCHEDULES schedules: a PUT creating one
// more answers 422 too_many_schedules (not 429: waiting does not help,
// deleting a schedule or raising the setting does); replacing, pausing
// and deleting are always allowed. The count and the create are one etcd
// transaction, so concurrent creates cannot overshoot it.
//
// The list pages like GET /v1/tasks: limit (1..1000, default 100) and the
// opaque next_cursor of the previous page, answered while more schedules
// follow. Schedules are in id order, so a walk sees every schedule that
// exists throughout it exactly once.

// codeInvalidSchedule is the 422 answer for a spec field or schedule id
// with a wrong value; the message starts with the field's name
// ("cron: ...", "task.type: ...").
const codeInvalidSchedule = "invalid_schedule"

// codeTooManySchedules is the 422 answer for a PUT that would create a
// schedule beyond DQ_MAX_SCHEDULES.
const codeTooManySchedules = "too_many_schedules"

// nextTicks is how many upcoming ticks a view lists.
const nextTicks = 5

func invalidSchedule(msg string) *wire.Error {
	return &wire.Error{Status: http.StatusUnprocessableEntity, Code: codeInvalidSchedule, Message: msg}
}

// scheduleView is a schedule as the API answers it. Its own paused,
// timezone and catchup fields hide the spec's (which are omitted when
// they hold the default), so the view always shows the effective values.
type scheduleView struct {
	schedule.Schedule
	Timezone   string   `json:"timezone"`
	Catchup    string   `json:"catchup"`
	Paused     bool     `json:"paused"`
	Next       []string `json:"next"`
	NextError  string   `json:"next_error,omitempty"`
	LastTick   *string  `json:"last_tick"`
	LastTaskID *string  `json:"last_task_id"`
	// Created is set on the answer of PUT, Changed on pause and resume.
	Created *bool `json:"created,omitempty"`
	Changed *bool `json:"changed,omitempty"`
}

// view builds the view of sch with its scheduler state st (ok: there is
// one) at now.
func (a *App) view(sch schedule.Schedule, st schedule.State, ok bool, now time.Time) *scheduleView {
	v := &scheduleView{Schedule: sch, Timezone: sch.Timezone, Catchup: string(sch.EffectiveCatchup()),
		Paused: sch.Paused, Next: []string{}}
	if v.Timezone == "" {
		v.Timezone = "UTC"
	}
	c, err := schedule.Compile(sch.Spec)
	if err != nil {
		// Stored by a daemon that accepted it (a newer zone database, an
		// older rule): the schedule is still shown, with why its ticks
		// cannot be computed here.
		v.NextError = err.Error()
		a.log.Warn("stored schedule does not compile", "schedule", sch.ID, "error", err)
		return v
	}
	loc := c.Location()
	for _, t := range c.NextN(now, nextTicks) {
		v.Next = append(v.Next, t.In(loc).Format(wire.TimeLayout))
	}
	if ok {
		if t, fired := st.LastFired(now); fired {
			s, id := t.In(loc).Format(wire.TimeLayout), schedule.TaskID(sch.ID, t)
			v.LastTick, v.LastTaskID = &s, &id
		}
	}
	return v
}

// scheduleStore returns the schedule store, or the 503 answer without etcd.
func (a *App) scheduleStore() (*schedule.Store, *wire.Error) {
	cli, e := a.etcdFor("schedules")
	if e != nil {
		return nil, e
	}
	return schedule.NewStore(cli, a.cfg.Namespace).WithLimit(a.cfg.MaxSchedules).WithClock(a.core.now), nil
}

// pathScheduleID reads and checks the {id} path value (422 like a bad
// task id in a task's path).
func pathScheduleID(c *call) (string, *wire.Error) {
	id := c.PathValue("id")
	if err := schedule.ValidateID(id); err != nil {
		return "", scheduleInputError(id, err)
	}
	return id, nil
}

// scheduleInputError is the 4xx answer of an error of package schedule
// that is the request's fault (naming the field), nil for any other.
func scheduleInputError(id string, err error) *wire.Error {
	var fe *schedule.FieldError
	switch {
	case errors.As(err, &fe):
		return invalidSchedule(task.Truncate(fe.Error(), 300))
	case errors.Is(err, schedule.ErrSyntax):
		return wire.InvalidJSON(task.Truncate(err.Error(), 300))
	case errors.Is(err, schedule.ErrUnknownField):
		return &wire.Error{Status: http.StatusBadRequest, Code: wire.CodeUnknownField, Message: task.Truncate(err.Error(), 300)}
	case errors.Is(err, schedule.ErrNotFound):
		return wire.NotFound("schedule " + id + " not found")
	case errors.Is(err, schedule.ErrTooMany):
		return &wire.Error{Status: http.StatusUnprocessableEntity, Code: codeTooManySchedules,
			Message: task.Truncate(err.Error(), 200) + " (DQ_MAX_SCHEDULES): delete schedules or raise the limit; replacing an existing schedule is allowed"}
	}
	return nil
}

// scheduleError maps an error of package schedule to the answer: bad
// input is 4xx naming the field; a failed etcd call is 503; anything
// else is our bug, 500 (logged): never 503, which clients retry forever.
func (a *App) scheduleError(id string, err error) *wire.Error {
	if e := scheduleInputError(id, err); e != nil {
		return e
	}
	var ee *schedule.EtcdError
	if errors.As(err, &ee) || errors.Is(err, schedule.ErrBusy) {
		return etcdError(err)
	}
	return a.core.internalError("schedule", err, "schedule", id)
}

func (a *App) handlePutSchedule(c *call) (int, any, *wire.Error) {
	id, e := pathScheduleID(c)
	if e != nil {
		return 0, nil, e
	}
	var buf bytes.Buffer
	body, e := c.body(a.cfg.MaxBody, &buf)
	if e != nil {
		return 0, nil, e
	}
	// end_at must not be in the past: the daemon's clock is good enough
	// for that (a schedule that ends within a clock skew of now is
	// harmless either way)
	spec, err := schedule.DecodeSpec(body, a.core.now())
	if err != nil {
		return 0, nil, a.scheduleError(id, err)
	}
	if e := a.checkTemplateSize(id, spec); e != nil {
		return 0, nil, e
	}
	if e := a.checkTemplateTopic(spec.Task.Topic); e != nil { // topics.go
		return 0, nil, e
	}
	st, e := a.scheduleStore()
	if e != nil {
		return 0, nil, e
	}
	ctx, cancel := context.WithTimeout(c.Context(), etcdTimeout)
	defer cancel()
	sch, created, err := st.Put(ctx, id, spec)
	if err != nil {
		return 0, nil, a.scheduleError(id, err)
	}
	a.log.Info("schedule stored", "schedule", id, "created", created, "cron", sch.Cron, "timezone", sch.Timezone, "type", sch.Task.Type, "paused", sch.Paused)
	v := a.changedView(ctx, st, sch)
	v.Created = &created
	if created {
		return http.StatusCreated, v, nil
	}
	return http.StatusOK, v, nil
}

// checkTemplateSize refuses a schedule whose ticks' Kafka records would be
// larger than DQ_MAX_RECORD_BYTES (as POST /v1/tasks refuses such a task):
// every tick would be refused by the broker at its fire.
func (a *App) checkTemplateSize(id string, spec schedule.Spec) *wire.Error {
	c, err := schedule.Compile(spec)
	if err != nil {
		return a.scheduleError(id, err)
	}
	t := c.Task(id, time.UnixMilli(1<<45)) // a tick id of the longest length before 3084
	n := record.Size(t)
	if int64(n) <= a.cfg.MaxRecordBytes {
		return nil
	}
	return &wire.Error{Status: http.StatusRequestEntityTooLarge, Code: wire.CodeRecordTooLarge,
		Message: fmt.Sprintf("task: each tick's Kafka record would be %d bytes (payload %d), over the limit of %d bytes (DQ_MAX_RECORD_BYTES)",
			n, len(t.Payload), a.cfg.MaxRecordBytes)}
}

// scheduleCursorPrefix versions the list's cursor, which is opaque to
// clients: base64url of the prefix and the last id of the page.
const scheduleCursorPrefix = "s1/"

func encodeScheduleCursor(lastID string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(scheduleCursorPrefix + lastID))
}

func decodeScheduleCursor(cur string) (string, *wire.Error) {
	b, err := base64.RawURLEncoding.DecodeString(cur)
	id, ok := strings.CutPrefix(string(b), scheduleCursorPrefix)
	if len(cur) > maxCursorLen || err != nil || !ok || (id != "" && schedule.ValidateID(id) != nil) {
		return "", invalidSchedule("cursor: not a next_cursor of GET /v1/schedules; start again without a cursor")
	}
	return id, nil
}

// scheduleListQuery reads GET /v1/schedules' limit and cursor: the id the
// page starts after ("" from the first) and the page size.
func scheduleListQuery(c *call) (after string, limit int, e *wire.Error) {
	q, e := query(c, "limit", "cursor")
	if e != nil {
		return "", 0, e
	}
	limit, bad := queryLimit(q) // operator.go
	if bad != "" {
		return "", 0, invalidSchedule(bad)
	}
	if cur := q.Get("cursor"); cur != "" {
		if after, e = decodeScheduleCursor(cur); e != nil {
			return "", 0, e
		}
	}
	return after, limit, nil
}

func (a *App) handleListSchedules(c *call) (int, any, *wire.Error) {
	after, limit, e := scheduleListQuery(c)
	if e != nil {
		return 0, nil, e
	}
	st, e := a.scheduleStore()
	if e != nil {
		return 0, nil, e
	}
	ctx, cancel := context.WithTimeout(c.Context(), etcdTimeout)
	defer cancel()
	// The page's schedules and their states at one revision.
	page, err := st.List(ctx, after, limit)
	if err != nil {
		return 0, nil, a.scheduleError("", err)
	}
	if page.Bad > 0 {
		a.log.Warn("schedules in etcd that do not decode are left out", "count", page.Bad, "prefix", schedule.Prefix(a.cfg.Namespace))
	}
	now := a.core.now()
	out := make([]*scheduleView, 0, len(page.Schedules))
	for _, sch := range page.Schedules {
		state, ok := page.States[sch.ID]
		out = append(out, a.view(sch, state, ok, now))
	}
	var next string
	if page.More {
		next = encodeScheduleCursor(page.Last)
	}
	return http.StatusOK, struct {
		Schedules  []*scheduleView `json:"schedules"`
		NextCursor string          `json:"next_cursor,omitempty"`
	}{out, next}, nil
}

// withSchedule runs fn on the path's schedule: its id checked, the store,
// and a context bounded by etcdTimeout.
func (a *App) withSchedule(c *call, fn func(ctx context.Context, st *schedule.Store, id string) (int, any, *wire.Error)) (int, any, *wire.Error) {
	id, e := pathScheduleID(c)
	if e != nil {
		return 0, nil, e
	}
	st, e := a.scheduleStore()
	if e != nil {
		return 0, nil, e
	}
	ctx, cancel := context.WithTimeout(c.Context(), etcdTimeout)
	defer cancel()
	return fn(ctx, st, id)
}

func (a *App) handleGetSchedule(c *call) (int, any, *wire.Error) {
	return a.withSchedule(c, func(ctx context.Context, st *schedule.Store, id string) (int, any, *wire.Error) {
		sch, err := st.Get(ctx, id)
		if err != nil {
			return 0, nil, a.scheduleError(id, err)
		}
		state, ok, err := st.State(ctx, id)
		if err != nil {
			return 0, nil, a.scheduleError(id, err)
		}
		return http.StatusOK, a.view(sch, state, ok, a.core.now()), nil
	})
}

func (a *App) handleDeleteSchedule(c *call) (int, any, *wire.Error) {
	return a.withSchedule(c, func(ctx context.Context, st *schedule.Store, id string) (int, any, *wire.Error) {
		deleted, err := st.Delete(ctx, id)
		if err != nil {
			return 0, nil, a.scheduleError(id, err)
		}
		if !deleted {
			return 0, nil, wire.NotFound("schedule " + id + " not found")
		}
		a.log.Info("schedule deleted", "schedule", id)
		return http.StatusOK, map[string]any{"id": id, "deleted": true}, nil
	})
}

// changedView is the view of a schedule this request just wrote. The
// change is stored, so a failed read of the scheduler's state only leaves
// last_tick unknown (logged), rather than failing the request.
func (a *App) changedView(ctx context.Context, st *schedule.Store, sch schedule.Schedule) *scheduleView {
	state, ok, err := st.State(ctx, sch.ID)
	if err != nil {
		a.log.Warn("read schedule state", "schedule", sch.ID, "error", err)
		ok = false
	}
	return a.view(sch, state, ok, a.core.now())
}

func (a *App) handlePauseSchedule(c *call) (int, any, *wire.Error) {
	return a.setSchedulePaused(c, true)
}

func (a *App) handleResumeSchedule(c *call) (int, any, *wire.Error) {
	return a.setSchedulePaused(c, false)
}

// setSchedulePaused pauses or resumes the path's schedule: 200 with the
// view either way, changed false when it was so already.
func (a *App) setSchedulePaused(c *call, paused bool) (int, any, *wire.Error) {
	return a.withSchedule(c, func(ctx context.Context, st *schedule.Store, id string) (int, any, *wire.Error) {
		sch, changed, err := st.SetPaused(ctx, id, paused)
		if err != nil {
			return 0, nil, a.scheduleError(id, err)
		}
		if changed {
			a.log.Info("schedule paused", "schedule", id, "paused", paused)
		}
		v := a.changedView(ctx, st, sch)
		v.Changed = &changed
		return http.StatusOK, v, nil
	})
}
