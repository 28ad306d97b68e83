package redisstore

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// The batched worker transitions, on standalone Redis and on Redis Cluster.
func TestClaimFinishManyStandalone(t *testing.T) {
	r := testenv.StartRedis(t)
	batchSuite(t, r.Client(t))
}

func TestClaimFinishManyCluster(t *testing.T) {
	c := testenv.StartRedisCluster(t)
	batchSuite(t, c.Client(t))
}

// A client of one address that reaches a Redis Cluster of one master (a
// cluster's endpoint): every call stays within one shard, since the node
// refuses a script whose keys span slots (CROSSSLOT) as a cluster does.
func TestClaimFinishManyOneAddressOfAOneMasterCluster(t *testing.T) {
	c := testenv.StartRedisClusterN(t, 1)
	rdb := c.Nodes[0].Client(t)
	batchSuite(t, rdb)
	s := newStore(t, rdb, Options{})
	fireN(t, s, "one-address-", 64) // a group of every shard
}

// The same client of a cluster of several masters would meet MOVED on
// most shards: New refuses it and says what to set.
func TestOneAddressOfAClusterOfSeveralMastersRefused(t *testing.T) {
	c := testenv.StartRedisClusterN(t, 2)
	_, err := New(t.Context(), c.Nodes[0].Client(t), Options{Namespace: "several"})
	if !errors.Is(err, ErrClusterNode) || !strings.Contains(err.Error(), "DQ_REDIS_CLUSTER") {
		t.Fatalf("New: %v, want ErrClusterNode naming DQ_REDIS_CLUSTER", err)
	}
}

// fireN schedules n tasks due now and takes them; it returns their ids and
// generations.
func fireN(t *testing.T, s *Store, prefix string, n int) ([]string, map[string]uint64) {
	t.Helper()
	ids := make([]string, n)
	subs := make([]Submit, n)
	for i := range n {
		ids[i] = prefix + strconv.Itoa(i)
		subs[i] = Submit{Task: mk(ids[i], time.Now().Add(-time.Second))}
	}
	if _, err := s.Schedule(t.Context(), subs); err != nil {
		t.Fatal(err)
	}
	gen := map[string]uint64{}
	for _, tk := range takeAll(t, s, 1) {
		gen[tk.ID] = tk.Gen
	}
	if len(gen) != n {
		t.Fatalf("took %d of %d", len(gen), n)
	}
	return ids, gen
}

