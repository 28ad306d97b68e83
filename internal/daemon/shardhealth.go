package daemon

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/shardmap"
)

// Shards known down (Redis Cluster).
//
// On a Redis Cluster each shard lives on one master, and a master's outage
// fails only the writes of its shards (the store makes one call per
// shard). A shard whose write failed unavailable (redisstore.IsUnavailable)
// is marked down: schedules of its ids are journaled without trying it,
// so that no request waits for a dead master's timeout, and the
// compensator leaves its entries in place. The store keeper probes each
// marked shard every shardProbeInterval with a read of that shard; an
// answer, or any successful write of the shard, clears the mark and wakes
// the compensator. A mark also lapses after shardDownTTL without a new
// failure, in case nothing clears it.
//
// A single redis-server (or one address) is one failure domain: there the
// daemon does not mark shards, and Redis being down (redisUp false)
// journals every schedule.

// shardProbeInterval is how often the store keeper probes marked shards.
const shardProbeInterval = 250 * time.Millisecond

// shardHealth holds the marks. Its methods are safe for concurrent use.
type shardHealth struct {
	until  [shardmap.MaxShards]atomic.Int64 // unix ms until which the shard counts as down; 0: not marked
	since  [shardmap.MaxShards]atomic.Int64 // unix ms of the failure that marked it
	marked atomic.Int32                     // shards whose until is not 0
}

// down reports whether shard sh is marked and its mark has not lapsed.
func (h *shardHealth) down(sh int, now time.Time) bool {
	return h.until[sh].Load() > now.UnixMilli()
}

// downFor reports whether a schedule of id would go to a shard known down:
// its shard, or while the map migrates its old shard, which the store
// tries first.
func (h *shardHealth) downFor(m shardmap.Map, id string, now time.Time) bool {
	if h.marked.Load() == 0 {
		return false
	}
	if o, moving := m.Old(id); moving && h.down(o, now) {
		return true
	}
	return h.down(m.Shard(id), now)
}

// mark marks sh down until until; first reports that it was not marked.
func (h *shardHealth) mark(sh int, now, until time.Time) (first bool) {
	if h.until[sh].Swap(until.UnixMilli()) != 0 {
		return false
	}
	h.since[sh].Store(now.UnixMilli())
	h.marked.Add(1)
	return true
}

// clear removes the mark of sh and reports whether there was one.
func (h *shardHealth) clear(sh int) bool {
	if h.marked.Load() == 0 || h.until[sh].Swap(0) == 0 {
		return false
	}
	h.marked.Add(-1)
	return true
}

// list returns the shards below n that are down now, ascending.
func (h *shardHealth) list(n int, now time.Time) []int {
	if h.marked.Load() == 0 {
		return nil
	}
	var out []int
	for sh := range min(n, shardmap.MaxShards) {
		if h.down(sh, now) {
			out = append(out, sh)
		}
	}
	return out
}

// routeShard is the shard a schedule of id is sent to first: its old
// shard while the map migrates and the id moves, else its shard.
func routeShard(m shardmap.Map, id string) int {
	if o, moving := m.Old(id); moving {
		return o
	}
	return m.Shard(id)
}

// shardDownTTL is how long a mark lasts without a new failure.
func (co *core) shardDownTTL() time.Duration {
	return max(10*time.Second, 2*co.cfg.RedisTimeout)
}

// shardsDown lists the shards known down now (none unless on a cluster).
func (co *core) shardsDown() []int {
	st := co.store.Load()
	if st == nil {
		return nil
	}
	return co.down.list(st.Shards(), co.now())
}

// markShard records an unavailable answer of shard sh.
func (co *core) markShard(sh int, err error) {
	reason, what := classifyRedis(err)
	if redisAnswered(err) {
		co.m.refusals.WithLabelValues(reason).Inc()
	}
	now := co.now()
	if co.down.mark(sh, now, now.Add(co.shardDownTTL())) {
		co.log.Warn("redis shard down; its schedules go to the journal", "shard", sh, "reason", what, "error", err)
	}
}

// clearShard records an answer of shard sh.
func (co *core) clearShard(sh int) {
	if co.down.clear(sh) {
		co.log.Info("redis shard answers again; replaying its journal entries", "shard", sh)
		co.wake()
	}
}

// noteResults records what a Schedule call (of the API or a replay) says
// about Redis. On a single server it is the call's error, as for any
// operation. On a cluster it is per shard: an unavailable result marks its
// shard down, any other result clears its shard's mark; one master's
// failure neither makes Redis "down" nor "refusing writes" as a whole.
func (co *core) noteResults(m shardmap.Map, res []redisstore.Result, err error) {
	if errors.Is(err, redisstore.ErrNotReplicated) {
		co.unconfirmed.Warn("redis replicas do not confirm writes in time; the schedules are journaled until they do (DQ_REDIS_REPLICA_ACKS)",
			"error", err)
	}
	if !co.cluster {
		co.noteRedis(err)
		co.noteWrite(err)
		return
	}
	co.noteMisconfig(err)
	if err != nil {
		co.m.redisErrs.Inc()
	}
	var failed map[int]error
	for i := range res {
		// a write its replicas did not confirm ran on a primary that
		// answers: the shard is up (its tasks are journaled all the same)
		if r := &res[i]; r.Err != nil && redisstore.IsUnavailable(r.Err) && !errors.Is(r.Err, redisstore.ErrNotReplicated) {
			if failed == nil {
				failed = make(map[int]error)
			}
			if sh := routeShard(m, r.ID); failed[sh] == nil {
				failed[sh] = r.Err
			}
		}
	}
	answered := false
	for i := range res {
		r := &res[i]
		if sh := routeShard(m, r.ID); failed[sh] == nil {
			answered = true
			co.clearShard(sh)
		}
	}
	for sh, e := range failed {
		co.markShard(sh, e)
	}
	if answered {
		co.setRedisUp(true, nil)
		co.noteWrite(nil)
	}
}

// probeShards reads each marked shard once, concurrently, and records the
// answers (the store keeper calls it).
func (co *core) probeShards(ctx context.Context, st *redisstore.Store) {
	if co.down.marked.Load() == 0 {
		return
	}
	m := st.Map()
	var wg sync.WaitGroup
	for sh := range min(m.Count, shardmap.MaxShards) {
		if co.down.until[sh].Load() == 0 {
			continue
		}
		wg.Go(func() {
			octx, cancel := co.opContext(ctx)
			defer cancel()
			// a read of three keys of the shard: it reaches the master
			// that serves the shard's slot, as its writes do
			_, err := st.EstimateForeign(octx, m, sh)
			switch {
			case ctx.Err() != nil:
			case err != nil && redisstore.IsUnavailable(err):
				co.markShard(sh, err)
			default:
				co.clearShard(sh)
			}
		})
	}
	wg.Wait()
}
