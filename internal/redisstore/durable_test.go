package redisstore

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// replicated starts a primary and one replica of it and waits until the
// replica's link is up.
func replicated(t *testing.T) (primary, replica *testenv.Redis) {
	t.Helper()
	primary, replica = testenv.StartRedis(t), testenv.StartRedis(t)
	testenv.ReplicaOf(t, replica, primary)
	return primary, replica
}

// The whole store suite with every durable write waiting for one replica:
// the answers are the same as without.
func TestStoreReplicated(t *testing.T) {
	primary, _ := replicated(t)
	rdb := primary.Client(t)
	durableSuites.Store(redis.UniversalClient(rdb), Options{ReplicaAcks: 1, AckTimeout: 2 * time.Second})
	t.Run("suite", func(t *testing.T) { suite(t, rdb) })
	if n := testenv.CommandStats(t, rdb)["wait"].Calls; n < 50 {
		t.Fatalf("the primary ran WAIT %d times: the durable writes did not wait", n)
	}
}

// A write whose replica does not confirm in time fails with
// ErrNotReplicated (an unavailable error: replayed, never bad input),
// although the primary applied it; once the replica answers again the
// same calls succeed.
func TestReplicaAcksUnconfirmed(t *testing.T) {
	primary, replica := replicated(t)
	rdb := primary.Client(t)
	s := newStore(t, rdb, Options{Shards: 4, ReplicaAcks: 1, AckTimeout: 100 * time.Millisecond})
	ctx := t.Context()
	due := time.Now().Add(time.Hour).Truncate(time.Millisecond).UTC()
	if r := schedule1(t, s, mk("d-1", due)); r.Outcome != Created {
		t.Fatalf("schedule with the replica up: %+v", r)
	}

	// the replica receives nothing more: WAIT 1 answers 0 after AckTimeout
	resume := testenv.PauseReplication(t, replica, primary)

	res, err := s.Schedule(ctx, []Submit{{Task: mk("d-2", due)}, {Task: mk("d-3", due)}})
	if !errors.Is(err, ErrNotReplicated) || !IsUnavailable(err) {
		t.Fatalf("schedule with the replica stalled: err %v", err)
	}
	for _, r := range res {
		var re *ReplicaError
		if !errors.As(r.Err, &re) || re.Want != 1 || re.Got != 0 {
			t.Fatalf("result %+v: want a *ReplicaError 0 of 1", r)
		}
	}
	// the primary did apply it: the outcome is unknown, not "not written"
	if got, err := s.Get(ctx, "d-2"); err != nil || got.State != task.StateScheduled {
		t.Fatalf("d-2 on the primary: %+v %v", got, err)
	}
	if _, err := s.Reschedule(ctx, "d-1", due.Add(time.Minute), 0, false); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("reschedule: %v", err)
	}
	if err := s.Cancel(ctx, "d-1"); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("cancel: %v", err)
	}
	// reads and non-durable scripts do not wait
	start := time.Now()
	if _, err := s.Get(ctx, "d-1"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("a read waited %v for the replica", d)
	}
	resume()

	// the replica answers again: the replay of the same calls succeeds
	res, err = s.Schedule(ctx, []Submit{{Task: mk("d-2", due)}, {Task: mk("d-3", due)}})
	if err != nil || res[0].Outcome != Unchanged || res[1].Outcome != Unchanged {
		t.Fatalf("replayed schedule: %+v %v", res, err)
	}
	if err := s.Cancel(ctx, "d-1"); err != nil && !errors.Is(err, ErrConflict) {
		t.Fatalf("replayed cancel: %v", err)
	}
	got, err := s.Get(ctx, "d-1")
	if err != nil || got.State != task.StateCancelled {
		t.Fatalf("d-1: %+v %v", got, err)
	}
}

// Without replicas, ReplicaAcks 1 can never be met: every durable write
// answers ErrNotReplicated after AckTimeout, and says how many confirmed.
func TestReplicaAcksWithoutReplica(t *testing.T) {
	r := testenv.StartRedis(t)
	s := newStore(t, r.Client(t), Options{ReplicaAcks: 1, AckTimeout: 20 * time.Millisecond})
	_, err := s.Schedule(t.Context(), []Submit{{Task: mk("x", time.Now().Add(time.Hour))}})
	var re *ReplicaError
	if !errors.As(err, &re) || re.Got != 0 || re.Want != 1 || re.Addr != r.Addr {
		t.Fatalf("err %v", err)
	}
}

// Redis 7.0 has no WAITAOF: New refuses WaitAOF with the setting's name,
// before anything else goes wrong later.
func TestWaitAOFUnsupported(t *testing.T) {
	r := testenv.StartRedis(t)
	_, err := New(t.Context(), r.Client(t), Options{Namespace: "waitaof", WaitAOF: true})
	if err == nil {
		t.Skip("this redis-server has WAITAOF with appendonly on; nothing to refuse")
	}
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "DQ_REDIS_WAIT_AOF") {
		t.Fatalf("err %v", err)
	}
}

