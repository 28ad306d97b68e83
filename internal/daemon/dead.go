package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/delayq/delayq/internal/daemon/wire"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
)

// The dead tasks, one by one: GET /v1/dead, POST /v1/dead/{id}/redrive,
// DELETE /v1/dead/{id} (the bulk forms are in operator.go).
//
// GET /v1/dead answers the most recent dead tasks, newest first across
// every shard (by the time they died); GET /v1/tasks?state=dead pages
// through all of them the other way, oldest first.

func (a *App) handleListDead(c *call) (int, any, *wire.Error) {
	limit, e := deadListQuery(c) // operator.go
	if e != nil {
		return 0, nil, e
	}
	st, e := a.core.storeFor()
	if e != nil {
		return 0, nil, e
	}
	var dead []redisstore.DeadTask
	err := a.core.inStore(c.Context(), func(ctx context.Context) (err error) {
		dead, err = st.ListDead(ctx, limit)
		return err
	})
	if err != nil {
		return 0, nil, a.core.storeError("", err)
	}
	b := append(make([]byte, 0, 64+len(dead)*256), `{"dead":[`...)
	for i, d := range dead {
		if i > 0 {
			b = append(b, ',')
		}
		if b, err = wire.AppendTask(b, d.Task, d.DiedAt); err != nil {
			return 0, nil, a.core.internalError("encode task", err, "task_id", d.Task.ID)
		}
	}
	return http.StatusOK, append(b, "]}\n"...), nil
}

func (a *App) handleRedrive(c *call) (int, any, *wire.Error) {
	id, e := pathID(c)
	if e != nil {
		return 0, nil, e
	}
	st, e := a.core.storeFor()
	if e != nil {
		return 0, nil, e
	}
	var at time.Time
	err := a.core.inStore(c.Context(), func(ctx context.Context) (err error) {
		at, err = st.Redrive(ctx, id)
		return err
	})
	if err != nil {
		return 0, nil, a.deadError(id, err)
	}
	a.log.Debug("dead task redriven", "task_id", id)
	return http.StatusOK, map[string]string{"id": id, "state": string(task.StateScheduled), "due_at": wire.FormatTime(at)}, nil
}

func (a *App) handleDeleteDead(c *call) (int, any, *wire.Error) {
	id, e := pathID(c)
	if e != nil {
		return 0, nil, e
	}
	st, e := a.core.storeFor()
	if e != nil {
		return 0, nil, e
	}
	err := a.core.inStore(c.Context(), func(ctx context.Context) error { return st.DeleteDead(ctx, id) })
	if err != nil {
		return 0, nil, a.deadError(id, err)
	}
	a.log.Debug("dead task deleted", "task_id", id)
	return http.StatusOK, map[string]any{"id": id, "deleted": true}, nil
}

// deadError is storeError with messages for the dead-set operations.
func (a *App) deadError(id string, err error) *wire.Error {
	var se *redisstore.StateError
	switch {
	case errors.Is(err, redisstore.ErrNotFound):
		return wire.NotFound("dead task " + id + " not found")
	case errors.As(err, &se):
		return wire.Conflict(fmt.Sprintf("task %s is %s, not dead", id, se.State))
	}
	return a.core.storeError(id, err)
}