func batchSuite(t *testing.T, rdb redis.UniversalClient) {
	t.Run("ClaimMany", func(t *testing.T) {
		t.Parallel()
		s := newStore(t, rdb, Options{})
		ids, gen := fireN(t, s, "c", 40) // spread over all shards
		mustFinish(t, s, Finish{ID: ids[1], Gen: gen[ids[1]], Kind: Succeeded})
		cs := make([]Claim, 0, len(ids)+1)
		for _, id := range ids {
			cs = append(cs, Claim{ID: id, Gen: gen[id], TTL: time.Minute, Owner: "w1:1"})
		}
		cs[2].Gen++ // stale
		cs = append(cs, Claim{ID: "nope", Gen: 1, TTL: time.Minute, Owner: "w1:1"})
		res, err := s.ClaimMany(t.Context(), cs)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			want := Claimed
			switch i {
			case 1:
				want = ClaimFinished
			case 2:
				want = ClaimStale
			case len(cs) - 1:
				want = ClaimNotFound
			}
			if r.Code != want || r.Err != nil {
				t.Fatalf("claim %d (%s): %+v, want code %d", i, cs[i].ID, r, want)
			}
			if want == Claimed {
				if r.Task == nil || r.Task.ID != cs[i].ID || r.Task.Gen != cs[i].Gen || r.Task.Type != "order.cancel" ||
					string(r.Task.Payload) != `{"n":1}` || r.State != task.StateFired {
					t.Fatalf("claimed task %d: %+v", i, r.Task)
				}
				if who, ttl, err := s.ClaimHolder(t.Context(), cs[i].ID, cs[i].Gen); err != nil || who != "w1:1" || ttl <= 0 || ttl > time.Minute {
					t.Fatalf("claim held by %q for %v (%v)", who, ttl, err)
				}
			}
		}
		if res[1].State != task.StateSucceeded {
			t.Fatalf("finished state %q", res[1].State)
		}
		// the same owner again (a retry after an unknown outcome) keeps it;
		// another owner is refused
		again, err := s.ClaimMany(t.Context(), []Claim{
			{ID: ids[0], Gen: gen[ids[0]], TTL: time.Minute, Owner: "w1:1"},
			{ID: ids[3], Gen: gen[ids[3]], TTL: time.Minute, Owner: "w2:1"},
		})
		if err != nil || again[0].Code != Claimed || again[1].Code != ClaimHeld || again[1].Task != nil {
			t.Fatalf("second claims: %+v %v", again, err)
		}
		// release deletes only markers still held by the given owner
		n, err := s.ReleaseMany(t.Context(), []Claim{
			{ID: ids[0], Gen: gen[ids[0]], Owner: "w1:1"},
			{ID: ids[3], Gen: gen[ids[3]], Owner: "w2:1"}, // not ours
			{ID: ids[5], Gen: gen[ids[5]], Owner: "w1:1"},
		})
		if err != nil || n != 2 {
			t.Fatalf("release: %d %v, want 2", n, err)
		}
		if holder(t, s, ids[0], gen[ids[0]]) != "" || holder(t, s, ids[3], gen[ids[3]]) == "" {
			t.Fatal("release deleted the wrong claims")
		}
		if r, _ := s.ClaimMany(t.Context(), []Claim{{ID: ids[0], Gen: gen[ids[0]], TTL: time.Minute, Owner: "w2:2"}}); r[0].Code != Claimed {
			t.Fatalf("claim after release: %+v", r[0])
		}
		// a marker that expired can be claimed by another owner
		short := Claim{ID: ids[4], Gen: gen[ids[4]], TTL: 30 * time.Millisecond, Owner: "w3:1"}
		if ok, err := s.ReleaseClaim(t.Context(), Claim{ID: short.ID, Gen: short.Gen, Owner: "w1:1"}); err != nil || !ok {
			t.Fatalf("release: %v %v", ok, err)
		}
		if r, _ := s.ClaimMany(t.Context(), []Claim{short}); r[0].Code != Claimed {
			t.Fatalf("short claim: %+v", r[0])
		}
		if r, _ := s.ClaimMany(t.Context(), []Claim{{ID: short.ID, Gen: short.Gen, TTL: time.Minute, Owner: "w4:1"}}); r[0].Code != ClaimHeld {
			t.Fatalf("claim of a held short claim: %+v", r[0])
		}
		testenv.WaitFor(t, 5*time.Second, "short claim expired", func() bool {
			return holder(t, s, short.ID, short.Gen) == ""
		})
		short.Owner = "w4:1"
		if r, _ := s.ClaimMany(t.Context(), []Claim{short}); r[0].Code != Claimed {
			t.Fatalf("claim after expiry: %+v", r[0])
		}
	})

	t.Run("CopiesInOneCall", func(t *testing.T) {
		t.Parallel()
		// two copies of one firing in one call (a leader that fired a
		// batch again, both copies in one micro-batch, or two workers'
		// claims coalesced): the first claims it, the second is held,
		// its own owner's retry claims again
		s := newStore(t, rdb, Options{})
		ids, gen := fireN(t, s, "d", 2)
		res, err := s.ClaimMany(t.Context(), []Claim{
			{ID: ids[0], Gen: gen[ids[0]], TTL: time.Minute, Owner: "w1:1"},
			{ID: ids[0], Gen: gen[ids[0]], TTL: time.Minute, Owner: "w1:2"},
			{ID: ids[0], Gen: gen[ids[0]], TTL: time.Minute, Owner: "w1:1"},
			{ID: ids[1], Gen: gen[ids[1]], TTL: time.Minute, Owner: "w1:3"},
		})
		if err != nil || res[0].Code != Claimed || res[1].Code != ClaimHeld || res[2].Code != Claimed || res[3].Code != Claimed {
			t.Fatalf("claims: %+v %v", res, err)
		}
		if holder(t, s, ids[0], gen[ids[0]]) != "w1:1" || holder(t, s, ids[1], gen[ids[1]]) != "w1:3" {
			t.Fatal("wrong holders")
		}
		// the claims hash stays in the hashtable encoding (claim_pad in
		// common.lua), also when its claims are released
		if _, err := s.ReleaseMany(t.Context(), []Claim{{ID: ids[0], Gen: gen[ids[0]], Owner: "w1:1"}, {ID: ids[1], Gen: gen[ids[1]], Owner: "w1:3"}}); err != nil {
			t.Fatal(err)
		}
		seen := 0
		for sh := range s.Shards() {
			enc, err := rdb.ObjectEncoding(t.Context(), s.k.runs(sh)).Result()
			if err == nil {
				seen++
			}
			if err != nil && !errors.Is(err, redis.Nil) {
				t.Fatal(err)
			}
			if err == nil && enc != "hashtable" {
				t.Fatalf("claims hash of shard %d: encoding %s", sh, enc)
			}
		}
		if seen == 0 {
			t.Fatal("no claims hash left after the releases")
		}
	})

	t.Run("ExpiredClaimsSwept", func(t *testing.T) {
		t.Parallel()
		// claims whose worker died and whose copy never came back are
		// dropped by later claims of the shard (sampled, as Redis expires
		// keys); claims still held stay
		s := newStore(t, rdb, Options{Shards: 1})
		ids, gen := fireN(t, s, "x", 30)
		cs := make([]Claim, len(ids))
		for i, id := range ids {
			cs[i] = Claim{ID: id, Gen: gen[id], TTL: time.Millisecond, Owner: "dead:1"}
		}
		cs[0].TTL, cs[0].Owner = time.Hour, "alive:1"
		if _, err := s.ClaimMany(t.Context(), cs); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
		testenv.WaitFor(t, 10*time.Second, "expired claims swept", func() bool {
			// each claim call samples a few claims and drops the expired ones
			if _, err := s.ClaimMany(t.Context(), cs[:1]); err != nil {
				t.Fatal(err)
			}
			n, err := rdb.HLen(t.Context(), s.k.runs(0)).Result()
			return err == nil && n == 2 // the alive claim and the pad
		})
		if holder(t, s, ids[0], gen[ids[0]]) != "alive:1" {
			t.Fatal("the held claim was dropped")
		}
	})

	t.Run("ExpiredClaimsSweptOnEveryShard", func(t *testing.T) {
		t.Parallel()
		// one call sweeps one of its shards' claims (picked by Redis'
		// clock): calls that span every shard still sweep every shard's
		s := newStore(t, rdb, Options{Shards: 4})
		ids, gen := fireN(t, s, "y", 40)
		cs := make([]Claim, len(ids))
		alive := map[int]Claim{} // one held claim per shard
		for i, id := range ids {
			cs[i] = Claim{ID: id, Gen: gen[id], TTL: time.Millisecond, Owner: "dead:1"}
			if _, ok := alive[s.Shard(id)]; !ok {
				cs[i].TTL, cs[i].Owner = time.Hour, "alive:1"
				alive[s.Shard(id)] = cs[i]
			}
		}
		if len(alive) != 4 {
			t.Fatalf("tasks on %d of 4 shards", len(alive))
		}
		if _, err := s.ClaimMany(t.Context(), cs); err != nil {
			t.Fatal(err)
		}
		again := make([]Claim, 0, 4) // the held claims again: one call over the 4 shards
		for _, c := range alive {
			again = append(again, c)
		}
		time.Sleep(5 * time.Millisecond)
		testenv.WaitFor(t, 10*time.Second, "expired claims swept on every shard", func() bool {
			if _, err := s.ClaimMany(t.Context(), again); err != nil {
				t.Fatal(err)
			}
			for sh := range 4 {
				if n, err := rdb.HLen(t.Context(), s.k.runs(sh)).Result(); err != nil || n != 2 { // the held claim and the pad
					return false
				}
			}
			return true
		})
		for _, c := range alive {
			if holder(t, s, c.ID, c.Gen) != "alive:1" {
				t.Fatal("a held claim was dropped")
			}
		}
	})

	t.Run("ExtendReleaseClaim", func(t *testing.T) {
		t.Parallel()
		s := newStore(t, rdb, Options{})
		ids, gen := fireN(t, s, "e", 1)
		mine := Claim{ID: ids[0], Gen: gen[ids[0]], TTL: time.Minute, Owner: "w1:1"}
		if r, err := s.ClaimMany(t.Context(), []Claim{mine}); err != nil || r[0].Code != Claimed {
			t.Fatalf("claim: %+v %v", r, err)
		}
		ttlOf := func() time.Duration {
			who, ttl, err := s.ClaimHolder(t.Context(), mine.ID, mine.Gen)
			if err != nil || (who != "" && who != mine.Owner) {
				t.Fatalf("claim held by %q (%v)", who, err)
			}
			return ttl
		}
		other := mine
		other.Owner, other.TTL = "w2:1", time.Hour
		// another owner neither extends nor releases it
		if ok, err := s.ExtendClaim(t.Context(), other); err != nil || ok {
			t.Fatalf("extend by another owner: %v %v", ok, err)
		}
		if ttl := ttlOf(); ttl <= 0 || ttl > time.Minute {
			t.Fatalf("claim TTL %v after a refused extend", ttl)
		}
		if ok, err := s.ReleaseClaim(t.Context(), other); err != nil || ok {
			t.Fatalf("release by another owner: %v %v", ok, err)
		}
		// its owner extends it, then releases it
		mine.TTL = time.Hour
		if ok, err := s.ExtendClaim(t.Context(), mine); err != nil || !ok {
			t.Fatalf("extend: %v %v", ok, err)
		}
		if ttl := ttlOf(); ttl <= time.Minute || ttl > time.Hour {
			t.Fatalf("claim TTL %v after extend, want about 1h", ttl)
		}
		if ok, err := s.ReleaseClaim(t.Context(), mine); err != nil || !ok {
			t.Fatalf("release: %v %v", ok, err)
		}
		if ttlOf() != 0 {
			t.Fatal("released claim still held")
		}
		// a claim that is gone is neither extended (nor made again) nor released
		if ok, err := s.ExtendClaim(t.Context(), mine); err != nil || ok || ttlOf() != 0 {
			t.Fatalf("extend of a released claim: %v %v", ok, err)
		}
		if ok, err := s.ReleaseClaim(t.Context(), mine); err != nil || ok {
			t.Fatalf("second release: %v %v", ok, err)
		}
	})

	t.Run("FinishMany", func(t *testing.T) {
		t.Parallel()
		s := newStore(t, rdb, Options{})
		ids, gen := fireN(t, s, "f", 6)
		fs := []Finish{
			{ID: ids[0], Gen: gen[ids[0]], Kind: Succeeded},
			{ID: ids[1], Gen: gen[ids[1]], Kind: Defer, Delay: time.Hour, Relative: true},
			{ID: ids[2], Gen: gen[ids[2]], Kind: Retry, Due: time.Now().Add(time.Hour), Error: "boom"},
			{ID: ids[3], Gen: gen[ids[3]], Kind: Dead, Error: "gone"},
			{ID: ids[4], Gen: gen[ids[4]] + 1, Kind: Succeeded},
			{ID: "nope", Gen: 1, Kind: Succeeded},
			{ID: ids[0], Gen: gen[ids[0]], Kind: Succeeded}, // duplicate: already finished
		}
		res, err := s.FinishMany(t.Context(), fs)
		if err != nil {
			t.Fatal(err)
		}
		want := []task.State{task.StateSucceeded, task.StateScheduled, task.StateRetrying, task.StateDead}
		for i, st := range want {
			if res[i].Err != nil || res[i].State != st {
				t.Fatalf("finish %d: %+v, want %s", i, res[i], st)
			}
		}
		var se *StateError
		if !errors.Is(res[4].Err, ErrStale) || !errors.Is(res[5].Err, ErrNotFound) ||
			!errors.As(res[6].Err, &se) || se.State != task.StateSucceeded {
			t.Fatalf("per-task errors: %v / %v / %v", res[4].Err, res[5].Err, res[6].Err)
		}
		got, err := s.Get(t.Context(), ids[1])
		if err != nil || got.Attempt != 1 || got.State != task.StateScheduled {
			t.Fatalf("deferred task must keep its attempt: %+v %v", got, err)
		}
		got, err = s.Get(t.Context(), ids[2])
		if err != nil || got.Attempt != 2 || got.LastError != "boom" {
			t.Fatalf("retried task: %+v %v", got, err)
		}
	})

	t.Run("FinishGivesUpTheClaimOfItsOwner", func(t *testing.T) {
		t.Parallel()
		s := newStore(t, rdb, Options{})
		ids, gen := fireN(t, s, "o", 3)
		cs := make([]Claim, len(ids))
		for i, id := range ids {
			cs[i] = Claim{ID: id, Gen: gen[id], TTL: time.Minute, Owner: "w1:" + strconv.Itoa(i)}
		}
		if _, err := s.ClaimMany(t.Context(), cs); err != nil {
			t.Fatal(err)
		}
		// ids[2] finished already (say, by an earlier run): its outcome is
		// refused, and the claim goes anyway
		mustFinish(t, s, Finish{ID: ids[2], Gen: gen[ids[2]], Kind: Succeeded})
		fs := []Finish{
			{ID: ids[0], Gen: gen[ids[0]], Kind: Succeeded, Owner: "w1:0"},
			{ID: ids[1], Gen: gen[ids[1]], Kind: Succeeded, Owner: "someone else"},
			{ID: ids[2], Gen: gen[ids[2]], Kind: Succeeded, Owner: "w1:2"},
		}
		res, err := s.FinishMany(t.Context(), fs)
		var se *StateError
		if err != nil || res[0].Err != nil || res[1].Err != nil || !errors.As(res[2].Err, &se) {
			t.Fatalf("finish: %+v %v", res, err)
		}
		// ids[1]'s claim goes too, though "someone else" finished it: a
		// finish that stores an outcome drops the claim of that generation
		// whoever holds it, so that the holder's own finish, trusting its
		// claim (a lean success, see common.lua), cannot store a second
		// outcome; a new claim of that generation is refused anyway (6)
		for i, held := range []bool{false, false, false} {
			if who := holder(t, s, ids[i], gen[ids[i]]); (who != "") != held {
				t.Fatalf("claim of %s held by %q, want held=%v", ids[i], who, held)
			}
		}
	})

	t.Run("ScriptCacheFlushed", func(t *testing.T) {
		s := newStore(t, rdb, Options{})
		ids, gen := fireN(t, s, "n", 3)
		flush(t, rdb)
		cs := []Claim{}
		for _, id := range ids {
			cs = append(cs, Claim{ID: id, Gen: gen[id], TTL: time.Minute, Owner: "w"})
		}
		res, err := s.ClaimMany(t.Context(), cs)
		if err != nil || res[0].Code != Claimed || res[2].Code != Claimed {
			t.Fatalf("claim after SCRIPT FLUSH: %+v %v", res, err)
		}
		flush(t, rdb)
		fr, err := s.FinishMany(t.Context(), []Finish{{ID: ids[0], Gen: gen[ids[0]], Kind: Succeeded}})
		if err != nil || fr[0].State != task.StateSucceeded {
			t.Fatalf("finish after SCRIPT FLUSH: %+v %v", fr, err)
		}
	})
}

