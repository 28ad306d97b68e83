package redisstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/testenv"
)

// A Redis master joins a running 3-master cluster and the hash slots of
// half the shards migrate to it, key batch by key batch, while a producer
// schedules 5,000 tasks/s and one leader per shard takes, settles and
// finishes what is due: every task fires exactly once, none before its due
// time by Redis' clock, nothing is left due or in flight, no call returns
// an error, and the migration really met the scripts (refusals retried).
//
// Every shard holds, besides the load, a finished record, an error hash
// entry (a dead task) and an outstanding lease, as a shard in production
// does: then every key a take declares exists, so that Redis would run a
// take on the source of a half-moved slot (where some bucket hashes are
// gone, and where it cannot create its lease key) if the slot guard did
// not make it refuse (see call.go).
func TestSlotMigrationUnderLoad(t *testing.T) {
	const (
		shards   = 16
		rate     = 5000 // tasks scheduled per second
		produce  = 10 * time.Second
		batch    = 100 // tasks per Schedule call
		maxDelay = 2 * time.Second
		migrated = shards / 2 // shard slots moved to the new master
		lease    = 30 * time.Second
	)
	c := testenv.StartRedisCluster(t)
	rdb := c.Client(t)
	ctx := t.Context()
	s, err := New(ctx, rdb, Options{Namespace: "slotmig", Shards: shards})
	if err != nil {
		t.Fatal(err)
	}
	const token = 1
	anchors := anchorShards(t, s, token)

	var (
		mu      sync.Mutex
		fired   = make(map[string]int, int(produce.Seconds())*rate)
		due     = make(map[string]time.Time, int(produce.Seconds())*rate)
		early   []string
		maxLate time.Duration
		first   time.Time // of the fires, by the process clock
		last    time.Time
		errMu   sync.Mutex
		errs    []error
	)
	fail := func(err error) {
		errMu.Lock()
		defer errMu.Unlock()
		if len(errs) < 20 {
			errs = append(errs, err)
		}
	}
	retriesBefore := s.MigratingRetries()

	// the producer: a batch every batch/rate, each sent on its own so that
	// a slow call (a slot refusing it for a while) does not lower the rate;
	// due 0..maxDelay later by Redis' clock
	var scheduled atomic.Int64
	stop := make(chan struct{})
	prodDone := make(chan struct{})
	var producedAll time.Time // when the last Schedule returned
	go func() {
		defer close(prodDone)
		var inflight sync.WaitGroup
		defer func() {
			inflight.Wait()
			producedAll = time.Now()
		}()
		every := time.Second * batch / rate
		tick := time.NewTicker(every)
		defer tick.Stop()
		start := time.Now()
		for n := 0; n < int(produce/every); n++ {
			// catch up after a slow tick: batch n leaves at start + n*every
			if time.Since(start) < time.Duration(n)*every {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
			}
			subs := make([]Submit, batch)
			for i := range subs {
				id := "m" + strconv.Itoa(n*batch+i)
				d := time.Duration((n*batch+i)*7919%1000) * maxDelay / 1000
				subs[i] = Submit{Task: mk(id, time.Time{}), Delay: d, Relative: true}
			}
			inflight.Go(func() {
				res, err := s.Schedule(ctx, subs)
				if err != nil {
					fail(fmt.Errorf("schedule batch %d: %w", n, err))
					return
				}
				mu.Lock()
				defer mu.Unlock()
				for _, r := range res {
					if r.Outcome != Created {
						fail(fmt.Errorf("schedule %s: %v", r.ID, r.Outcome))
						continue
					}
					due[r.ID] = r.DueAt
				}
				scheduled.Add(int64(len(res)))
			})
		}
	}()

	// one leader per shard: take what is due, settle the take, finish the
	// tasks (as a worker would)
	var leaders sync.WaitGroup
	for sh := range shards {
		leaders.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				tk, err := s.Take(ctx, sh, token, 500, lease)
				if err != nil {
					fail(err)
					time.Sleep(10 * time.Millisecond)
					continue
				}
				if len(tk.Tasks) == 0 {
					// until the next due time, as a leader sleeps, but at
					// least 1ms and at most 20ms
					wait := 20 * time.Millisecond
					if !tk.NextDue.IsZero() {
						wait = min(wait, max(time.Millisecond, tk.NextDue.Sub(tk.Now)))
					}
					time.Sleep(wait)
					continue
				}
				mu.Lock()
				if first.IsZero() {
					first = time.Now()
				}
				last = time.Now()
				for _, tt := range tk.Tasks {
					fired[tt.ID]++
					if tk.Now.Before(tt.DueAt) {
						early = append(early, fmt.Sprintf("%s due %v taken at Redis time %v", tt.ID, tt.DueAt, tk.Now))
					}
					maxLate = max(maxLate, tk.Now.Sub(tt.DueAt))
				}
				mu.Unlock()
				if _, _, err := s.Settle(ctx, sh, token, tk.Lease, nil); err != nil {
					fail(err)
				}
				fs := make([]Finish, len(tk.Tasks))
				for i, tt := range tk.Tasks {
					fs[i] = Finish{ID: tt.ID, Gen: tt.Gen, Kind: Succeeded}
				}
				res, err := s.FinishMany(ctx, fs)
				if err != nil {
					fail(err)
					continue
				}
				for i, r := range res {
					if r.Err != nil {
						fail(fmt.Errorf("finish %s: %w", fs[i].ID, r.Err))
					}
				}
			}
		})
	}
	t.Cleanup(func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		leaders.Wait()
		<-prodDone
	})

	// meanwhile: a 4th master joins, and the slots of half the shards move
	// to it in batches of 50 keys (a shard's slot holds up to about 1,000,
	// mostly bucket hashes; about 500 when the first one moves) 10ms apart:
	// each slot stays split for 100ms or more, in which its leader takes
	// (every 20ms at most) and the producer schedules on it, and for well
	// under runScript's retry bound (migratingRetryFor) even on a loaded
	// machine
	time.Sleep(time.Second)
	m4 := c.AddMaster(t)
	var slots []int
	for sh := range migrated {
		slots = append(slots, c.SlotOf(t, s.k.due(sh*shards/migrated)))
	}
	time.Sleep(time.Second)
	began := time.Now()
	st, err := c.MigrateSlots(ctx, m4, slots, testenv.MigrateOptions{Batch: 50, Pause: 10 * time.Millisecond})
	if err != nil {
		t.Fatalf("migrate slots %v: %v", slots, err)
	}
	moveTook := time.Since(began)
	<-prodDone

	// the last tasks are due maxDelay after the last schedule; allow for
	// far more than that before calling the rest lost
	total := int(scheduled.Load())
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		n := len(fired)
		mu.Unlock()
		if n >= total {
			break
		}
	}
	close(stop)
	leaders.Wait()
	drained := last.Sub(producedAll)
	mu.Lock() // the leaders are gone; the lock is for the race detector's sake
	defer mu.Unlock()

	retries := s.MigratingRetries() - retriesBefore
	t.Logf("%d tasks scheduled over %v (%.0f/s); %d fired over %v (%.0f/s), the last %v after the last schedule (due up to %v after it)",
		total, produce, float64(total)/produce.Seconds(), len(fired), last.Sub(first).Round(time.Millisecond),
		float64(len(fired))/last.Sub(first).Seconds(), drained.Round(time.Millisecond), maxDelay)
	t.Logf("migration: %d slots, %d keys in %d batches, %v in all, longest slot %v",
		st.Slots, st.Keys, st.Batches, moveTook.Round(time.Millisecond), st.Longest.Round(time.Millisecond))
	t.Logf("script calls refused by a migrating slot and retried: %d; max lateness (Redis time of take - due): %v",
		retries, maxLate.Round(time.Millisecond))

	errMu.Lock()
	failed := errs
	errMu.Unlock()
	for _, err := range failed {
		t.Error(err)
	}
	if len(failed) > 0 {
		t.Fatalf("%d calls failed during the migration (first 20 above)", len(failed))
	}
	var lost, dup []string
	for id := range due {
		switch n := fired[id]; {
		case n == 0:
			lost = append(lost, id)
		case n > 1:
			dup = append(dup, fmt.Sprintf("%s x%d", id, n))
		}
	}
	for id := range fired {
		if _, ok := due[id]; !ok {
			t.Errorf("fired %s, which was never scheduled", id)
		}
	}
	if len(lost) > 0 || len(dup) > 0 || len(early) > 0 {
		t.Fatalf("of %d tasks: %d lost %v, %d fired twice %v, %d early %v",
			total, len(lost), firstFew(lost), len(dup), firstFew(dup), len(early), firstFew(early))
	}
	if total < int(produce.Seconds())*rate*9/10 {
		t.Fatalf("scheduled %d tasks in %v, want about %d", total, produce, int(produce.Seconds())*rate)
	}

	// the anchors' leases go too; then nothing is due or in flight
	for sh, l := range anchors {
		if _, _, err := s.Settle(ctx, sh, token, l, nil); err != nil {
			t.Fatal(err)
		}
	}
	for sh := range shards {
		nd, err := rdb.ZCard(ctx, s.k.due(sh)).Result()
		if err != nil {
			t.Fatal(err)
		}
		ni, err := rdb.ZCard(ctx, s.k.inflight(sh)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if nd != 0 || ni != 0 {
			t.Errorf("shard %d: %d left due, %d leases in flight", sh, nd, ni)
		}
	}
	for _, slot := range slots {
		if owner := c.SlotOwner(t, slot); owner != m4.Addr {
			t.Errorf("slot %d is served by %s, want the new master %s", slot, owner, m4.Addr)
		}
	}
	if st.Slots != migrated {
		t.Fatalf("moved %d slots, want %d", st.Slots, migrated)
	}
	if retries == 0 {
		t.Fatal("no script call met a migrating slot: the migration did not overlap the firing; slow it down")
	}
}

