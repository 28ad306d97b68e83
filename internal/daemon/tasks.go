package daemon

import (
	"bytes"
	"context"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/delayq/delayq/internal/daemon/wire"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
)

// The tasks: POST /v1/tasks and /v1/tasks/batch, GET, PATCH and DELETE
// /v1/tasks/{id}, and the same schedule path as Go calls for an embedded
// daemon's producer (package embedded). Schedules go through the ingest
// core (ingest.go); the others take the store from it (core.go), which
// answers 503 while Redis is down for them.

func (a *App) handleSchedule(c *call) (int, any, *wire.Error) {
	var buf bytes.Buffer
	body, e := c.body(a.cfg.MaxBody, &buf)
	if e != nil {
		return 0, nil, e
	}
	res := a.ScheduleTask(c.Context(), body)
	s := &res
	if span := trace.SpanFromContext(c.Context()); span.IsRecording() {
		span.SetAttributes(attribute.String("delayq.task.id", s.ID), attribute.String("delayq.outcome", s.Outcome))
	}
	if s.Err != nil {
		return 0, nil, s.Err
	}
	a.log.Debug("task scheduled", "task_id", s.ID, "outcome", s.Outcome, "due_at", s.DueAt)
	return s.Status(), append(wire.AppendScheduled(make([]byte, 0, 160), s), '\n'), nil
}

func (a *App) handleBatch(c *call) (int, any, *wire.Error) {
	in, out := c.buf(), c.buf()
	body, e := c.body(a.cfg.MaxBody, in)
	if e != nil {
		return 0, nil, e
	}
	items, e := wire.DecodeBatch(body, a.cfg.MaxBatch)
	if e != nil {
		return 0, nil, e
	}
	results := a.ScheduleTasks(c.Context(), items)
	out.Grow(16 + len(results)*110)
	b := append(out.AvailableBuffer(), `{"results":[`...)
	for i := range results {
		if i > 0 {
			b = append(b, ',')
		}
		b = wire.AppendScheduled(b, &results[i])
	}
	b = append(b, "]}\n"...)
	a.log.Debug("batch scheduled", "tasks", len(items))
	return http.StatusOK, b, nil
}

// ScheduleTask schedules one task given in the API's JSON (the body of
// POST /v1/tasks), grouped with concurrent calls (the coalescer), and
// answers as that endpoint does: Err set for a refused task (4xx naming
// the field) or a failure. The handler calls it; an embedded daemon's
// producer calls ScheduleFields.
func (a *App) ScheduleTask(ctx context.Context, body []byte) wire.Scheduled {
	return a.core.scheduleOne(ctx, func(now time.Time) (redisstore.Submit, *wire.Error) { return wire.DecodeTask(body, now) })
}

// ScheduleFields is ScheduleTask for a task given as Go values (package
// embedded): the API's checks and answers, without JSON.
// A caller's span context (ctx) is the parent of a delayq.schedule span
// and the task's trace context (trace.go).
func (a *App) ScheduleFields(ctx context.Context, f *wire.Fields) wire.Scheduled {
	ctx, span := traceEmbedded(ctx, 1)
	s := a.core.scheduleOne(ctx, func(now time.Time) (redisstore.Submit, *wire.Error) { return wire.NewTask(f, now) })
	endTrace(span, &s)
	return s
}

// ScheduleTasks schedules the tasks of a batch (each in the API's JSON, an
// item of POST /v1/tasks/batch) in one store call; the results are in
// order, a refused task's with Err set. The caller bounds the count
// (DQ_MAX_BATCH, see CheckBatch).
func (a *App) ScheduleTasks(ctx context.Context, items [][]byte) []wire.Scheduled {
	return a.core.scheduleMany(ctx, len(items), func(i int, now time.Time) (redisstore.Submit, *wire.Error) {
		return wire.DecodeTask(items[i], now)
	})
}

