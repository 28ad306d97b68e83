package redisstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// On a single redis-server, the tasks of one Schedule go out as few script
// calls as maxPerCall allows, whatever their shards: each call holds one
// section per shard. Every result names its own shard, and the records
// are where a Get looks for them.
func TestScheduleSectionsShareACall(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	s := newStore(t, rdb, Options{Shards: 16})
	ctx := t.Context()
	now := redisNow(t, s).Truncate(time.Millisecond)
	// load the script first: a NOSCRIPT answer would count a call twice
	if _, err := s.Schedule(ctx, []Submit{{Task: mk("warm-up", now.Add(time.Hour))}}); err != nil {
		t.Fatal(err)
	}

	for _, n := range []int{64, 450} {
		subs := make([]Submit, n)
		shards := map[int]bool{}
		for i := range subs {
			id := fmt.Sprintf("sec-%d-%d", n, i)
			shards[s.Shard(id)] = true
			if i%2 == 0 {
				subs[i] = Submit{Task: mk(id, now.Add(time.Hour+time.Duration(i)*time.Millisecond))}
			} else {
				subs[i] = Submit{Task: mk(id, time.Time{}), Delay: time.Hour, Relative: true}
			}
		}
		if len(shards) != 16 {
			t.Fatalf("%d tasks reach %d of 16 shards; the test wants all", n, len(shards))
		}
		var res []Result
		var err error
		calls := scriptCalls(t, rdb, func() { res, err = s.Schedule(ctx, subs) })
		if err != nil {
			t.Fatal(err)
		}
		if got, want := calls, int64((n+maxPerCall-1)/maxPerCall); got != want {
			t.Errorf("%d tasks of 16 shards: %d script calls, want %d", n, got, want)
		}
		for i, r := range res {
			id := subs[i].Task.ID
			if r.ID != id || r.Outcome != Created || r.Shard != s.Shard(id) || r.Err != nil {
				t.Fatalf("task %d: %+v, want created on shard %d", i, r, s.Shard(id))
			}
			got, err := s.Get(ctx, id)
			if err != nil || got.State != task.StateScheduled || !got.DueAt.Equal(r.DueAt) {
				t.Fatalf("get %s: %+v, %v; want scheduled at %v", id, got, err, r.DueAt)
			}
		}
		// the same again: unchanged, still one call per maxPerCall tasks
		calls = scriptCalls(t, rdb, func() { res, err = s.Schedule(ctx, subs) })
		if err != nil {
			t.Fatal(err)
		}
		if got, want := calls, int64((n+maxPerCall-1)/maxPerCall); got != want {
			t.Errorf("re-submit of %d tasks: %d script calls, want %d", n, got, want)
		}
		for i, r := range res {
			if r.Outcome != Unchanged || r.Shard != s.Shard(subs[i].Task.ID) {
				t.Fatalf("re-submit %d: %+v, want unchanged", i, r)
			}
		}
	}
}

// A call of several sections checks every section's map before it writes:
// when one shard's stamp refuses the caller's map, no section of the call
// is written (the caller routes all of them again by the newer map).
func TestScheduleStaleSectionWritesNothing(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	s := newStore(t, rdb, Options{Shards: 4})
	ctx := t.Context()
	now := redisNow(t, s).Truncate(time.Millisecond)
	// two ids on different shards of 4
	var a, b string
	for i := 0; b == ""; i++ {
		id := fmt.Sprintf("stale-%d", i)
		switch {
		case a == "":
			a = id
		case s.Shard(id) != s.Shard(a):
			b = id
		}
	}
	old := s.Map()
	grown := old.Grown(8)
	// only b's shard has seen the growth
	if err := s.StampShards(ctx, grown, []int{s.Shard(b)}); err != nil {
		t.Fatal(err)
	}
	subs := []Submit{{Task: mk(a, now.Add(time.Hour))}, {Task: mk(b, now.Add(time.Hour))}}
	calls := s.scheduleCalls(old, subs, []int{0, 1}, map[int]int{})
	if len(calls) != 1 {
		t.Fatalf("%d calls for two shards of one redis-server, want 1", len(calls))
	}
	s.execCalls(ctx, scheduleScript, calls)
	if _, stale := asStaleMap(calls[0].err); !stale {
		t.Fatalf("call with a stale section: %v, want DQSTALEMAP", calls[0].err)
	}
	if ok, err := rdb.HExists(ctx, s.k.bucket(s.Shard(a), a), a).Result(); err != nil || ok {
		t.Fatalf("task %s of the refused call's first section is stored (%v, %v)", a, ok, err)
	}
	// Schedule adopts the stamped map and routes both again
	res, err := s.Schedule(ctx, subs)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Outcome != Created || r.Err != nil {
			t.Fatalf("after the refusal: %+v, want created", r)
		}
	}
	if got := s.Map(); got.Count != 8 {
		t.Fatalf("store routes by %d shards after the refusal, want 8", got.Count)
	}
	for _, id := range []string{a, b} {
		if _, err := s.Get(ctx, id); err != nil {
			t.Fatalf("get %s: %v", id, err)
		}
	}
}

// On a Redis Cluster a script's keys share one slot: each call holds one
// shard.
func TestScheduleClusterCallsHoldOneShard(t *testing.T) {
	var rdb redis.UniversalClient = testenv.StartRedisCluster(t).Client(t)
	s := newStore(t, rdb, Options{Shards: 16})
	now := redisNow(t, s).Truncate(time.Millisecond)
	subs := make([]Submit, 64)
	pending := make([]int, len(subs))
	for i := range subs {
		subs[i] = Submit{Task: mk(fmt.Sprintf("cl-%d", i), now.Add(time.Hour))}
		pending[i] = i
	}
	calls := s.scheduleCalls(s.Map(), subs, pending, map[int]int{})
	seen := map[int]bool{}
	for _, c := range calls {
		if seen[c.shard] {
			t.Fatalf("shard %d in two calls of one schedule", c.shard)
		}
		seen[c.shard] = true
		for j, sh := range c.shards {
			if sh != c.shard {
				t.Fatalf("a call of shard %d holds task %s of shard %d", c.shard, subs[c.idx[j]].Task.ID, sh)
			}
		}
	}
	res, err := s.Schedule(t.Context(), subs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Outcome != Created || r.Shard != s.Shard(subs[i].Task.ID) {
			t.Fatalf("task %d: %+v", i, r)
		}
	}
}
