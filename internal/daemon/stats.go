package daemon

import (
	"context"
	"net/http"

	"github.com/delayq/delayq/api"
	"github.com/delayq/delayq/internal/daemon/wire"
	"github.com/delayq/delayq/internal/redisstore"
)

// GET /v1/stats: totals and per-shard figures from Redis, journal_depth,
// redis_up and shards_down. It always answers 200, also while Redis is
// down, so operators can watch a journal drain during an outage.

func (a *App) handleStats(c *call) (int, any, *wire.Error) {
	resp := api.Stats{Namespace: a.cfg.Namespace, ShardCount: a.core.shardCount(), Shards: []api.ShardStats{},
		ShardsDown: a.core.shardsDown()}
	if resp.ShardsDown == nil {
		resp.ShardsDown = []int{}
	}
	if st, e := a.core.storeFor(); e != nil {
		resp.RedisError = e.Message
	} else {
		var shards []redisstore.ShardStats
		err := a.core.inStore(c.Context(), func(ctx context.Context) (err error) {
			shards, err = st.Stats(ctx)
			return err
		})
		switch {
		case err != nil && a.core.cluster && a.core.redisUp.Load():
			// one master down fails the read of every shard's figures
			// (one read); Redis answers the other shards
			resp.RedisUp = true
			resp.RedisError = "shard figures not read: redis " + redisCondition(err)
		case err != nil:
			resp.RedisError = "redis " + redisCondition(err)
		default:
			resp.RedisUp = true
			resp.Shards = shardStats(shards)
			for _, s := range shards {
				resp.Totals.Scheduled += s.Scheduled
				resp.Totals.Firing += s.Firing
				resp.Totals.Dead += s.Dead
			}
		}
	}
	resp.JournalDepth = a.core.journalDepth()
	return http.StatusOK, resp, nil
}

// shardStats are the store's figures in the API's type.
func shardStats(in []redisstore.ShardStats) []api.ShardStats {
	out := make([]api.ShardStats, len(in))
	for i, s := range in {
		out[i] = api.ShardStats{Shard: s.Shard, Scheduled: s.Scheduled, Firing: s.Firing, Dead: s.Dead,
			EarliestDue: s.EarliestDue, LeaderToken: s.Token, Overdue: s.Overdue,
			OldestOverdueSeconds: s.OldestOverdueSeconds, Paused: s.Paused}
	}
	return out
}
