package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/retry"
)

// pingInterval is how often the keeper pings Redis once the store is open,
// so that delayq_redis_up is right without traffic.
const pingInterval = time.Second

// storeKeeper opens the Redis store and then watches Redis: a ping every
// pingInterval (on a cluster, of every master: Redis is up while any
// answers) and, on a cluster, a probe of the shards known down every
// shardProbeInterval (shardhealth.go).
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
	core *core
}

// tryOpen makes one attempt. It returns an error only for a fatal cause.
func (k *storeKeeper) tryOpen(ctx context.Context) error {
	a := k.core
	octx, cancel := a.opContext(ctx)
	defer cancel()
	st, err := redisstore.New(octx, a.rdb, redisstore.Options{
		Namespace: a.cfg.Namespace, Shards: a.cfg.Shards, Retention: a.cfg.Retention,
		ReplicaAcks: a.cfg.RedisReplicaAcks, AckTimeout: a.cfg.RedisAckTimeout, WaitAOF: a.cfg.RedisWaitAOF,
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
		if advice := st.ReplicaAdvice(octx); advice != "" {
			a.log.Warn(advice)
		}
		if advice := st.PersistenceAdvice(octx); advice != "" {
			a.log.Warn(advice)
		}
		a.redisUp.Store(true)
		a.noteWrite(nil) // New wrote the namespace's meta: Redis takes writes
		a.wake()
		return nil
	case errors.Is(err, redisstore.ErrShardMismatch), errors.Is(err, redisstore.ErrClusterNode), errors.Is(err, redisstore.ErrUnsupported):
		return fmt.Errorf("open redis store: %w", err)
	default:
		a.m.redisErrs.Inc()
		a.setRedisUp(false, err)
		a.noteWrite(err) // a Redis that answers but refuses writes (OOM) says why in /readyz
		a.log.Warn("redis store not open yet; journaling schedules and retrying", "error", err)
		return nil
	}
}

// Run opens the store if New could not, then watches Redis until ctx ends.
func (k *storeKeeper) Run(ctx context.Context) error {
	a := k.core
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
	t := time.NewTicker(shardProbeInterval)
	defer t.Stop()
	var pinged time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if a.cluster {
			a.probeShards(ctx, st)
		}
		if time.Since(pinged) < pingInterval {
			continue
		}
		pinged = time.Now()
		err := k.ping(ctx, st)
		if err != nil && ctx.Err() != nil {
			return nil
		}
		a.noteRedis(err)
	}
}

// ping checks that Redis answers: the server, or on a cluster any master
// (one master down is a matter of its shards).
func (k *storeKeeper) ping(ctx context.Context, st *redisstore.Store) error {
	octx, cancel := k.core.opContext(ctx)
	defer cancel()
	cc, ok := k.core.rdb.(*redis.ClusterClient)
	if !ok {
		return st.Ping(octx)
	}
	var (
		mu       sync.Mutex
		answered int
		failed   error
	)
	err := cc.ForEachMaster(octx, func(ctx context.Context, c *redis.Client) error {
		err := c.Ping(ctx).Err()
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			failed = err
		} else {
			answered++
		}
		return nil
	})
	switch {
	case err != nil:
		return fmt.Errorf("cluster ping: %w", err)
	case answered == 0 && failed != nil:
		return fmt.Errorf("cluster ping: no master answers: %w", failed)
	}
	return nil
}
