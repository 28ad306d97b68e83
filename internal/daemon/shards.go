package daemon

import (
	"bytes"
	"context"
	"errors"
	"net/http"

	"github.com/delayq/delayq/internal/daemon/wire"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/shardmap"
)

// The shard map endpoints (see package shardmap and docs/design.md
// "Elastic shards"): GET /v1/shards reads the map and the progress of its
// last growth; PUT /v1/shards {"count": N} starts growing it. Growing needs
// etcd (the map's source of truth) and Redis (its mirror and stamps).

func (a *App) shardsEtcd() (shardmap.Etcd, *wire.Error) {
	if a.etcd == nil {
		return shardmap.Etcd{}, wire.Unavailable("the shard map lives in etcd: no etcd endpoints configured (DQ_ETCD_ENDPOINTS)")
	}
	return shardmap.Etcd{Client: a.etcd, Namespace: a.cfg.Namespace}, nil
}

func (a *App) handleGetShards(c *call) (int, any, *wire.Error) {
	st, e := a.core.storeFor()
	if e != nil {
		return 0, nil, e
	}
	var m shardmap.Map
	var pr redisstore.Progress
	err := a.core.inStore(c.Context(), func(ctx context.Context) error {
		if me, e := a.shardsEtcd(); e == nil {
			em, _, ok, err := me.Load(ctx)
			if err != nil {
				return err
			}
			if ok {
				st.SetMap(em)
			}
		} else if err := st.ReloadMap(ctx); err != nil {
			return err
		}
		m = st.Map()
		var err error
		pr, err = st.GrowProgress(ctx, m)
		return err
	})
	if err != nil {
		return 0, nil, a.shardsError(err)
	}
	return http.StatusOK, shardsBody(m, pr), nil
}

func (a *App) handlePutShards(c *call) (int, any, *wire.Error) {
	var buf bytes.Buffer
	body, e := c.body(a.cfg.MaxBody, &buf)
	if e != nil {
		return 0, nil, e
	}
	n, e := wire.DecodeGrow(body)
	if e != nil {
		return 0, nil, e
	}
	me, e := a.shardsEtcd()
	if e != nil {
		return 0, nil, e
	}
	st, e := a.core.storeFor()
	if e != nil {
		return 0, nil, e
	}
	var m shardmap.Map
	err := a.core.inStore(c.Context(), func(ctx context.Context) error {
		var err error
		if m, err = me.Grow(ctx, n); err != nil {
			return err
		}
		// The mirror, then the old shards' stamps: from here on no process
		// routing by the previous map writes to an old shard. (Were this
		// to fail, every event process repeats both, and each shard's
		// mover stamps its shard before it moves a task.)
		if err := st.PublishMap(ctx, m); err != nil {
			a.log.Warn("mirror the grown shard map", "error", err)
			return nil
		}
		old := make([]int, m.Previous)
		for i := range old {
			old[i] = i
		}
		if err := st.StampShards(ctx, m, old); err != nil {
			a.log.Warn("stamp the old shards", "error", err)
		}
		return nil
	})
	switch {
	case errors.Is(err, shardmap.ErrInvalidCount):
		return 0, nil, wire.InvalidShardCount(err.Error())
	case errors.Is(err, shardmap.ErrMigrating), errors.Is(err, shardmap.ErrNoMap):
		// no map yet is a state of the namespace, not a server failure
		return 0, nil, wire.Conflict(err.Error())
	case err != nil:
		return 0, nil, a.shardsError(err)
	}
	a.log.Info("growing the shard map", "from", m.Previous, "to", m.Count, "epoch", m.Epoch)
	return http.StatusAccepted, shardsBody(m, redisstore.Progress{}), nil
}

// shardsError answers an infrastructure error of the shard endpoints:
// never bad input.
func (a *App) shardsError(err error) *wire.Error {
	if redisstore.IsUnavailable(err) {
		return wire.Unavailable("redis is " + redisCondition(err))
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return wire.Unavailable("etcd did not answer in time")
	}
	return a.core.internalError("shard map", err)
}

func shardsBody(m shardmap.Map, pr redisstore.Progress) wire.Shards {
	return wire.Shards{Count: m.Count, Previous: m.Previous, State: m.State, Epoch: m.Epoch,
		Moved: pr.Moved, Remaining: pr.Remaining}
}

// followShardMap keeps the store on the newest map etcd holds, so that new
// tasks go to the new shards as soon as a growth is published. (Without
// etcd the store still learns a growth: the old shards' stamps refuse its
// writes and name the new map.)
func (a *App) followShardMap(ctx context.Context) {
	me, e := a.shardsEtcd()
	if e != nil {
		return
	}
	me.Watch(ctx, func(m shardmap.Map) {
		if st := a.core.store.Load(); st != nil && st.SetMap(m) {
			a.log.Info("shard map", "count", m.Count, "previous", m.Previous, "state", m.State, "epoch", m.Epoch)
		}
	}, func(err error) { a.log.Debug("watch shard map", "error", err) })
}
