package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/delayq/delayq/internal/daemon/wire"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
)

// GET /v1/search?prefix=P&limit=N&cursor=C: the tasks whose id starts
// with P, in any state, as GET /v1/tasks lists them, by a bounded scan of
// the shards' record hashes (redisstore.Store.Search); cursor continues
// the scan, "" when it is done. A page is in id order and may hold fewer
// tasks than limit (even none) and still have a cursor.

const maxSearchPrefix = 200

// searchQuery validates GET /v1/search's parameters.
func searchQuery(c *call) (redisstore.SearchQuery, *wire.Error) {
	var sq redisstore.SearchQuery
	q, e := query(c, "prefix", "limit", "cursor")
	if e != nil {
		return sq, e
	}
	sq.Prefix = q.Get("prefix")
	if sq.Prefix == "" || len(sq.Prefix) > maxSearchPrefix {
		return sq, wire.InvalidTask(fmt.Sprintf("prefix: required, 1 to %d bytes (got %d); glob characters are matched literally", maxSearchPrefix, len(sq.Prefix)))
	}
	var bad string
	if sq.Limit, bad = queryLimit(q); bad != "" {
		return sq, wire.InvalidTask(bad)
	}
	sq.Cursor = q.Get("cursor")
	if len(sq.Cursor) > maxCursorLen {
		return sq, wire.InvalidTask(fmt.Sprintf("cursor: longer than %d bytes; pass cursor as it was answered", maxCursorLen))
	}
	return sq, nil
}

func (a *App) handleSearch(c *call) (int, any, *wire.Error) {
	sq, e := searchQuery(c)
	if e != nil {
		return 0, nil, e
	}
	st, e := a.core.storeFor()
	if e != nil {
		return 0, nil, e
	}
	var page redisstore.SearchPage
	err := a.core.inStore(c.Context(), func(ctx context.Context) (err error) {
		page, err = st.Search(ctx, sq)
		return err
	})
	if err != nil {
		if errors.Is(err, redisstore.ErrBadCursor) {
			return 0, nil, wire.InvalidTask("cursor: not a cursor of this prefix (" + task.Truncate(err.Error(), 120) + "); start again without a cursor")
		}
		return 0, nil, a.bulkStoreError("search", err)
	}
	b := append(make([]byte, 0, 96+len(page.Tasks)*320), `{"tasks":[`...)
	for i, l := range page.Tasks {
		if i > 0 {
			b = append(b, ',')
		}
		if b, err = wire.AppendTask(b, l.Task, l.DiedAt); err != nil {
			return 0, nil, a.core.internalError("encode task", err, "task_id", l.Task.ID)
		}
	}
	cur, err := json.Marshal(page.Next)
	if err != nil {
		return 0, nil, a.core.internalError("encode cursor", err)
	}
	b = append(append(b, `],"cursor":`...), cur...)
	b = strconv.AppendInt(append(b, `,"scanned":`...), page.Scanned, 10)
	return http.StatusOK, append(b, "}\n"...), nil
}