// anchorShards gives every shard what a shard in production has: a
// finished record (the done set), an entry in its error hash (a dead task)
// and an outstanding lease (a take not yet settled). It returns each
// shard's lease, for the end of the test.
func anchorShards(t *testing.T, s *Store, token int64) map[int]string {
	t.Helper()
	ctx := t.Context()
	idOn := func(sh int, kind string) string {
		for n := 0; ; n++ {
			if id := "anchor-" + kind + "-" + strconv.Itoa(n); s.Shard(id) == sh {
				return id
			}
		}
	}
	take := func(sh int, ids ...string) Taken {
		subs := make([]Submit, len(ids))
		for i, id := range ids {
			subs[i] = Submit{Task: mk(id, time.Time{}), Relative: true}
		}
		if _, err := s.Schedule(ctx, subs); err != nil {
			t.Fatal(err)
		}
		tk, err := s.Take(ctx, sh, token, 10, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if len(tk.Tasks) != len(ids) {
			t.Fatalf("shard %d: took %d tasks, want %v", sh, len(tk.Tasks), ids)
		}
		return tk
	}
	leases := make(map[int]string)
	for sh := range s.Shards() {
		if _, err := s.Adopt(ctx, sh, token); err != nil {
			t.Fatal(err)
		}
		tk := take(sh, idOn(sh, "ok"), idOn(sh, "dead"))
		if _, _, err := s.Settle(ctx, sh, token, tk.Lease, nil); err != nil {
			t.Fatal(err)
		}
		for _, tt := range tk.Tasks {
			f := Finish{ID: tt.ID, Gen: tt.Gen, Kind: Succeeded}
			if strings.Contains(tt.ID, "dead") {
				f.Kind, f.Error = Dead, "anchor"
			}
			if _, err := s.Finish(ctx, f); err != nil {
				t.Fatalf("anchor %s: %v", tt.ID, err)
			}
		}
		leases[sh] = take(sh, idOn(sh, "lease")).Lease
	}
	return leases
}

func firstFew(s []string) []string {
	slices.Sort(s)
	return s[:min(len(s), 5)]
}

// The slot guard keeps a take whole: on a half-moved slot (its bucket hash
// gone to the new master, every key it declares still on the source) Redis
// refuses it with TRYAGAIN, where without the guard it would run on the
// source and stop in the middle ("non local key") after taking the task out
// of the due set. Once the slot has moved, the same take runs.
func TestSlotGuardRefusesAHalfMovedSlot(t *testing.T) {
	c := testenv.StartRedisCluster(t)
	rdb := c.Client(t)
	ctx := t.Context()
	s, err := New(ctx, rdb, Options{Namespace: "guard", Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	anchors := anchorShards(t, s, 1)
	res, err := s.Schedule(ctx, []Submit{{Task: mk("g1", time.Time{}), Relative: true}})
	if err != nil || res[0].Outcome != Created {
		t.Fatalf("schedule: %v %v", res, err)
	}
	m4 := c.AddMaster(t)
	slot := c.SlotOf(t, s.k.due(0))
	var src *redis.Client
	owner := c.SlotOwner(t, slot)
	for _, n := range c.Nodes {
		if n.Addr == owner {
			src = n.Client(t)
		}
	}
	if src == nil {
		t.Fatalf("slot %d is served by %s, not a node of %v", slot, owner, c.Addrs)
	}
	dst := m4.Client(t)
	_, port, _ := strings.Cut(m4.Addr, ":")
	if err := dst.Do(ctx, "cluster", "setslot", slot, "importing", src.ClusterMyID(ctx).Val()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := src.Do(ctx, "cluster", "setslot", slot, "migrating", dst.ClusterMyID(ctx).Val()).Err(); err != nil {
		t.Fatal(err)
	}
	// g1's bucket moves; due, inflight, fence, done, err and the lease
	// sequence stay on the source
	if err := src.Do(ctx, "migrate", "127.0.0.1", port, "", 0, 5000, "keys", s.k.bucket(0, "g1")).Err(); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{s.k.due(0), s.k.inflight(0), s.k.fence(0), s.k.done(0), s.k.errs(0), s.k.leaseSeq(0)} {
		if src.Exists(ctx, k).Val() != 1 {
			t.Fatalf("%s is not on the source: the take would not run there unguarded", k)
		}
	}

	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	before := s.MigratingRetries()
	_, err = s.Take(short, 0, 1, 10, time.Minute)
	// refused whole until the deadline (unguarded: "non local key")
	if !isMigrating(err) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("take on a half-moved slot: %v, want TRYAGAIN or the deadline", err)
	}
	if s.MigratingRetries() == before {
		t.Fatal("the refused take was not retried")
	}
	if n := src.ZCard(ctx, s.k.due(0)).Val(); n != 1 {
		t.Fatalf("due set holds %d after a refused take, want 1 (g1)", n)
	}

	if _, err := c.MigrateSlots(ctx, m4, []int{slot}, testenv.MigrateOptions{}); err != nil {
		t.Fatal(err)
	}
	tk, err := s.Take(ctx, 0, 1, 10, time.Minute)
	if err != nil || len(tk.Tasks) != 1 || tk.Tasks[0].ID != "g1" {
		t.Fatalf("take after the move: %v %v, want g1", tk.Tasks, err)
	}
	for _, l := range []string{anchors[0], tk.Lease} {
		if _, _, err := s.Settle(ctx, 0, 1, l, nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := dst.ZCard(ctx, s.k.inflight(0)).Val(); n != 0 {
		t.Fatalf("%d leases left in flight", n)
	}
}

// Every script that reaches keys through the shard's key prefix (the
// common.lua helpers that build a key from it) is in prefixScripts, so
// that runScript guards it; a new one that is not fails here.
func TestPrefixScriptsAreGuarded(t *testing.T) {
	reach := regexp.MustCompile(`\b(bucket|lease_key|drop_lease|due_of_score)\(`)
	files, err := filepath.Glob("*.lua")
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, f := range files {
		if f == "common.lua" {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !reach.Match(src) {
			continue
		}
		found++
		if h := script(string(src)).Hash(); !guarded[h] {
			t.Errorf("%s reaches keys it does not declare but is not in prefixScripts", f)
		}
	}
	if found != len(prefixScripts()) {
		t.Errorf("%d scripts reach undeclared keys, prefixScripts lists %d", found, len(prefixScripts()))
	}
}

func TestIsMigrating(t *testing.T) {
	for msg, want := range map[string]bool{
		// what Redis 7.0 answered in the tests above
		"TRYAGAIN Multiple keys request during rehashing of slot":               true,
		"ASK 16287 127.0.0.1:23562":                                             true,
		"MOVED 3999 127.0.0.1:6381":                                             true,
		"take shard 3: TRYAGAIN Multiple keys request during rehashing of slot": true,
		// ran in part: must not be sent again
		"ERR Script attempted to access a non local key in a cluster node script: 45fa, on @user_script:273.": false,
		"NOSCRIPT No matching script. Please use EVAL.":                                                       false,
		"CLUSTERDOWN The cluster is down":                                                                     false,
		"ERR Error running script (call to f_1): @user_script:3: user_script:3: bad argument":                 false,
	} {
		if got := isMigrating(errors.New(msg)); got != want {
			t.Errorf("isMigrating(%q) = %v, want %v", msg, got, want)
		}
	}
	if isMigrating(nil) {
		t.Error("isMigrating(nil)")
	}
}

func TestSlotGuardKey(t *testing.T) {
	for key, want := range map[string]string{
		"dq:{ns:3}:due":    "dq:{ns:3}:slotguard",
		"dq:{ns:3}:t:17":   "dq:{ns:3}:slotguard",
		"dq:{ns}:meta":     "dq:{ns}:slotguard",
		"plain":            "",
		"dq:{}:empty-tag":  "",
		"dq:{unclosed:due": "",
	} {
		if got := slotGuard(key); got != want {
			t.Errorf("slotGuard(%q) = %q, want %q", key, got, want)
		}
	}
}