// The durable scripts are the ones whose result is answered to a caller
// or relied on before a Kafka offset is committed; the leader's fire path
// (take, settle, adopt) and the claims are not: losing one of those in a
// failover fires or runs a task again, it never loses one.
func TestDurableScripts(t *testing.T) {
	names := map[*redis.Script]string{scheduleScript: "schedule", rescheduleScript: "reschedule", cancelScript: "cancel",
		redriveScript: "redrive", purgeDeadScript: "purgedead", finishScript: "finish", parkScript: "park", unparkScript: "unpark"}
	var got []string
	for _, sc := range durableScripts() {
		got = append(got, names[sc])
	}
	want := []string{"schedule", "reschedule", "cancel", "redrive", "purgedead", "finish", "park", "unpark"}
	if !slices.Equal(got, want) {
		t.Fatalf("durable scripts %v, want %v", got, want)
	}
	for _, sc := range []*redis.Script{takeScript, settleScript, adoptScript, claimScript, extendScript, unclaimScript} {
		if durable[sc.Hash()] {
			t.Fatalf("script %s waits for replicas", sc.Hash())
		}
	}
}

// The suite on a Redis Cluster whose masters each have a replica, every
// durable write waiting for it: each script call and its WAIT go to the
// master of the call's slot (runWaited).
func TestStoreClusterReplicated(t *testing.T) {
	c := testenv.StartRedisClusterReplicas(t, 3)
	rdb := c.Client(t)
	durableSuites.Store(redis.UniversalClient(rdb), Options{ReplicaAcks: 1, AckTimeout: 2 * time.Second})
	t.Run("suite", func(t *testing.T) { suite(t, rdb) })
	var waits int64
	for _, m := range c.Masters() {
		waits += testenv.CommandStats(t, m.Client(t))["wait"].Calls
	}
	if waits < 50 {
		t.Fatalf("the masters ran WAIT %d times: the durable writes did not wait", waits)
	}
}

// ReplicaAdvice tells an operator when the setting does not fit the
// primary's replicas.
func TestReplicaAdvice(t *testing.T) {
	primary, _ := replicated(t)
	rdb := primary.Client(t)
	for _, tc := range []struct {
		acks int
		want string
	}{{0, "has 1 replica(s) but DQ_REDIS_REPLICA_ACKS is 0"}, {1, ""}, {2, "DQ_REDIS_REPLICA_ACKS is 2 but"}} {
		s := newStore(t, rdb, Options{ReplicaAcks: tc.acks})
		got := s.ReplicaAdvice(t.Context())
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("acks %d: advice %q, want %q", tc.acks, got, tc.want)
		}
	}
	alone := newStore(t, testenv.StartRedis(t).Client(t), Options{})
	if got := alone.ReplicaAdvice(t.Context()); got != "" {
		t.Errorf("a primary without replicas and acks 0: %q", got)
	}
}

// PersistenceAdvice warns when replica acks are on but the primary does
// not write its AOF before it answers: a primary restarted before its
// replica is promoted then loses writes its replicas confirmed (the
// chaos run that found it and the replay: docs/design.md).
func TestPersistenceAdvice(t *testing.T) {
	primary, _ := replicated(t)
	rdb := primary.Client(t)
	ctx := t.Context()
	set := func(k, v string) {
		t.Helper()
		if err := rdb.ConfigSet(ctx, k, v).Err(); err != nil {
			t.Fatalf("CONFIG SET %s %s: %v", k, v, err)
		}
	}
	for _, tc := range []struct {
		appendonly, fsync string
		acks              int
		want              string
	}{
		{"no", "everysec", 1, "has appendonly no"},
		{"yes", "everysec", 1, "has appendfsync everysec"},
		{"yes", "no", 1, "has appendfsync no"},
		{"yes", "always", 1, ""},
		{"yes", "everysec", 0, ""}, // no replica acks: ReplicaAdvice speaks
	} {
		set("appendonly", tc.appendonly)
		set("appendfsync", tc.fsync)
		s := newStore(t, rdb, Options{ReplicaAcks: tc.acks})
		got := s.PersistenceAdvice(ctx)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("appendonly %s, appendfsync %s, acks %d: advice %q, want %q", tc.appendonly, tc.fsync, tc.acks, got, tc.want)
		}
	}
}

