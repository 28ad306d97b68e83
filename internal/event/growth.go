package event

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/event/leader"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/retry"
	"github.com/delayq/delayq/internal/shardmap"
)

// growth follows the namespace's shard map and moves tasks out of the old
// shards this process leads while the map grows.
//
// follow keeps the store, the Redis mirror and the leader manager on the
// newest map from etcd (creating the map from the store's when the
// namespace has none). moveOut runs beside each shard's poller, under the
// same leadership: when the map migrates and the shard is an old one, it
// stamps the shard, moves every task that belongs elsewhere bucket by
// bucket (fenced by the shard's token), repeats until a pass finds none
// left (tasks in flight move once finished), and marks the shard done in
// etcd; the last old shard done settles the map. A leader that dies
// midway leaves the rest to the shard's next leader, which starts over
// from bucket 0 (moves are idempotent; finished buckets cost one HKEYS).
type growth struct {
	a       *App
	me      shardmap.Etcd // the namespace's map in etcd
	mu      sync.Mutex
	changed chan struct{} // closed and replaced at every map change
	moved   prometheus.Counter
	passes  prometheus.Counter
}

func newGrowth(a *App) *growth {
	g := &growth{a: a, changed: make(chan struct{}), me: shardmap.Etcd{Client: a.etcd, Namespace: a.cfg.Namespace}}
	g.moved = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: admin.Namespace, Name: "event_tasks_moved_total",
		Help: "Tasks this process moved to their new shard while the shard map grew.",
	})
	g.passes = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: admin.Namespace, Name: "event_move_passes_total",
		Help: "Passes over an old shard's buckets while the shard map grew.",
	})
	a.reg.MustRegister(g.moved, g.passes)
	return g
}

// wait returns a channel closed at the next map change.
func (g *growth) wait() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.changed
}

func (g *growth) notify() {
	g.mu.Lock()
	close(g.changed)
	g.changed = make(chan struct{})
	g.mu.Unlock()
}

// follow applies every map etcd holds until ctx ends.
func (g *growth) follow(ctx context.Context) {
	back := retry.Backoff{Min: 200 * time.Millisecond, Max: 5 * time.Second}
	for ctx.Err() == nil {
		m, err := g.me.Ensure(ctx, g.a.store.Map())
		if err == nil {
			g.apply(ctx, m)
			break
		}
		g.a.log.Warn("shard map", "err", err)
		if !retry.Sleep(ctx, back.Next()) {
			return
		}
	}
	g.me.Watch(ctx, func(m shardmap.Map) { g.apply(ctx, m) },
		func(err error) { g.a.log.Warn("watch shard map", "err", err) })
}

// apply adopts m: the Redis mirror (repeated by every process, so that a
// crash of the process that grew the map between etcd and Redis heals),
// the store, the leader manager.
func (g *growth) apply(ctx context.Context, m shardmap.Map) {
	if err := g.a.store.PublishMap(ctx, m); err != nil {
		g.a.log.Warn("mirror shard map in redis", "err", err)
		g.a.store.SetMap(m)
	}
	cur := g.a.store.Map()
	g.a.mgr.SetShards(cur.Count)
	g.a.log.Info("shard map", "count", cur.Count, "previous", cur.Previous, "state", cur.State, "epoch", cur.Epoch)
	g.notify()
}

// moveOut is the mover of one led shard; it returns when ctx ends (the
// lead ended) or the shard is given back.
func (g *growth) moveOut(ctx context.Context, l leader.Lead) {
	var doneEpoch int64 = -1
	back := retry.Backoff{Min: 500 * time.Millisecond, Max: 5 * time.Second}
	for {
		changed := g.wait()
		m := g.a.store.Map()
		if m.Migrating() && l.Shard < m.Previous && m.Epoch != doneEpoch {
			err := g.moveShard(ctx, l, m)
			switch {
			case err == nil:
				doneEpoch = m.Epoch
				back.Reset()
			case ctx.Err() != nil || errors.Is(err, errGivenBack):
				return
			default:
				g.a.log.Warn("moving tasks to new shards", "shard", l.Shard, "err", err)
				select {
				case <-ctx.Done():
					return
				case <-l.Stop:
					return
				case <-time.After(back.Next()):
				}
				continue
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-l.Stop:
			return
		case <-changed:
		}
	}
}

var errGivenBack = errors.New("shard given back")

// moveScanBatch is how many buckets a mover lists in one round trip.
const moveScanBatch = 32

// moveShard moves every task of old shard l.Shard that belongs elsewhere
// under m, then marks the shard done.
func (g *growth) moveShard(ctx context.Context, l leader.Lead, m shardmap.Map) error {
	st := g.a.store
	o := l.Shard
	// No process routing by the previous map may write here any more
	// (usually stamped already by whoever grew the map).
	if err := st.StampShards(ctx, m, []int{o}); err != nil {
		return err
	}
	// progress starts from an estimate, before the first move counts
	est, err := st.EstimateForeign(ctx, m, o)
	if err != nil {
		return err
	}
	if err := st.SetGrowProgress(ctx, m, o, est); err != nil {
		return err
	}
	start := time.Now()
	var total int
	// the first pass visits every bucket; a later one only the buckets
	// where tasks were in flight (nothing else can bring a task that
	// belongs elsewhere into a stamped shard)
	todo := make([]int, redisstore.BucketsPerShard)
	for b := range todo {
		todo[b] = b
	}
	for pass := 1; len(todo) > 0; pass++ {
		g.passes.Inc()
		var moved, inflight, foreign int
		var again []int
		for i := 0; i < len(todo); i += moveScanBatch {
			select {
			case <-l.Stop:
				return errGivenBack
			default:
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if time.Now().After(l.ValidUntil()) {
				return errors.New("etcd session may have expired: not moving")
			}
			batch := todo[i:min(i+moveScanBatch, len(todo))]
			rs, err := st.MoveBuckets(ctx, m, o, batch, l.Token)
			if err != nil {
				return err
			}
			for j, r := range rs {
				moved += r.Moved
				inflight += r.InFlight
				foreign += r.Foreign
				g.moved.Add(float64(r.Moved))
				if r.InFlight > 0 || r.Moved+r.InFlight < r.Foreign {
					again = append(again, batch[j])
				}
			}
			rem := int64(inflight)
			if pass == 1 {
				// the rest of the shard, estimated from what this pass saw
				seen := i + len(batch)
				rem += int64(foreign) * int64(len(todo)-seen) / int64(seen)
			}
			_ = st.SetGrowProgress(ctx, m, o, rem)
		}
		total += moved
		todo = again
		if len(todo) == 0 {
			break
		}
		// tasks in flight move once their workers finish them
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-l.Stop:
			return errGivenBack
		case <-time.After(200 * time.Millisecond):
		}
	}
	if err := st.SetGrowProgress(ctx, m, o, 0); err != nil {
		return err
	}
	settled, err := g.me.MarkDone(ctx, m, o)
	if err != nil {
		return err
	}
	g.a.log.Info("shard moved out", "shard", o, "moved", total, "took", time.Since(start).Round(time.Millisecond), "settled_map", settled)
	if settled {
		if err := st.PublishMap(ctx, m.Settled()); err != nil {
			g.a.log.Warn("mirror settled shard map", "err", err)
		}
	}
	return nil
}