// ScheduleFieldsBatch is ScheduleTasks for tasks given as Go values.
func (a *App) ScheduleFieldsBatch(ctx context.Context, fs []wire.Fields) []wire.Scheduled {
	ctx, span := traceEmbedded(ctx, len(fs))
	defer endTrace(span, nil)
	return a.core.scheduleMany(ctx, len(fs), func(i int, now time.Time) (redisstore.Submit, *wire.Error) {
		return wire.NewTask(&fs[i], now)
	})
}

// CheckBatch refuses a batch of n tasks over DQ_MAX_BATCH as the batch
// endpoint does (413 batch_too_large).
func (a *App) CheckBatch(n int) *wire.Error {
	if n > a.cfg.MaxBatch {
		return wire.BatchTooLarge(a.cfg.MaxBatch)
	}
	return nil
}

// pathID reads and checks the {id} path value. It names a task that may
// have been stored before task.ValidateID refused its id ("." and ".."
// arrive here escaped as %2E), so it passes task.ValidateStoredID.
func pathID(c *call) (string, *wire.Error) {
	id := c.PathValue("id")
	if err := task.ValidateStoredID(id); err != nil {
		return "", wire.InvalidTask(wire.ValidationMessage(err))
	}
	return id, nil
}

func (a *App) handleGet(c *call) (int, any, *wire.Error) {
	id, e := pathID(c)
	if e != nil {
		return 0, nil, e
	}
	t, ok, e := a.core.journaled(c.Context(), id)
	if e != nil {
		return 0, nil, e
	}
	if !ok {
		st, e := a.core.storeForID(id)
		if e != nil {
			return 0, nil, e
		}
		err := a.core.inStore(c.Context(), func(ctx context.Context) (err error) {
			t, err = st.Get(ctx, id)
			return err
		})
		if err != nil {
			return 0, nil, a.core.storeError(id, err)
		}
	}
	b, err := wire.AppendTask(make([]byte, 0, 256+len(t.Payload)+64*len(t.History)), t, t.DiedAt) // a dead task: died_at
	if err != nil {
		return 0, nil, a.core.internalError("encode task", err, "task_id", id)
	}
	b = wire.AppendAttempts(b, t) // GET only: the lists carry last_error alone
	return http.StatusOK, append(b, '\n'), nil
}

func (a *App) handleReschedule(c *call) (int, any, *wire.Error) {
	id, e := pathID(c)
	if e != nil {
		return 0, nil, e
	}
	var buf bytes.Buffer
	body, e := c.body(a.cfg.MaxBody, &buf)
	if e != nil {
		return 0, nil, e
	}
	d, e := wire.DecodeReschedule(body, a.core.now())
	if e != nil {
		return 0, nil, e
	}
	st, e := a.core.writable(c.Context(), id)
	if e != nil {
		return 0, nil, e
	}
	var at time.Time
	err := a.core.inStore(c.Context(), func(ctx context.Context) (err error) {
		at, err = st.Reschedule(ctx, id, d.At, d.Delay, d.Relative)
		return err
	})
	if err != nil {
		return 0, nil, a.core.storeError(id, err)
	}
	a.log.Debug("task rescheduled", "task_id", id, "due_at", at)
	return http.StatusOK, map[string]string{"id": id, "due_at": wire.FormatTime(at)}, nil
}

func (a *App) handleCancel(c *call) (int, any, *wire.Error) {
	id, e := pathID(c)
	if e != nil {
		return 0, nil, e
	}
	st, e := a.core.writable(c.Context(), id)
	if e != nil {
		return 0, nil, e
	}
	err := a.core.inStore(c.Context(), func(ctx context.Context) error { return st.Cancel(ctx, id) })
	if err != nil {
		return 0, nil, a.core.storeError(id, err)
	}
	a.log.Debug("task cancelled", "task_id", id)
	a.publishCancelled(c.Context(), st, id) // outcomes.go
	return http.StatusOK, map[string]string{"id": id, "state": string(task.StateCancelled)}, nil
}
