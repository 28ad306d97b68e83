package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// The suite runs every script against a standalone redis-server and against
// a 3-master Redis Cluster; each test isolates itself by namespace.
func TestStoreStandalone(t *testing.T) {
	r := testenv.StartRedis(t)
	suite(t, r.Client(t))
}

func TestStoreCluster(t *testing.T) {
	c := testenv.StartRedisCluster(t)
	suite(t, c.Client(t))
}

var nsSeq atomic.Int64

// durableSuites holds the clients whose suite runs with durable writes
// (TestStoreReplicated): newStore gives their stores these ack settings.
var durableSuites sync.Map // redis.UniversalClient -> Options

func newStore(t *testing.T, rdb redis.UniversalClient, o Options) *Store {
	t.Helper()
	if b, ok := durableSuites.Load(rdb); ok {
		d := b.(Options)
		o.ReplicaAcks, o.AckTimeout, o.WaitAOF = d.ReplicaAcks, d.AckTimeout, d.WaitAOF
	}
	o.Namespace = fmt.Sprintf("t%d-%s", nsSeq.Add(1), strings.NewReplacer("/", "-", " ", "_").Replace(t.Name()))
	s, err := New(t.Context(), rdb, o)
	if err != nil {
		t.Fatalf("new store: %v", err)
	}
	return s
}

func mk(id string, due time.Time) *task.Task {
	return &task.Task{ID: id, Type: "order.cancel", Payload: []byte(`{"n":1}`), PayloadJSON: true, DueAt: due}
}