// Confirm (the replay of a written but unconfirmed schedule) creates an
// absent task, leaves an existing one as it is whatever its content, and
// writes its record again unchanged so that the call's WAIT covers it.
func TestScheduleConfirm(t *testing.T) {
	primary, _ := replicated(t)
	s := newStore(t, primary.Client(t), Options{Shards: 4, ReplicaAcks: 1, AckTimeout: 2 * time.Second})
	ctx := t.Context()
	due := time.Now().Add(time.Hour).Truncate(time.Millisecond).UTC()
	if r := schedule1(t, s, mk("c-1", due)); r.Outcome != Created {
		t.Fatalf("%+v", r)
	}
	later := due.Add(time.Minute)
	if _, err := s.Reschedule(ctx, "c-1", later, 0, false); err != nil {
		t.Fatal(err)
	}
	before := testenv.CommandStats(t, primary.Client(t))["hset"].Calls
	res, err := s.Schedule(ctx, []Submit{{Task: mk("c-1", due), Confirm: true}, {Task: mk("c-2", due), Confirm: true}})
	if err != nil || res[0].Outcome != Unchanged || !res[0].DueAt.Equal(later) || res[1].Outcome != Created {
		t.Fatalf("confirm: %+v %v", res, err)
	}
	if got, err := s.Get(ctx, "c-1"); err != nil || !got.DueAt.Equal(later) {
		t.Fatalf("c-1 after its confirm: %+v %v; want the reschedule kept", got, err)
	}
	if n := testenv.CommandStats(t, primary.Client(t))["hset"].Calls - before; n < 1 {
		t.Fatalf("confirm of an existing task wrote nothing (%d HSET): its WAIT would cover nothing", n)
	}
}

// A journal entry's replay (Submit.Replay) writes the task the first time
// its token meets the shard, and only confirms it after that: a daemon that
// died between applying an entry and removing it from its journal replays
// it again after a restart, and must not set back a change made meanwhile
// (the chaos run where a task fired before its acknowledged reschedule).
func TestScheduleReplayAppliesOnce(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	s := newStore(t, rdb, Options{Shards: 4})
	ctx := t.Context()
	due := time.Now().Add(time.Hour).Truncate(time.Millisecond).UTC()
	later := due.Add(time.Minute)
	// the first replay writes it; a reschedule moves it on
	res, err := s.Schedule(ctx, []Submit{{Task: mk("r-1", due), Replay: "j1:7"}})
	if err != nil || res[0].Outcome != Created {
		t.Fatalf("first replay: %+v %v", res, err)
	}
	if _, err := s.Reschedule(ctx, "r-1", later, 0, false); err != nil {
		t.Fatal(err)
	}
	// the same entry again (its daemon restarted): the reschedule stands
	res, err = s.Schedule(ctx, []Submit{{Task: mk("r-1", due), Replay: "j1:7"}})
	if err != nil || res[0].Outcome != Unchanged || !res[0].DueAt.Equal(later) {
		t.Fatalf("the same entry replayed again: %+v %v, want unchanged at %v", res, err, later)
	}
	if got := getTask(t, s, "r-1"); !got.DueAt.Equal(later) {
		t.Fatalf("due %v after the second replay, want the reschedule's %v", got.DueAt, later)
	}
	// another entry of the id (a later submission) is written as any
	// schedule: an upsert of the waiting task
	res, err = s.Schedule(ctx, []Submit{{Task: mk("r-1", due), Replay: "j1:9"}})
	if err != nil || res[0].Outcome != Updated || !res[0].DueAt.Equal(due) {
		t.Fatalf("a new entry of the id: %+v %v, want updated to %v", res, err, due)
	}
	// a seen token of an absent task (a failover lost it) creates it
	res, err = s.Schedule(ctx, []Submit{{Task: mk("r-2", due), Replay: "j1:8"}, {Task: mk("r-3", due)}})
	if err != nil || res[0].Outcome != Created || res[1].Outcome != Created {
		t.Fatalf("%+v %v", res, err)
	}
	if err := rdb.HDel(ctx, s.k.bucketKey(s.Shard("r-2"), bucketOf("r-2")), "r-2").Err(); err != nil {
		t.Fatal(err)
	}
	res, err = s.Schedule(ctx, []Submit{{Task: mk("r-2", due), Replay: "j1:8"}})
	if err != nil || res[0].Outcome != Created {
		t.Fatalf("a seen token of an absent task: %+v %v, want created", res, err)
	}
	// the marks expire: every shard's set has a TTL of at most a day
	for sh := range 4 {
		key := s.k.replayMarks(sh)
		if n, _ := rdb.Exists(ctx, key).Result(); n == 0 {
			continue
		}
		if ttl, err := rdb.PTTL(ctx, key).Result(); err != nil || ttl <= 0 || ttl > 24*time.Hour {
			t.Fatalf("%s expires in %v (%v), want within a day", key, ttl, err)
		}
	}
}