// holder is the owner that holds the claim of (id, gen), "" if none.
func holder(t *testing.T, s *Store, id string, gen uint64) string {
	t.Helper()
	who, _, err := s.ClaimHolder(t.Context(), id, gen)
	if err != nil {
		t.Fatal(err)
	}
	return who
}

// A Redis user whose ACL predates the sweep of expired claims (no
// +hrandfield) still claims and finishes: the sweep is best effort. Only
// one claim call in claimSweepEvery sweeps, drawn at random: the test
// claims until redis-server refused an HRANDFIELD, so that it proves the
// refused sweep's path.
func TestClaimWithoutTheSweepsPermission(t *testing.T) {
	r := testenv.StartRedis(t)
	admin := r.Client(t)
	if err := admin.Do(t.Context(), "ACL", "SETUSER", "old", "on", ">secret", "~*", "&*", "+@all", "-hrandfield").Err(); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr, Username: "old", Password: "secret"})
	t.Cleanup(func() { _ = rdb.Close() })
	s := newStore(t, rdb, Options{})
	ids, gen := fireN(t, s, "o", 3)
	cs := make([]Claim, len(ids))
	for i, id := range ids {
		cs[i] = Claim{ID: id, Gen: gen[id], TTL: time.Minute, Owner: "w1:1"}
	}
	// 400 calls: all without a sweep once in 10^23 runs
	for call := 0; testenv.CommandStats(t, admin)["hrandfield"].Rejected == 0; call++ {
		if call == 400 {
			t.Fatal("400 claim calls and no sweep tried")
		}
		res, err := s.ClaimMany(t.Context(), cs)
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range res {
			if c.Code != Claimed {
				t.Fatalf("claim %d: %+v", i, c)
			}
		}
	}
	if err := rdb.Do(t.Context(), "HRANDFIELD", s.k.runs(0), 1).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("the user may run HRANDFIELD (%v): the test proves nothing", err)
	}
	mustFinish(t, s, Finish{ID: ids[0], Gen: gen[ids[0]], Kind: Succeeded, Owner: "w1:1"})
}

