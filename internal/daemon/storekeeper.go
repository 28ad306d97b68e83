package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/retry"
)

// pingInterval is how often the keeper pings Redis once the store is open,
// so that delayq_redis_up is right without traffic.
const pingInterval = time.Second

// storeKeeper opens the Redis store and then watches Redis.
//
// redisstore.New needs Redis (it reads the namespace's shard map), so a
// daemon started while Redis is unreachable runs without a store: schedules
// go to the journal and the other /v1 endpoints answer 503. The keeper
// retries with capped exponential backoff until the store opens. A
// namespace written with another bucket layout is fatal, and so is one
// address that is a node of a Redis Cluster of several masters (it needs
// DQ_REDIS_CLUSTER); a shard count other than DQ_SHARDS is not: the daemon
// follows the namespace's map.
type storeKeeper struct {
	app *App
}

// tryOpen makes one attempt. It returns an error only for a fatal cause.
func (k *storeKeeper) tryOpen(ctx context.Context) error {
	a := k.app
	octx, cancel := a.opContext(ctx)
	defer cancel()
	st, err := redisstore.New(octx, a.rdb, redisstore.Options{
		Namespace: a.cfg.Namespace, Shards: a.cfg.Shards, Retention: a.cfg.Retention,
	})
	a.noteMisconfig(err)
	switch {
	case err == nil:
		a.store.Store(st)
		a.log.Info("redis store open", "namespace", st.Namespace(), "shards", st.Shards())
		if st.Shards() != a.cfg.Shards {
			a.log.Info("following the namespace's shard map, not DQ_SHARDS", "namespace_shards", st.Shards(),
				"configured_shards", a.cfg.Shards, "state", st.Map().State)
		}
		if advice := st.MemoryAdvice(octx); advice != "" {
			a.log.Warn(advice)
		}
		a.redisUp.Store(true)
		a.noteWrite(nil) // New wrote the namespace's meta: Redis takes writes
		a.wake()
		return nil
	case errors.Is(err, redisstore.ErrShardMismatch), errors.Is(err, redisstore.ErrClusterNode):
		return fmt.Errorf("open redis store: %w", err)
	default:
		a.m.redisErrs.Inc()
		a.setRedisUp(false, err)
		a.noteWrite(err) // a Redis that answers but refuses writes (OOM) says why in /readyz
		a.log.Warn("redis store not open yet; journaling schedules and retrying", "error", err)
		return nil
	}
}

// Run opens the store if New could not, then pings Redis until ctx ends.
func (k *storeKeeper) Run(ctx context.Context) error {
	a := k.app
	bo := retry.Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second, NoJitter: true}
	for a.store.Load() == nil {
		if !retry.Sleep(ctx, bo.Next()) {
			return nil
		}
		if err := k.tryOpen(ctx); err != nil {
			a.log.Error("cannot open the redis store", "error", err)
			return err
		}
	}
	st := a.store.Load()
	t := time.NewTicker(pingInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		octx, cancel := a.opContext(ctx)
		err := st.Ping(octx)
		cancel()
		if err != nil && ctx.Err() != nil {
			return nil
		}
		a.noteRedis(err)
	}
}