func redisNow(t *testing.T, s *Store) time.Time {
	t.Helper()
	tm, err := s.rdb.Time(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

func schedule1(t *testing.T, s *Store, tk *task.Task) Result {
	t.Helper()
	res, err := s.Schedule(t.Context(), []Submit{{Task: tk}})
	if err != nil {
		t.Fatalf("schedule: %v", err)
	}
	return res[0]
}

func mustTake(t *testing.T, s *Store, shard int, token int64) Taken {
	t.Helper()
	tk, err := s.Take(t.Context(), shard, token, 100, time.Minute)
	if err != nil {
		t.Fatalf("take: %v", err)
	}
	return tk
}

func suite(t *testing.T, rdb redis.UniversalClient) {
	t.Run("ScheduleReviveCancelled", func(t *testing.T) {
		t.Parallel()
		s := newStore(t, rdb, Options{})
		ctx := t.Context()
		due := time.Now().Add(time.Hour).Truncate(time.Millisecond).UTC()
		schedule1(t, s, mk("tick@1", due))
		if err := s.Cancel(ctx, "tick@1"); err != nil {
			t.Fatal(err)
		}
		// without Revive a cancelled task stays cancelled
		if r := schedule1(t, s, mk("tick@1", due)); r.Outcome != Unchanged || r.State != task.StateCancelled {
			t.Fatalf("re-submit of a cancelled task: %+v", r)
		}
		res, err := s.Schedule(ctx, []Submit{{Task: mk("tick@1", due), Revive: true}, {Task: mk("tick@2", due), Revive: true}})
		if err != nil || res[0].Outcome != Updated || res[0].State != task.StateScheduled || res[1].Outcome != Created {
			t.Fatalf("revive: %+v %v", res, err)
		}
		got, err := s.Get(ctx, "tick@1")
		if err != nil || got.State != task.StateScheduled || got.Gen != 1 || got.Attempt != 1 || !got.DueAt.Equal(due) {
			t.Fatalf("revived task: %+v %v", got, err)
		}
		sh := s.Map().Shard("tick@1")
		if _, err := s.rdb.ZScore(ctx, s.k.done(sh), "tick@1").Result(); !errors.Is(err, redis.Nil) {
			t.Fatalf("a revived task is still in the done set (its purge would delete it): %v", err)
		}
		if n, err := s.rdb.ZCard(ctx, s.k.due(sh)).Result(); err != nil || n < 1 {
			t.Fatalf("due set: %d %v", n, err)
		}
		// Revive does not touch a waiting task with the same content
		if res, _ := s.Schedule(ctx, []Submit{{Task: mk("tick@1", due), Revive: true}}); res[0].Outcome != Unchanged {
			t.Fatalf("revive of a waiting task: %+v", res[0])
		}
	})
	t.Run("ScheduleIdempotentAndUpsert", func(t *testing.T) {
		t.Parallel()
		s := newStore(t, rdb, Options{})
		due := time.Now().Add(time.Hour).Truncate(time.Millisecond).UTC()
		if r := schedule1(t, s, mk("a", due)); r.Outcome != Created || r.State != task.StateScheduled || !r.DueAt.Equal(due) {
			t.Fatalf("first: %+v", r)
		}
		if r := schedule1(t, s, mk("a", due)); r.Outcome != Unchanged {
			t.Fatalf("identical re-submit: %+v", r)
		}
		later := due.Add(time.Minute)
		if r := schedule1(t, s, mk("a", later)); r.Outcome != Updated || !r.DueAt.Equal(later) {
			t.Fatalf("new due: %+v", r)
		}
		other := mk("a", later)
		other.Payload = []byte(`{"n":2}`)
		if r := schedule1(t, s, other); r.Outcome != Updated {
			t.Fatalf("new payload: %+v", r)
		}
		got, err := s.Get(t.Context(), "a")
		if err != nil || string(got.Payload) != `{"n":2}` || !got.DueAt.Equal(later) || got.Attempt != 1 {
			t.Fatalf("get after upsert: %+v %v", got, err)
		}
		st, _ := s.Stats(t.Context())
		var total int64
		for _, x := range st {
			total += x.Scheduled
		}
		if total != 1 {
			t.Fatalf("one id must be one task, stats say %d", total)
		}
	})

	t.Run("RelativeDueUsesRedisClock", func(t *testing.T) {
		t.Parallel()
		s := newStore(t, rdb, Options{})
		before := redisNow(t, s)
		// a process clock far off must not matter: DueAt is ignored when Relative
		tk := mk("rel", time.Unix(0, 0))
		res, err := s.Schedule(t.Context(), []Submit{{Task: tk, Delay: 90 * time.Second, Relative: true}})
		if err != nil {
			t.Fatal(err)
		}
		after := redisNow(t, s)
		lo, hi := before.Add(90*time.Second).Truncate(time.Millisecond), after.Add(90*time.Second)
		if d := res[0].DueAt; d.Before(lo) || d.After(hi) {
			t.Fatalf("due %v not within Redis TIME+90s [%v, %v]", d, lo, hi)
		}
		// an identical relative re-submit keeps the first due time (idempotent retry)
		res2, _ := s.Schedule(t.Context(), []Submit{{Task: mk("rel", time.Time{}), Delay: 90 * time.Second, Relative: true}})
		if res2[0].Outcome != Unchanged || !res2[0].DueAt.Equal(res[0].DueAt) {
			t.Fatalf("relative re-submit: %+v", res2[0])
		}
	})

	t.Run("BatchMixedOutcomes", func(t *testing.T) {
		t.Parallel()
		s := newStore(t, rdb, Options{})
		due := time.Now().Add(-time.Second) // already due
		schedule1(t, s, mk("fired", due))
		takeAll(t, s, 1)
		var subs []Submit
		for i := range 450 { // more than one script call per shard
			subs = append(subs, Submit{Task: mk(fmt.Sprintf("b%d", i), time.Now().Add(time.Hour))})
		}
		changed := mk("fired", due)
		changed.Payload = []byte(`"other"`)
		subs = append(subs, Submit{Task: changed}, Submit{Task: mk("b0", time.Now().Add(2*time.Hour))})
		res, err := s.Schedule(t.Context(), subs)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 450 {
			if res[i].Outcome != Created || res[i].ID != fmt.Sprintf("b%d", i) || res[i].Shard != s.Shard(res[i].ID) {
				t.Fatalf("result %d: %+v", i, res[i])
			}
		}
		if r := res[450]; r.Outcome != Rejected || !errors.Is(r.Err, ErrConflict) || r.State != task.StateFired {
			t.Fatalf("changed content of a fired task: %+v", r)
		}
		if r := res[451]; r.Outcome != Updated {
			t.Fatalf("same id twice in one batch, second with another due: %+v", r)
		}
	})

	t.Run("RescheduleAndCancelInEveryState", func(t *testing.T) {
		t.Parallel()
		s := newStore(t, rdb, Options{})
		future := time.Now().Add(time.Hour)
		past := time.Now().Add(-time.Second)
		states := map[task.State]string{}
		// scheduled
		schedule1(t, s, mk("sched", future))
		states[task.StateScheduled] = "sched"
		// fired (its take settled, or not yet: both are fired),
		// succeeded, retrying, dead
		for _, id := range []string{"firing", "fired", "succ", "retry", "dead"} {
			schedule1(t, s, mk(id, past))
		}
		gen := map[string]uint64{}
		for sh := range s.Shards() {
			tk := mustTake(t, s, sh, 1)
			for _, f := range tk.Fired() {
				gen[f.ID] = f.Gen
				if f.ID != "firing" {
					if _, _, err := s.Settle(t.Context(), sh, 1, tk.Lease, nil); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		mustFinish(t, s, Finish{ID: "succ", Gen: gen["succ"], Kind: Succeeded})
		mustFinish(t, s, Finish{ID: "retry", Gen: gen["retry"], Kind: Retry, Due: future, Error: "boom"})
		mustFinish(t, s, Finish{ID: "dead", Gen: gen["dead"], Kind: Dead, Error: "gone"})
		schedule1(t, s, mk("canc", future))
		if err := s.Cancel(t.Context(), "canc"); err != nil {
			t.Fatal(err)
		}
		states[task.StateFired] = "fired"
		states[task.StateSucceeded] = "succ"
		states[task.StateRetrying] = "retry"
		states[task.StateDead] = "dead"
		states[task.StateCancelled] = "canc"
		for want, id := range states {
			got, err := s.Get(t.Context(), id)
			if err != nil || got.State != want {
				t.Fatalf("%s: state %v err %v, want %s", id, got, err, want)
			}
		}
		if got, _ := s.Get(t.Context(), "retry"); got.Attempt != 2 || got.LastError != "boom" {
			t.Fatalf("retrying task: attempt %d last error %q", got.Attempt, got.LastError)
		}
		if got, err := s.Get(t.Context(), "firing"); err != nil || got.State != task.StateFired {
			t.Fatalf("a task whose take is not settled: %+v %v", got, err)
		}
		for _, id := range []string{"firing", "fired"} {
			if _, err := s.Reschedule(t.Context(), id, future, 0, false); !errors.Is(err, ErrConflict) {
				t.Fatalf("reschedule of %s: %v", id, err)
			}
		}
		for st, id := range states {
			waiting := st == task.StateScheduled || st == task.StateRetrying
			newDue := future.Add(time.Minute).Truncate(time.Millisecond)
			d, err := s.Reschedule(t.Context(), id, newDue, 0, false)
			if waiting && (err != nil || !d.Equal(newDue.UTC())) {
				t.Fatalf("reschedule %s: %v %v", st, d, err)
			}
			var se *StateError
			if !waiting && (!errors.As(err, &se) || se.State != st) {
				t.Fatalf("reschedule %s: want conflict naming the state, got %v", st, err)
			}
			before, _ := s.Get(t.Context(), id)
			err = s.Cancel(t.Context(), id)
			if waiting && err != nil {
				t.Fatalf("cancel %s: %v", st, err)
			}
			if !waiting {
				if !errors.Is(err, ErrConflict) {
					t.Fatalf("cancel %s: want conflict, got %v", st, err)
				}
				after, _ := s.Get(t.Context(), id)
				if after.State != before.State || after.Gen != before.Gen || !after.DueAt.Equal(before.DueAt) {
					t.Fatalf("refused cancel changed %s: %+v -> %+v", id, before, after)
				}
			}
		}
		if _, err := s.Reschedule(t.Context(), "nope", future, 0, false); !errors.Is(err, ErrNotFound) {
			t.Fatalf("reschedule unknown: %v", err)
		}
		if err := s.Cancel(t.Context(), "nope"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("cancel unknown: %v", err)
		}
		if _, err := s.Get(t.Context(), "nope"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("get unknown: %v", err)
		}
	})

	t.Run("NeverTakenEarly", func(t *testing.T) {
		t.Parallel()
		s := newStore(t, rdb, Options{})
		now := redisNow(t, s)
		due := now.Add(300 * time.Millisecond).Truncate(time.Millisecond)
		r := schedule1(t, s, mk("soon", due))
		tk := mustTake(t, s, r.Shard, 1)
		// a machine slower than the 300 ms margin (the race detector, a
		// replicated cluster's WAIT) takes it at once: then it must be due
		if len(tk.Tasks) != 0 && tk.Now.Before(due) {
			t.Fatalf("taken %v early (now %v)", tk.Tasks[0].DueAt, tk.Now)
		}
		if len(tk.Tasks) == 0 && !tk.NextDue.Equal(due) {
			t.Fatalf("next due %v, want %v", tk.NextDue, due)
		}
		got := tk.Tasks
		testenv.WaitFor(t, 5*time.Second, "task taken once due", func() bool {
			if len(got) == 1 {
				return true
			}
			tk = mustTake(t, s, r.Shard, 1)
			got = tk.Tasks
			if len(got) == 0 && !tk.Now.Before(due) {
				t.Fatalf("due at %v but not taken at Redis time %v", due, tk.Now)
			}
			return len(got) == 1
		})
		if tk.Now.Before(got[0].DueAt) {
			t.Fatalf("taken at %v before due %v", tk.Now, got[0].DueAt)
		}
		if g := got[0]; g.State != task.StateFired || g.Gen != 0 || g.Attempt != 1 || string(g.Payload) != `{"n":1}` {
			t.Fatalf("taken task: %+v", g)
		}
	})

	t.Run("TakeAheadTakesOnlyTheHeadsMillisecond", func(t *testing.T) {
		t.Parallel()
		s := newStore(t, rdb, Options{Shards: 1})
		ctx := t.Context()
		now := redisNow(t, s)
		due := now.Add(3 * time.Second).Truncate(time.Millisecond)
		for _, tk := range []*task.Task{mk("a1", due), mk("a2", due), mk("b", due.Add(time.Millisecond)), mk("c", due.Add(time.Second))} {
			schedule1(t, s, tk)
		}
		// the head is further than ahead: nothing
		tk, err := s.TakeAhead(ctx, 0, 1, 100, time.Minute, 100*time.Millisecond)
		if err != nil || len(tk.Tasks) != 0 || !tk.FireAt.IsZero() || !tk.NextDue.Equal(due) {
			t.Fatalf("take with the head beyond ahead: %d tasks, fire at %v, next %v, %v", len(tk.Tasks), tk.FireAt, tk.NextDue, err)
		}
		// within ahead: the head's millisecond only, never the next one
		tk, err = s.TakeAhead(ctx, 0, 1, 100, time.Minute, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if !tk.Now.Before(due) {
			t.Fatalf("the take ran after the due time (Redis now %v, due %v): the machine stalled for seconds", tk.Now, due)
		}
		ids := map[string]bool{}
		for _, x := range tk.Tasks {
			ids[x.ID] = true
		}
		if len(tk.Tasks) != 2 || !ids["a1"] || !ids["a2"] || !tk.FireAt.Equal(due) || !tk.NextDue.Equal(due.Add(time.Millisecond)) {
			t.Fatalf("take ahead: %v, fire at %v (want %v), next %v", ids, tk.FireAt, due, tk.NextDue)
		}
		if got, _ := s.Get(ctx, "a1"); got.State != task.StateFired {
			t.Fatalf("a task taken ahead is %s, want fired", got.State)
		}
		// a task already due is taken alone, with no instant to wait for,
		// even when the head after it is within ahead
		past := schedule1(t, s, mk("p", now.Add(-time.Second)))
		if past.Outcome != Created {
			t.Fatalf("schedule: %+v", past)
		}
		tk, err = s.TakeAhead(ctx, 0, 1, 100, time.Minute, 10*time.Second)
		if err != nil || len(tk.Tasks) != 1 || tk.Tasks[0].ID != "p" || !tk.FireAt.IsZero() {
			t.Fatalf("take with a task due: %d tasks, fire at %v, %v", len(tk.Tasks), tk.FireAt, err)
		}
		// ahead 0 is Take: nothing before its time
		if tk, err := s.TakeAhead(ctx, 0, 1, 100, time.Minute, 0); err != nil || len(tk.Tasks) != 0 {
			t.Fatalf("take without ahead: %d tasks %v", len(tk.Tasks), err)
		}
	})

	t.Run("Fencing", func(t *testing.T) {
		t.Parallel()
		s := newStore(t, rdb, Options{})
		r := schedule1(t, s, mk("x", time.Now().Add(-time.Millisecond)))
		sh := r.Shard
		taken := mustTake(t, s, sh, 10)
		if len(taken.Tasks) != 1 {
			t.Fatalf("taken %d", len(taken.Tasks))
		}
		// a newer leader adopts the shard
		moved, err := s.Adopt(t.Context(), sh, 11)
		if err != nil || moved != 1 {
			t.Fatalf("adopt: moved %d, %v", moved, err)
		}
		// the deposed leader can neither take, settle (with or without
		// releases) nor adopt
		if _, err := s.Take(t.Context(), sh, 10, 10, time.Minute); !errors.Is(err, ErrFenced) {
			t.Fatalf("stale take: %v", err)
		}
		if _, _, err := s.Settle(t.Context(), sh, 10, taken.Lease, nil); !errors.Is(err, ErrFenced) {
			t.Fatalf("stale settle: %v", err)
		}
		if _, _, err := s.Settle(t.Context(), sh, 10, taken.Lease, taken.Fired()); !errors.Is(err, ErrFenced) {
			t.Fatalf("stale settle with releases: %v", err)
		}
		if _, err := s.Adopt(t.Context(), sh, 9); !errors.Is(err, ErrFenced) {
			t.Fatalf("stale adopt: %v", err)
		}
		// the new leader fires the same generation again: both copies
		// are one execution for the worker (its run marker and outcome
		// are per generation)
		again := mustTake(t, s, sh, 11)
		if len(again.Tasks) != 1 || again.Tasks[0].Gen != taken.Tasks[0].Gen {
			t.Fatalf("new leader took %+v", again.Tasks)
		}
		mustFinish(t, s, Finish{ID: "x", Gen: again.Tasks[0].Gen, Kind: Succeeded})
		var se *StateError
		if _, err := s.Finish(t.Context(), Finish{ID: "x", Gen: taken.Tasks[0].Gen, Kind: Succeeded}); !errors.As(err, &se) {
			t.Fatalf("finish of the deposed leader's copy: %v", err)
		}
		st, _ := s.Stats(t.Context())
		if st[sh].Token != 11 {
			t.Fatalf("stored token %d", st[sh].Token)
		}
	})

	t.Run("LeaseExpiryAndRelease", func(t *testing.T) {
		t.Parallel()
		s := newStore(t, rdb, Options{})
		r := schedule1(t, s, mk("l", time.Now().Add(-time.Millisecond)))
		first, err := s.Take(t.Context(), r.Shard, 1, 10, 50*time.Millisecond)
		if err != nil || len(first.Tasks) != 1 || first.NextLease.IsZero() {
			t.Fatalf("take: %+v %v", first, err)
		}
		var second Taken
		testenv.WaitFor(t, 5*time.Second, "expired lease re-claimed", func() bool {
			second = mustTake(t, s, r.Shard, 1)
			return len(second.Tasks) == 1
		})
		if second.Tasks[0].Gen != first.Tasks[0].Gen || second.Reclaimed != 1 {
			t.Fatalf("re-claim: gen %d after %d, reclaimed %d", second.Tasks[0].Gen, first.Tasks[0].Gen, second.Reclaimed)
		}
		fired, n, err := s.Settle(t.Context(), r.Shard, 1, second.Lease, second.Fired())
		if err != nil || n != 1 || fired != 0 {
			t.Fatalf("release: %d %d %v", fired, n, err)
		}
		if got, _ := s.Get(t.Context(), "l"); got.State != task.StateScheduled {
			t.Fatalf("released task is %s", got.State)
		}
		third := mustTake(t, s, r.Shard, 1)
		if len(third.Tasks) != 1 {
			t.Fatal("released task not taken again")
		}
		if third.Reclaimed != 0 {
			t.Fatalf("a released task counted as re-claimed")
		}
		if n, _, err := s.Settle(t.Context(), r.Shard, 1, first.Lease, nil); err != nil || n != 0 {
			t.Fatalf("settle of the first, expired take: %d %v", n, err)
		}
		if st, _ := s.Stats(t.Context()); st[r.Shard].Firing != 1 {
			t.Fatalf("the late settle dropped the current lease: %+v", st[r.Shard])
		}
		if n, _, err := s.Settle(t.Context(), r.Shard, 1, third.Lease, nil); err != nil || n != 1 {
			t.Fatalf("settle: %d %v", n, err)
		}
		if st, _ := s.Stats(t.Context()); st[r.Shard].Firing != 0 {
			t.Fatalf("settled task still in flight")
		}
	})

	t.Run("SettleReleasesFailedThenFiresTheRest", func(t *testing.T) {
		t.Parallel()
		s := newStore(t, rdb, Options{Shards: 1})
		past := time.Now().Add(-time.Millisecond)
		for _, id := range []string{"a", "b", "c"} {
			schedule1(t, s, mk(id, past))
		}
		first := mustTake(t, s, 0, 1)
		if len(first.Tasks) != 3 || first.Lease == "" {
			t.Fatalf("take: %+v", first)
		}
		// a second take gets a lease no other take in flight has
		schedule1(t, s, mk("d", past))
		second := mustTake(t, s, 0, 1)
		if len(second.Tasks) != 1 || second.Lease == first.Lease {
			t.Fatalf("second take %d tasks, lease %q after %q", len(second.Tasks), second.Lease, first.Lease)
		}
		var b Fired
		for _, f := range first.Fired() {
			if f.ID == "b" {
				b = f
			}
		}
		fired, released, err := s.Settle(t.Context(), 0, 1, first.Lease, []Fired{b})
		if err != nil || fired != 2 || released != 1 {
			t.Fatalf("settle: fired %d released %d %v", fired, released, err)
		}
		want := map[string]task.State{"a": task.StateFired, "b": task.StateScheduled, "c": task.StateFired, "d": task.StateFired}
		for id, st := range want {
			if got, err := s.Get(t.Context(), id); err != nil || got.State != st {
				t.Fatalf("%s after settle: %+v %v (want %s)", id, got, err, st)
			}
		}
		// settling the same take again (a retry after a lost reply)
		// changes nothing, and leaves the other take alone
		if fired, released, err := s.Settle(t.Context(), 0, 1, first.Lease, []Fired{b}); err != nil || fired != 0 || released != 0 {
			t.Fatalf("repeated settle: fired %d released %d %v", fired, released, err)
		}
		if _, _, err := s.Settle(t.Context(), 0, 0, second.Lease, nil); !errors.Is(err, ErrFenced) {
			t.Fatalf("settle with a lower token: %v", err)
		}
		if st, _ := s.Stats(t.Context()); st[0].Firing != 1 {
			t.Fatalf("a fenced settle changed the second take: %+v", st[0])
		}
		if fired, _, err := s.Settle(t.Context(), 0, 1, second.Lease, nil); err != nil || fired != 1 {
			t.Fatalf("settle of the second take: %d %v", fired, err)
		}
		if st, _ := s.Stats(t.Context()); st[0].Firing != 0 || st[0].Scheduled != 1 {
			t.Fatalf("stats after settles: %+v", st[0])
		}
	})

	t.Run("TakeOfTheLargestBatch", func(t *testing.T) {
		// DQ_FIRE_BATCH allows 5000: twice as many lease values as Redis'
		// Lua can unpack() into one call.
		t.Parallel()
		const n = 5000
		s := newStore(t, rdb, Options{Shards: 1})
		subs := make([]Submit, n)
		for i := range subs {
			subs[i] = Submit{Task: mk("big-"+strconv.Itoa(i), time.Now().Add(-time.Second))}
		}
		for i := 0; i < n; i += 1000 {
			if _, err := s.Schedule(t.Context(), subs[i:i+1000]); err != nil {
				t.Fatal(err)
			}
		}
		tk, err := s.Take(t.Context(), 0, 1, n, time.Minute)
		if err != nil || len(tk.Tasks) != n {
			t.Fatalf("take of %d: %d tasks, %v", n, len(tk.Tasks), err)
		}
		if fired, _, err := s.Settle(t.Context(), 0, 1, tk.Lease, nil); err != nil || fired != n {
			t.Fatalf("settle: %d %v", fired, err)
		}
	})

	t.Run("AKafkaCopyOfAReleasedTaskIsStaleOnceItWasRescheduled", func(t *testing.T) {
		// Kafka did not confirm X (it may still have it: a lost answer);
		// X goes back to due and is moved to the future. The copy Kafka
		// may hold must not run before the new due time.
		t.Parallel()
		s := newStore(t, rdb, Options{Shards: 1})
		schedule1(t, s, mk("x", time.Now().Add(-time.Millisecond)))
		tk := mustTake(t, s, 0, 1)
		if _, released, err := s.Settle(t.Context(), 0, 1, tk.Lease, tk.Fired()); err != nil || released != 1 {
			t.Fatalf("settle: %d %v", released, err)
		}
		if _, err := s.Reschedule(t.Context(), "x", time.Now().Add(time.Hour), 0, false); err != nil {
			t.Fatal(err)
		}
		res, err := s.ClaimMany(t.Context(), []Claim{{ID: "x", Gen: tk.Tasks[0].Gen, TTL: time.Minute, Owner: "w"}})
		if err != nil || res[0].Code != ClaimStale {
			t.Fatalf("claim of the copy fired before the reschedule: %+v %v", res, err)
		}
	})

	t.Run("AnOldCopyOfAReusedIDIsStale", func(t *testing.T) {
		// X ran and its record expired; a new task takes the id X (again
		// generation 0) for later. A copy of the first X replayed from
		// Kafka (an offset reset) must not run the new one early: its due
		// time is not the record's.
		t.Parallel()
		s := newStore(t, rdb, Options{Shards: 1, Retention: time.Millisecond})
		first := mk("x", time.Now().Add(-time.Second).Truncate(time.Millisecond))
		schedule1(t, s, first)
		tk := mustTake(t, s, 0, 1)
		mustFinish(t, s, Finish{ID: "x", Gen: tk.Tasks[0].Gen, Kind: Succeeded})
		testenv.WaitFor(t, 5*time.Second, "record expired", func() bool {
			mustTake(t, s, 0, 1) // the take purges expired records
			_, err := s.Get(t.Context(), "x")
			return errors.Is(err, ErrNotFound)
		})
		schedule1(t, s, mk("x", time.Now().Add(time.Hour)))
		res, err := s.ClaimMany(t.Context(), []Claim{{ID: "x", Gen: tk.Tasks[0].Gen, Due: first.DueAt, TTL: time.Minute, Owner: "w"}})
		if err != nil || res[0].Code != ClaimStale {
			t.Fatalf("claim of the old copy: %+v %v", res, err)
		}
	})

	t.Run("ATaskAStrayCopyFinishedLeavesTheDueSet", func(t *testing.T) {
		// X was released (Kafka did not confirm) but Kafka had it: a
		// worker runs that copy while X waits to fire again. The next
		// take drops X instead of firing it a second time.
		t.Parallel()
		s := newStore(t, rdb, Options{Shards: 1})
		schedule1(t, s, mk("x", time.Now().Add(-time.Millisecond)))
		tk := mustTake(t, s, 0, 1)
		if _, _, err := s.Settle(t.Context(), 0, 1, tk.Lease, tk.Fired()); err != nil {
			t.Fatal(err)
		}
		res, err := s.ClaimMany(t.Context(), []Claim{{ID: "x", Gen: tk.Tasks[0].Gen, TTL: time.Minute, Owner: "w"}})
		if err != nil || res[0].Code != Claimed {
			t.Fatalf("claim: %+v %v", res, err)
		}
		mustFinish(t, s, Finish{ID: "x", Gen: tk.Tasks[0].Gen, Kind: Succeeded, Owner: "w"})
		if again := mustTake(t, s, 0, 1); len(again.Tasks) != 0 || again.Lease != "" {
			t.Fatalf("a finished task fired again: %+v", again)
		}
		if st, _ := s.Stats(t.Context()); st[0].Scheduled != 0 || st[0].Firing != 0 {
			t.Fatalf("stats: %+v", st[0])
		}
		if got, _ := s.Get(t.Context(), "x"); got.State != task.StateSucceeded {
			t.Fatalf("state %s", got.State)
		}
	})

	t.Run("AnExpiredLeaseLeavesATaskAWorkerRetried", func(t *testing.T) {
		// The worker ran X and asked for a retry an hour later before the
		// leader settled its take; the take's lease then runs out. X must
		// wait for its retry, not fire again now.
		t.Parallel()
		s := newStore(t, rdb, Options{Shards: 1})
		schedule1(t, s, mk("x", time.Now().Add(-time.Millisecond)))
		first, err := s.Take(t.Context(), 0, 1, 10, 30*time.Millisecond)
		if err != nil || len(first.Tasks) != 1 {
			t.Fatalf("take: %+v %v", first, err)
		}
		mustFinish(t, s, Finish{ID: "x", Gen: first.Tasks[0].Gen, Kind: Retry, Delay: time.Hour, Relative: true, Error: "later"})
		time.Sleep(60 * time.Millisecond)
		again := mustTake(t, s, 0, 1)
		if len(again.Tasks) != 0 || again.Reclaimed != 0 {
			t.Fatalf("re-claimed a task waiting for its retry: %+v", again)
		}
		st, _ := s.Stats(t.Context())
		if st[0].Firing != 0 || st[0].Scheduled != 1 {
			t.Fatalf("stats: %+v", st[0])
		}
		if got, _ := s.Get(t.Context(), "x"); got.State != task.StateRetrying || got.Gen != first.Tasks[0].Gen+1 {
			t.Fatalf("after the expired lease: %s gen %d", got.State, got.Gen)
		}
		// and an adopt by a new leader leaves it alone as well
		if moved, err := s.Adopt(t.Context(), 0, 2); err != nil || moved != 0 {
			t.Fatalf("adopt: %d %v", moved, err)
		}
	})

	t.Run("AdoptPutsBackWhatAnEarlierLeaderLeftInFlight", func(t *testing.T) {
		t.Parallel()
		s := newStore(t, rdb, Options{Shards: 1})
		var subs []Submit
		for i := range 30 {
			subs = append(subs, Submit{Task: mk("a"+strconv.Itoa(i), time.Now().Add(-time.Millisecond))})
		}
		if _, err := s.Schedule(t.Context(), subs); err != nil {
			t.Fatal(err)
		}
		// ten takes of three, more than one adopt call's worth of leases
		for range 10 {
			if tk, err := s.Take(t.Context(), 0, 1, 3, time.Hour); err != nil || len(tk.Tasks) != 3 {
				t.Fatalf("take: %+v %v", tk, err)
			}
		}
		if st, _ := s.Stats(t.Context()); st[0].Firing != 30 || st[0].Scheduled != 0 {
			t.Fatalf("before adopt: %+v", st[0])
		}
		moved, err := s.Adopt(t.Context(), 0, 2)
		if err != nil || moved != 30 {
			t.Fatalf("adopt: %d %v", moved, err)
		}
		// still fired (copies may be in Kafka), their leases run out now
		if st, _ := s.Stats(t.Context()); st[0].Firing != 30 || st[0].Scheduled != 0 {
			t.Fatalf("after adopt: %+v", st[0])
		}
		if tk := mustTake(t, s, 0, 2); len(tk.Tasks) != 30 || tk.Reclaimed != 30 {
			t.Fatalf("re-fired %d of 30 (%d reclaimed)", len(tk.Tasks), tk.Reclaimed)
		}
	})

	t.Run("SettleLeavesAClaimRetakenAfterItsLeaseRanOut", func(t *testing.T) {
		t.Parallel()
		s := newStore(t, rdb, Options{Shards: 1})
		schedule1(t, s, mk("x", time.Now().Add(-time.Millisecond)))
		first, err := s.Take(t.Context(), 0, 1, 10, 20*time.Millisecond)
		if err != nil || len(first.Tasks) != 1 {
			t.Fatalf("take: %+v %v", first, err)
		}
		var second Taken
		testenv.WaitFor(t, 5*time.Second, "expired lease re-claimed", func() bool {
			second = mustTake(t, s, 0, 1)
			return len(second.Tasks) == 1
		})
		// the late settle of the first take must not fire the re-claimed
		// copy, whose record Kafka has not confirmed
		if fired, _, err := s.Settle(t.Context(), 0, 1, first.Lease, first.Fired()); err != nil || fired != 0 {
			t.Fatalf("late settle fired %d: %v", fired, err)
		}
		if st, _ := s.Stats(t.Context()); st[0].Firing != 1 {
			t.Fatalf("the late settle dropped the re-claim's lease: %+v", st[0])
		}
	})

	t.Run("FinishOutcomesAndDeadSet", func(t *testing.T) {
		t.Parallel()
		s := newStore(t, rdb, Options{})
		for _, id := range []string{"ok", "r", "d", "w"} {
			schedule1(t, s, mk(id, time.Now().Add(-time.Millisecond)))
		}
		gen := map[string]uint64{}
		for _, tk := range takeAll(t, s, 1) {
			gen[tk.ID] = tk.Gen
		}
		mustFinish(t, s, Finish{ID: "ok", Gen: gen["ok"], Kind: Succeeded})
		var se *StateError
		if _, err := s.Finish(t.Context(), Finish{ID: "ok", Gen: gen["ok"], Kind: Succeeded}); !errors.As(err, &se) || se.State != task.StateSucceeded {
			t.Fatalf("duplicate finish: %v", err)
		}
		st := mustFinish(t, s, Finish{ID: "r", Gen: gen["r"], Kind: Retry, Delay: time.Hour, Relative: true, Error: "500"})
		if st != task.StateRetrying {
			t.Fatalf("retry state %s", st)
		}
		st = mustFinish(t, s, Finish{ID: "w", Gen: gen["w"], Kind: Defer, Delay: time.Hour, Relative: true})
		if got, _ := s.Get(t.Context(), "w"); st != task.StateScheduled || got.Attempt != 1 {
			t.Fatalf("deferred: %s attempt %d", st, got.Attempt)
		}
		mustFinish(t, s, Finish{ID: "d", Gen: gen["d"], Kind: Dead, Error: "400 bad request"})
		dead, err := s.ListDead(t.Context(), 10)
		if err != nil || len(dead) != 1 || dead[0].Task.ID != "d" || dead[0].Task.LastError != "400 bad request" {
			t.Fatalf("dead list: %+v %v", dead, err)
		}
		if _, err := s.Redrive(t.Context(), "ok"); !errors.Is(err, ErrConflict) {
			t.Fatalf("redrive of a succeeded task: %v", err)
		}
		if _, err := s.Redrive(t.Context(), "d"); err != nil {
			t.Fatal(err)
		}
		got, _ := s.Get(t.Context(), "d")
		if got.State != task.StateScheduled || got.Attempt != 1 {
			t.Fatalf("redriven: %+v", got)
		}
		again := takeAll(t, s, 1)
		if len(again) != 1 || again[0].ID != "d" {
			t.Fatalf("redriven task not fired again: %v", again)
		}
		mustFinish(t, s, Finish{ID: "d", Gen: again[0].Gen, Kind: Dead, Error: "still bad"})
		if err := s.DeleteDead(t.Context(), "d"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(t.Context(), "d"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("deleted dead task: %v", err)
		}
		if dead, _ := s.ListDead(t.Context(), 10); len(dead) != 0 {
			t.Fatalf("dead list after delete: %v", dead)
		}
	})

	t.Run("Retention", func(t *testing.T) {
		t.Parallel()
		s := newStore(t, rdb, Options{Retention: 50 * time.Millisecond})
		r := schedule1(t, s, mk("gone", time.Now().Add(-time.Millisecond)))
		tk := mustTake(t, s, r.Shard, 1)
		mustFinish(t, s, Finish{ID: "gone", Gen: tk.Tasks[0].Gen, Kind: Succeeded})
		if got, err := s.Get(t.Context(), "gone"); err != nil || got.State != task.StateSucceeded {
			t.Fatalf("finished task not readable: %v", err)
		}
		testenv.WaitFor(t, 5*time.Second, "finished record purged after retention", func() bool {
			mustTake(t, s, r.Shard, 1)
			_, err := s.Get(t.Context(), "gone")
			return errors.Is(err, ErrNotFound)
		})
	})

	t.Run("WakeOnNewHead", func(t *testing.T) {
		t.Parallel()
		s := newStore(t, rdb, Options{Shards: 1})
		sub := rdb.Subscribe(t.Context(), s.WakeChannel())
		defer sub.Close()
		if _, err := sub.Receive(t.Context()); err != nil {
			t.Fatal(err)
		}
		ch := sub.Channel()
		later := time.Now().Add(time.Hour).Truncate(time.Millisecond)
		schedule1(t, s, mk("later", later))
		expectWake(t, ch, fmt.Sprintf("0:%d", later.UnixMilli()))
		schedule1(t, s, mk("even-later", later.Add(time.Hour))) // not a new head: no wake
		sooner := later.Add(-time.Minute)
		schedule1(t, s, mk("sooner", sooner))
		expectWake(t, ch, fmt.Sprintf("0:%d", sooner.UnixMilli()))
		// a reschedule behind the head does not wake; one ahead of it
		// does, with its own due time
		if _, err := s.Reschedule(t.Context(), "later", later.Add(time.Minute), 0, false); err != nil {
			t.Fatal(err)
		}
		soonest := sooner.Add(-time.Minute)
		if _, err := s.Reschedule(t.Context(), "even-later", soonest, 0, false); err != nil {
			t.Fatal(err)
		}
		expectWake(t, ch, fmt.Sprintf("0:%d", soonest.UnixMilli()))
		// one call of several tasks wakes once, with the earliest
		res, err := s.Schedule(t.Context(), []Submit{{Task: mk("b1", soonest.Add(-2*time.Second))}, {Task: mk("b2", soonest.Add(-3*time.Second))}, {Task: mk("b3", later)}})
		if err != nil || len(res) != 3 || res[0].Err != nil {
			t.Fatalf("schedule: %+v %v", res, err)
		}
		expectWake(t, ch, fmt.Sprintf("0:%d", soonest.Add(-3*time.Second).UnixMilli()))
		schedule1(t, s, mk("last", later.Add(-time.Hour)))
		expectWake(t, ch, fmt.Sprintf("0:%d", later.Add(-time.Hour).UnixMilli()))
	})

	t.Run("OtherShardCountFollowsNamespace", func(t *testing.T) {
		t.Parallel()
		s := newStore(t, rdb, Options{Shards: 8})
		o, err := New(t.Context(), rdb, Options{Namespace: s.Namespace(), Shards: 16})
		if err != nil {
			t.Fatalf("a process configured with another count is refused: %v", err)
		}
		if o.Shards() != 8 || o.Map().State != "stable" {
			t.Fatalf("map %+v, want the namespace's 8 shards", o.Map())
		}
	})

	t.Run("ScriptCacheFlushed", func(t *testing.T) {
		s := newStore(t, rdb, Options{})
		flush(t, rdb)
		if r := schedule1(t, s, mk("nc", time.Now().Add(time.Hour))); r.Outcome != Created {
			t.Fatalf("after SCRIPT FLUSH: %+v", r)
		}
		flush(t, rdb)
		if err := s.Cancel(t.Context(), "nc"); err != nil {
			t.Fatal(err)
		}
	})
}

func flush(t *testing.T, rdb redis.UniversalClient) {
	t.Helper()
	var err error
	if c, ok := rdb.(*redis.ClusterClient); ok {
		err = c.ForEachShard(t.Context(), func(ctx context.Context, n *redis.Client) error { return n.ScriptFlush(ctx).Err() })
	} else {
		err = rdb.ScriptFlush(t.Context()).Err()
	}
	if err != nil {
		t.Fatal(err)
	}
}

func expectWake(t *testing.T, ch <-chan *redis.Message, want string) {
	t.Helper()
	select {
	case m := <-ch:
		if m.Payload != want {
			t.Fatalf("wake %q, want %q", m.Payload, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no wake-up %q", want)
	}
}

func takeAll(t *testing.T, s *Store, token int64) []Fired {
	t.Helper()
	var all []Fired
	for sh := range s.Shards() {
		all = append(all, mustTake(t, s, sh, token).Fired()...)
	}
	return all
}

func mustFinish(t *testing.T, s *Store, f Finish) task.State {
	t.Helper()
	st, err := s.Finish(t.Context(), f)
	if err != nil {
		t.Fatalf("finish %s %s: %v", f.ID, f.Kind, err)
	}
	return st
}

func TestShardRoutingIsStable(t *testing.T) {
	// Golden values: these must never change, every process of a namespace
	// (and every version of delayq) has to route an id to the same shard.
	// ("a": FNV-1a 32 is 0xe40c292c, so shard 12 of 16; bucket 'a' = 97.)
	cases := []struct {
		id     string
		n      int
		shard  int
		bucket int
	}{
		{"a", 16, 12, 97},
		{"order-123", 16, 10, 326},
		{"0192d3f4-0001-7abc-8def-000000000001", 16, 10, 219},
	}
	for _, c := range cases {
		if got := ShardOf(c.id, c.n); got != c.shard {
			t.Errorf("ShardOf(%q, %d) = %d, want %d", c.id, c.n, got, c.shard)
		}
		if got := bucketOf(c.id); got != c.bucket {
			t.Errorf("bucketOf(%q) = %d, want %d", c.id, got, c.bucket)
		}
	}
}

func TestMemoryAdvice(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb := r.Client(t)
	s, err := New(t.Context(), rdb, Options{Namespace: "advice"})
	if err != nil {
		t.Fatal(err)
	}
	if a := s.MemoryAdvice(t.Context()); a != "" {
		t.Fatalf("recommended settings (testenv) flagged: %s", a)
	}
	if err := rdb.ConfigSet(t.Context(), "hash-max-listpack-value", "64").Err(); err != nil {
		t.Fatal(err)
	}
	if a := s.MemoryAdvice(t.Context()); !strings.Contains(a, "hash-max-listpack-value") {
		t.Fatalf("default settings not flagged: %q", a)
	}
}
