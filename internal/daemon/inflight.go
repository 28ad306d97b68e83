package daemon

import (
	"context"
	"net/http"

	"github.com/delayq/delayq/api"
	"github.com/delayq/delayq/internal/daemon/wire"
)

// GET /v1/inflight?limit=N: the tasks a worker holds an execution claim
// of right now (the shards' claims hashes, redisstore.Store.ListInFlight),
// soonest claim deadline first, at most limit (default 100, at most
// 1000); "truncated" tells that more are held.

func (a *App) handleInFlight(c *call) (int, any, *wire.Error) {
	q, e := query(c, "limit") // operator.go
	if e != nil {
		return 0, nil, e
	}
	limit, bad := queryLimit(q)
	if bad != "" {
		return 0, nil, wire.InvalidTask(bad)
	}
	st, e := a.core.storeFor()
	if e != nil {
		return 0, nil, e
	}
	out := api.InFlight{Tasks: []api.InFlightTask{}}
	err := a.core.inStore(c.Context(), func(ctx context.Context) error {
		fs, truncated, err := st.ListInFlight(ctx, limit)
		if err != nil {
			return err
		}
		out.Truncated = truncated
		for _, f := range fs {
			out.Tasks = append(out.Tasks, api.InFlightTask{ID: f.ID, Type: f.Type, Shard: f.Shard, Attempt: f.Attempt,
				Owner: f.Owner, ExpiresAt: f.ExpiresAt})
		}
		return nil
	})
	if err != nil {
		return 0, nil, a.core.storeError("", err)
	}
	return http.StatusOK, out, nil
}