// scriptCalls counts the script calls (EVALSHA) redis-server served while
// fn ran.
func scriptCalls(t *testing.T, rdb redis.UniversalClient, fn func()) int64 {
	t.Helper()
	before := testenv.CommandStats(t, rdb)["evalsha"].Calls
	fn()
	return testenv.CommandStats(t, rdb)["evalsha"].Calls - before
}

// Releases and parks of several shards share script calls on one
// redis-server too (packCalls): each section releases its own shard's
// claims, and each parked task goes back into its own shard's due set.
func TestReleaseAndParkSpanShards(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	s := newStore(t, rdb, Options{Shards: 16})
	ctx := t.Context()
	ids, gen := fireN(t, s, "rp", 64)
	claimAll := func(owner string) []Claim {
		t.Helper()
		cs := make([]Claim, len(ids))
		for i, id := range ids {
			cs[i] = Claim{ID: id, Gen: gen[id], TTL: time.Minute, Owner: owner}
		}
		res, err := s.ClaimMany(ctx, cs)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			if r.Code != Claimed {
				t.Fatalf("claim %s by %s: %+v", ids[i], owner, r)
			}
		}
		return cs
	}
	holder := func(id string) string {
		t.Helper()
		who, _, err := s.ClaimHolder(ctx, id, gen[id])
		if err != nil {
			t.Fatal(err)
		}
		return who
	}
	// the scripts in Redis' cache first (a first EVALSHA fails NOSCRIPT)
	if _, err := s.ReleaseMany(ctx, []Claim{{ID: "warm", Gen: 1, Owner: "w0"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ParkMany(ctx, []Park{{ID: "warm", Gen: 1, Type: "t", Shard: 0}}); err != nil {
		t.Fatal(err)
	}

	cs := claimAll("w1:1")
	cs[5].Owner = "w9:9" // not this claim's owner: left alone
	var n int
	var err error
	calls := scriptCalls(t, rdb, func() { n, err = s.ReleaseMany(ctx, cs) })
	if err != nil || n != len(ids)-1 {
		t.Fatalf("released %d (%v), want %d", n, err, len(ids)-1)
	}
	if calls != 1 {
		t.Fatalf("ReleaseMany of %d claims over 16 shards made %d script calls, want 1", len(ids), calls)
	}
	for i, id := range ids {
		want := ""
		if i == 5 {
			want = "w1:1"
		}
		if got := holder(id); got != want {
			t.Fatalf("claim of %s (shard %d) held by %q after the release, want %q", id, s.Shard(id), got, want)
		}
	}
	if ok, err := s.ReleaseClaim(ctx, Claim{ID: ids[5], Gen: gen[ids[5]], Owner: "w1:1"}); err != nil || !ok {
		t.Fatalf("release one: %v %v", ok, err)
	}

	cs = claimAll("w2:1")
	ps := make([]Park, len(ids))
	for i, id := range ids {
		ps[i] = Park{ID: id, Gen: gen[id], Type: "t" + strconv.Itoa(i%2), Owner: cs[i].Owner, Shard: s.Shard(id)}
	}
	ps[9].Gen++ // stale, in the middle of its shard's section: neither parked nor released
	calls = scriptCalls(t, rdb, func() { n, err = s.ParkMany(ctx, ps) })
	if err != nil || n != len(ids)-1 {
		t.Fatalf("parked %d (%v), want %d", n, err, len(ids)-1)
	}
	if calls != 1 {
		t.Fatalf("ParkMany of %d tasks over 16 shards made %d script calls, want 1", len(ids), calls)
	}
	for i, id := range ids {
		g, err := s.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		score, zerr := rdb.ZScore(ctx, s.k.due(s.Shard(id)), id).Result()
		if i == 9 {
			if g.State != task.StateFired || holder(id) != "w2:1" || !errors.Is(zerr, redis.Nil) {
				t.Fatalf("stale park of %s: %+v, claim %q, due score %v %v", id, g, holder(id), score, zerr)
			}
			continue
		}
		if g.State != task.StatePaused || g.Gen != gen[id]+1 || holder(id) != "" || zerr != nil || score < float64(ParkOffset)/2 {
			t.Fatalf("parked %s (shard %d): %+v, claim %q, due score %v %v", id, s.Shard(id), g, holder(id), score, zerr)
		}
	}
	types, err := s.ParkedTypes(ctx)
	if err != nil || types["t0"] != 32 || types["t1"] != 31 {
		t.Fatalf("parked types %v %v, want t0 32, t1 31", types, err)
	}
}

// TestPackedCallsSpanShards: on one redis-server, the claims and the
// outcomes of a batch over many shards go in as few script calls as
// maxPerCall allows (packCalls), each shard's section answered in the
// batch's order and written to that shard's own keys.
func TestPackedCallsSpanShards(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	s := newStore(t, rdb, Options{Shards: 16})
	n := maxPerCall + 50 // two calls
	ids, gen := fireN(t, s, "p", n)
	// the scripts in Redis' cache first (a first EVALSHA fails NOSCRIPT)
	if _, err := s.ClaimMany(t.Context(), []Claim{{ID: "warm", Gen: 1, TTL: time.Minute, Owner: "w0"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.FinishMany(t.Context(), []Finish{{ID: "warm", Gen: 1, Kind: Succeeded}}); err != nil {
		t.Fatal(err)
	}

	cs := make([]Claim, n)
	for i, id := range ids {
		cs[i] = Claim{ID: id, Gen: gen[id], TTL: time.Minute, Owner: "w1:1"}
	}
	cs[7].Gen++ // stale, in the middle of its shard's section
	var res []ClaimResult
	var err error
	calls := scriptCalls(t, rdb, func() { res, err = s.ClaimMany(t.Context(), cs) })
	if err != nil {
		t.Fatal(err)
	}
	if calls != 2 {
		t.Fatalf("ClaimMany of %d tasks over 16 shards made %d script calls, want 2", n, calls)
	}
	for i, r := range res {
		if i == 7 {
			if r.Code != ClaimStale {
				t.Fatalf("stale claim: %+v", r)
			}
			continue
		}
		if r.Code != Claimed || r.Task == nil || r.Task.ID != ids[i] || r.Task.Shard != s.Shard(ids[i]) {
			t.Fatalf("claim %d (%s, shard %d): %+v", i, ids[i], s.Shard(ids[i]), r.Task)
		}
	}

	// two retries on different shards: each goes back into its own
	// shard's due set and wakes that shard's poller
	a := ids[0]
	b := ids[slices.IndexFunc(ids, func(id string) bool { return s.Shard(id) != s.Shard(a) })]
	sub := rdb.Subscribe(t.Context(), s.WakeChannel())
	defer sub.Close()
	if _, err := sub.Receive(t.Context()); err != nil {
		t.Fatal(err)
	}
	due := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	fs := make([]Finish, 0, n)
	for i, id := range ids {
		f := Finish{ID: id, Gen: cs[i].Gen, Owner: "w1:1", Kind: Succeeded}
		if id == a || id == b {
			f.Kind, f.Due, f.Error = Retry, due, "again"
		}
		fs = append(fs, f)
	}
	var fr []FinishResult
	calls = scriptCalls(t, rdb, func() { fr, err = s.FinishMany(t.Context(), fs) })
	if err != nil {
		t.Fatal(err)
	}
	if calls != 2 {
		t.Fatalf("FinishMany of %d outcomes over 16 shards made %d script calls, want 2", n, calls)
	}
	for i, r := range fr {
		want := task.StateSucceeded
		switch ids[i] {
		case a, b:
			want = task.StateRetrying
		}
		if i == 7 {
			if !errors.Is(r.Err, ErrStale) {
				t.Fatalf("stale outcome: %+v", r)
			}
			continue
		}
		if r.Err != nil || r.State != want {
			t.Fatalf("finish %d (%s): %+v, want %s", i, ids[i], r, want)
		}
	}
	woke := map[string]bool{}
	for range 2 {
		select {
		case m := <-sub.Channel():
			woke[m.Payload] = true
		case <-time.After(5 * time.Second):
			t.Fatalf("wake-ups %v, want one for each retried task's shard", woke)
		}
	}
	for _, id := range []string{a, b} {
		sh := s.Shard(id)
		if !woke[fmt.Sprintf("%d:%d", sh, due.UnixMilli())] {
			t.Fatalf("no wake-up for shard %d in %v", sh, woke)
		}
		if err := rdb.ZScore(t.Context(), s.k.due(sh), id).Err(); err != nil {
			t.Fatalf("retried %s not in the due set of its shard %d: %v", id, sh, err)
		}
	}
}
