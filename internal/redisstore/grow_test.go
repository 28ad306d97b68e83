package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/shardmap"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// Growing the shard map, at the store level: the mover (MoveBucket) runs
// over every old shard while other stores cancel, reschedule, read and
// re-submit the tasks, and one store keeps routing by the old map until
// a stamp refuses it. Run on a plain Redis and on a 3-master Cluster (old
// and new shard keys on different masters).

func TestGrowStandalone(t *testing.T) {
	growSuite(t, testenv.StartRedis(t).Client(t))
}

func TestGrowCluster(t *testing.T) {
	growSuite(t, testenv.StartRedisCluster(t).Client(t))
}

// grow publishes m grown to n shards and stamps the old shards, as the
// daemon's PUT /v1/shards does after etcd accepted it.
func grow(t *testing.T, s *Store, n int) shardmap.Map {
	t.Helper()
	m := s.Map().Grown(n)
	if err := s.PublishMap(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	old := make([]int, m.Previous)
	for i := range old {
		old[i] = i
	}
	if err := s.StampShards(t.Context(), m, old); err != nil {
		t.Fatal(err)
	}
	return m
}

// moveAll runs the mover over every old shard until nothing is left to
// move; it returns how many tasks it moved.
func moveAll(t *testing.T, s *Store, m shardmap.Map, token int64) int {
	t.Helper()
	total := 0
	for o := range m.Previous {
		for pass := 0; ; pass++ {
			if pass == 50 {
				t.Fatalf("shard %d: tasks still in flight after 50 passes", o)
			}
			var foreign, moved int
			for b := range BucketsPerShard {
				r, err := s.MoveBucket(t.Context(), m, o, b, token)
				if err != nil {
					t.Fatalf("move bucket %d of shard %d: %v", b, o, err)
				}
				foreign += r.Foreign
				moved += r.Moved
			}
			total += moved
			if foreign == moved {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return total
}

// where lists the shards holding a record of id (moving records included).
func where(t *testing.T, s *Store, id string) []int {
	t.Helper()
	var out []int
	for sh := range s.Map().Count {
		ok, err := s.rdb.HExists(t.Context(), s.k.bucket(sh, id), id).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			out = append(out, sh)
		}
	}
	return out
}

// fired20 makes a one-shard store with 20 tasks (ids prefix-0..19) due a
// second ago, and takes them all in one take.
func fired20(t *testing.T, rdb redis.UniversalClient, prefix string) (*Store, []string, Taken) {
	t.Helper()
	s := newStore(t, rdb, Options{Shards: 1})
	now := redisNow(t, s).Truncate(time.Millisecond)
	ids := make([]string, 20)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d", prefix, i)
		schedule1(t, s, mk(ids[i], now.Add(-time.Second)))
	}
	tk, err := s.Take(t.Context(), 0, 1, 100, time.Minute)
	if err != nil || len(tk.Tasks) != 20 {
		t.Fatalf("take: %d tasks, %v", len(tk.Tasks), err)
	}
	return s, ids, tk
}

func growSuite(t *testing.T, rdb redis.UniversalClient) {
	t.Run("MoveUnderConcurrentOperations", func(t *testing.T) {
		t.Parallel()
		s := newStore(t, rdb, Options{Shards: 4})
		ctx := t.Context()
		now := redisNow(t, s).Truncate(time.Millisecond)
		const n = 2000
		ids := make([]string, n)
		subs := make([]Submit, n)
		for i := range n {
			ids[i] = fmt.Sprintf("g-%d", i)
			subs[i] = Submit{Task: mk(ids[i], now.Add(time.Hour+time.Duration(i)*time.Millisecond))}
		}
		if _, err := s.Schedule(ctx, subs); err != nil {
			t.Fatal(err)
		}
		// a few finished and dead ones, which must stay readable after the move
		for i := 0; i < n; i += 100 {
			if err := s.Cancel(ctx, ids[i+99]); err != nil {
				t.Fatal(err)
			}
		}
		// another process, still routing by 4 shards
		stale, err := New(ctx, rdb, Options{Namespace: s.Namespace(), Shards: 4})
		if err != nil {
			t.Fatal(err)
		}
		m := grow(t, s, 16)
		// a third process learns the map as the daemon does from etcd
		peer, err := New(ctx, rdb, Options{Namespace: s.Namespace(), Shards: 4})
		if err != nil {
			t.Fatal(err)
		}
		peer.SetMap(m)

		var wg sync.WaitGroup
		moved := 0
		wg.Go(func() { moved = moveAll(t, s, m, 1) })
		later := now.Add(2 * time.Hour)
		errs := make(chan error, n)
		// cancel every 10th, move every 10th+1, through both processes
		for w := range 2 {
			wg.Go(func() {
				st := []*Store{peer, stale}[w]
				for i := 10 * w; i < n-100; i += 20 {
					if err := st.Cancel(ctx, ids[i]); err != nil {
						errs <- fmt.Errorf("cancel %s: %w", ids[i], err)
					}
					if _, err := st.Reschedule(ctx, ids[i+1], later, 0, false); err != nil {
						errs <- fmt.Errorf("reschedule %s: %w", ids[i+1], err)
					}
				}
			})
		}
		// reads and identical re-submits see every task at every moment
		wg.Go(func() {
			for i := range n {
				if _, err := stale.Get(ctx, ids[i]); err != nil {
					errs <- fmt.Errorf("get %s: %w", ids[i], err)
				}
			}
		})
		wg.Go(func() {
			for i := 2; i < n; i += 10 {
				r, err := peer.Schedule(ctx, []Submit{subs[i]})
				if err != nil || (r[0].Outcome != Unchanged) {
					errs <- fmt.Errorf("re-submit %s: %+v: %w", ids[i], r[0], err)
				}
			}
		})
		// new tasks, by the stale process too: they land on the new map
		wg.Go(func() {
			for i := range 200 {
				st := []*Store{peer, stale}[i%2]
				id := fmt.Sprintf("new-%d", i)
				r, err := st.Schedule(ctx, []Submit{{Task: mk(id, now.Add(time.Hour))}})
				if err != nil || r[0].Outcome != Created || r[0].Shard != m.Shard(id) {
					errs <- fmt.Errorf("new %s: %+v (want shard %d): %w", id, r[0], m.Shard(id), err)
				}
			}
		})
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		// a second pass moves whatever the first one met in flight or new
		moved += moveAll(t, s, m, 1)
		if moved == 0 {
			t.Fatal("nothing moved")
		}
		if stale.Map().Count != 16 {
			t.Errorf("the stale process still routes by %d shards", stale.Map().Count)
		}

		// every task lives exactly once, on its shard under the new map
		for i := range n {
			if w := where(t, s, ids[i]); len(w) != 1 || w[0] != m.Shard(ids[i]) {
				t.Fatalf("%s lives on shards %v, want [%d]", ids[i], w, m.Shard(ids[i]))
			}
			tk, err := peer.Get(ctx, ids[i])
			if err != nil {
				t.Fatal(err)
			}
			want := task.StateScheduled
			if i%100 == 99 || (i < n-100 && i%10 == 0) {
				want = task.StateCancelled
			}
			if tk.State != want || tk.Shard != m.Shard(ids[i]) {
				t.Fatalf("%s: %s on shard %d, want %s on %d", ids[i], tk.State, tk.Shard, want, m.Shard(ids[i]))
			}
			if i < n-100 && i%10 == 1 && !tk.DueAt.Equal(later) {
				t.Fatalf("%s: due %v, want the rescheduled %v", ids[i], tk.DueAt, later)
			}
		}
		// the due sets hold exactly the waiting tasks, each once
		var waiting int64
		for sh := range 16 {
			c, err := s.rdb.ZCard(ctx, s.k.due(sh)).Result()
			if err != nil {
				t.Fatal(err)
			}
			waiting += c
		}
		var wantWaiting int64 = 200 // the new ones
		for i := range n {
			if i%100 != 99 && (i >= n-100 || i%10 != 0) {
				wantWaiting++
			}
		}
		if waiting != wantWaiting {
			t.Fatalf("due sets hold %d tasks, want %d", waiting, wantWaiting)
		}
		pr, err := s.GrowProgress(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		if pr.Remaining != 0 && pr.Moved == 0 {
			t.Fatalf("progress %+v", pr)
		}
		t.Logf("moved %d tasks of %d from 4 to 16 shards under concurrent operations", moved, n)
	})

	t.Run("ByIDAfterAWholeMove", func(t *testing.T) {
		// a by-id operation locates a task on its old shard, and the whole
		// move (start, in, done) happens before its script runs there: the
		// script finds nothing, and the operation locates the task again
		// on its new shard instead of answering "not found"
		t.Parallel()
		s := newStore(t, rdb, Options{Shards: 4})
		ctx := t.Context()
		now := redisNow(t, s).Truncate(time.Millisecond)
		var subs []Submit
		for i := range 64 {
			subs = append(subs, Submit{Task: mk(fmt.Sprintf("w-%d", i), now.Add(time.Hour))})
		}
		if _, err := s.Schedule(ctx, subs); err != nil {
			t.Fatal(err)
		}
		m := grow(t, s, 16)
		var id string
		for _, sub := range subs {
			if o, moving := m.Old(sub.Task.ID); moving && o != m.Shard(sub.Task.ID) {
				id = sub.Task.ID
				break
			}
		}
		if id == "" {
			t.Fatal("no task changes shard")
		}
		later := now.Add(2 * time.Hour)
		var shards []int
		v, err := s.byID(ctx, id, func(m shardmap.Map, sh int) (any, error) {
			if len(shards) == 0 {
				moveAll(t, s, m, 1)
			}
			shards = append(shards, sh)
			return s.run(ctx, rescheduleScript, []string{s.k.due(sh), s.k.bucket(sh, id), s.k.stamp(sh), s.k.done(sh), s.k.runs(sh)},
				id, dueArg(later, 0, false), s.k.wake, sh, stamp(m))
		})
		if err != nil {
			t.Fatal(err)
		}
		if due, err := codeResult(id, v); err != nil || !due.Equal(later) {
			t.Fatalf("reschedule after the whole move: %v %v (calls on shards %v)", due, err, shards)
		}
		o, _ := m.Old(id)
		if !slices.Equal(shards, []int{o, m.Shard(id)}) {
			t.Fatalf("calls on shards %v, want the old shard %d then the new one %d", shards, o, m.Shard(id))
		}
		if tk, err := s.Get(ctx, id); err != nil || !tk.DueAt.Equal(later) || tk.Shard != m.Shard(id) {
			t.Fatalf("after: %+v %v", tk, err)
		}
	})
	t.Run("HalfMoveFinishedByWhoeverMeetsIt", func(t *testing.T) {
		t.Parallel()
		s := newStore(t, rdb, Options{Shards: 2})
		ctx := t.Context()
		now := redisNow(t, s).Truncate(time.Millisecond)
		m := s.Map().Grown(8)
		// ids that leave shard 0 for another shard
		var ids []string
		for i := 0; len(ids) < 30; i++ {
			id := fmt.Sprintf("h-%d", i)
			if o, moving := m.Old(id); moving && o == 0 {
				ids = append(ids, id)
			}
		}
		for _, id := range ids {
			schedule1(t, s, mk(id, now.Add(time.Hour)))
		}
		grow(t, s, 8)
		// a mover that died after movestart: every record is "moving"
		for _, id := range ids {
			v, err := s.run(ctx, moveStartScript, []string{s.k.due(0), s.k.done(0), s.k.dead(0), s.k.errs(0), s.k.fence(0), s.k.runs(0), s.k.receipts(0), s.k.bucket(0, id)}, 7, id)
			if err != nil {
				t.Fatal(err)
			}
			if a := v.([]any); a[0].(int64) != 1 {
				t.Fatalf("movestart %s: %v", id, v)
			}
		}
		// a deposed leader's mover is fenced
		if _, err := s.MoveBucket(ctx, m, 0, bucketOf(ids[0]), 6); !errors.Is(err, ErrFenced) {
			t.Fatalf("a move with an older token: %v, want ErrFenced", err)
		}
		// no take of the old shard fires them
		tk, err := s.Take(ctx, 0, 7, 100, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(tk.Tasks) != 0 {
			t.Fatalf("a take of the old shard fired %d moving tasks", len(tk.Tasks))
		}
		// reads see them as they will be; every op finishes the move
		for i, id := range ids {
			got, err := s.Get(ctx, id)
			if err != nil || got.State != task.StateScheduled {
				t.Fatalf("get %s: %+v %v", id, got, err)
			}
			switch i % 3 {
			case 0:
				err = s.Cancel(ctx, id)
			case 1:
				_, err = s.Reschedule(ctx, id, now.Add(2*time.Hour), 0, false)
			case 2:
				var r []Result
				r, err = s.Schedule(ctx, []Submit{{Task: mk(id, now.Add(time.Hour))}})
				if err == nil && r[0].Outcome != Unchanged {
					err = fmt.Errorf("re-submit: %+v", r[0])
				}
			}
			if err != nil {
				t.Fatalf("%s: %v", id, err)
			}
			if w := where(t, s, id); len(w) != 1 || w[0] != m.Shard(id) {
				t.Fatalf("%s lives on %v after the op, want [%d]", id, w, m.Shard(id))
			}
		}
	})

	t.Run("InFlightTasksMoveOnceFinished", func(t *testing.T) {
		t.Parallel()
		s, ids, tk := fired20(t, rdb, "f")
		ctx := t.Context()
		m := grow(t, s, 4)
		var foreign, inflight int
		for b := range BucketsPerShard {
			r, err := s.MoveBucket(ctx, m, 0, b, 1)
			if err != nil {
				t.Fatal(err)
			}
			foreign += r.Foreign
			inflight += r.InFlight
		}
		if foreign == 0 || inflight != foreign {
			t.Fatalf("%d foreign, %d in flight: in-flight tasks must stay", foreign, inflight)
		}
		// the worker finishes on the shard the task was fired from
		for _, x := range tk.Tasks {
			st, err := s.Finish(ctx, Finish{ID: x.ID, Gen: x.Gen, Kind: Succeeded, Shard: 0, ShardSet: true})
			if err != nil || st != task.StateSucceeded {
				t.Fatalf("finish %s on its fired shard: %s %v", x.ID, st, err)
			}
		}
		if moved := moveAll(t, s, m, 1); moved != foreign {
			t.Fatalf("moved %d, want %d", moved, foreign)
		}
		for _, id := range ids {
			got, err := s.Get(ctx, id)
			if err != nil || got.State != task.StateSucceeded || got.Shard != m.Shard(id) {
				t.Fatalf("%s after the move: %+v %v", id, got, err)
			}
		}
	})

	// a success recorded in the done set alone (see lean success in
	// common.lua) moves as a succeeded task, with its done-set entry
	t.Run("LeanSuccessesMoveAsSucceeded", func(t *testing.T) {
		t.Parallel()
		s, ids, tk := fired20(t, rdb, "l")
		ctx := t.Context()
		cs := make([]Claim, len(tk.Tasks))
		fs := make([]Finish, len(tk.Tasks))
		for i, x := range tk.Tasks {
			cs[i] = Claim{ID: x.ID, Gen: x.Gen, TTL: time.Minute, Owner: "w:" + x.ID, Shard: 0, ShardSet: true}
			fs[i] = Finish{ID: x.ID, Gen: x.Gen, Kind: Succeeded, Owner: "w:" + x.ID, Shard: 0, ShardSet: true}
		}
		if _, err := s.ClaimMany(ctx, cs); err != nil {
			t.Fatal(err)
		}
		if _, err := s.FinishMany(ctx, fs); err != nil {
			t.Fatal(err)
		}
		m := grow(t, s, 4)
		foreign := 0
		for _, id := range ids {
			if m.Shard(id) != 0 {
				foreign++
			}
		}
		if moved := moveAll(t, s, m, 1); moved != foreign || foreign == 0 {
			t.Fatalf("moved %d, want %d", moved, foreign)
		}
		for _, id := range ids {
			got, err := s.Get(ctx, id)
			if err != nil || got.State != task.StateSucceeded || got.Shard != m.Shard(id) {
				t.Fatalf("%s after the move: %+v %v", id, got, err)
			}
			if w := where(t, s, id); len(w) != 1 || w[0] != m.Shard(id) {
				t.Fatalf("%s is on shards %v", id, w)
			}
		}
		// nothing fires again on the new shards
		for sh := range m.Count {
			if tk := mustTake(t, s, sh, 1); len(tk.Tasks) != 0 {
				t.Fatalf("shard %d fired %d tasks again", sh, len(tk.Tasks))
			}
		}
		// a duplicate of a copy fired from shard 0, claimed after the
		// move, is told finished wherever the task lives now (not an
		// unknown id, which a worker dead-letters)
		for i := range cs {
			cs[i].Owner = "dup:" + cs[i].ID
		}
		res, err := s.ClaimMany(ctx, cs)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			if r.Code != ClaimFinished || r.State != task.StateSucceeded {
				t.Fatalf("duplicate copy of %s (now on shard %d) claimed after the move: %+v, want finished", cs[i].ID, m.Shard(cs[i].ID), r)
			}
		}
	})

	t.Run("DueTasksFireOnceWhileMoving", func(t *testing.T) {
		t.Parallel()
		s := newStore(t, rdb, Options{Shards: 2})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		now := redisNow(t, s).Truncate(time.Millisecond)
		const n = 3000
		subs := make([]Submit, n)
		due := map[string]time.Time{}
		for i := range n {
			id := fmt.Sprintf("d-%d", i)
			d := now.Add(time.Duration(i%1500) * time.Millisecond)
			subs[i] = Submit{Task: mk(id, d)}
			due[id] = d
		}
		if _, err := s.Schedule(ctx, subs); err != nil {
			t.Fatal(err)
		}
		m := grow(t, s, 8)
		var mu sync.Mutex
		fired := map[string]int{}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for sh := range 8 {
			wg.Go(func() {
				for {
					tk, err := s.Take(ctx, sh, 1, 500, time.Minute)
					if err != nil {
						if ctx.Err() == nil {
							t.Error(err)
						}
						return
					}
					// the worker's part: finish each on the shard it fired from
					fs := make([]Finish, len(tk.Tasks))
					for i, x := range tk.Tasks {
						fs[i] = Finish{ID: x.ID, Gen: x.Gen, Kind: Succeeded, Shard: sh, ShardSet: true}
					}
					if len(fs) > 0 {
						if _, err := s.FinishMany(ctx, fs); err != nil && ctx.Err() == nil {
							t.Error(err)
						}
					}
					mu.Lock()
					for _, x := range tk.Tasks {
						fired[x.ID]++
						if tk.Now.Before(due[x.ID]) {
							t.Errorf("%s fired at %v, before its due time %v", x.ID, tk.Now, due[x.ID])
						}
					}
					mu.Unlock()
					if len(tk.Tasks) == 0 {
						select {
						case <-stop:
							return
						case <-time.After(5 * time.Millisecond):
						}
					}
				}
			})
		}
		defer func() { cancel(); wg.Wait() }()
		moveAll(t, s, m, 1)
		testenv.WaitFor(t, 10*time.Second, "every task fired", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(fired) == n
		})
		close(stop)
		wg.Wait()
		for id, c := range fired {
			if c != 1 {
				t.Errorf("%s fired %d times", id, c)
			}
		}
	})
}
