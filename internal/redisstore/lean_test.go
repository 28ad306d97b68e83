package redisstore

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// The lean success (common.lua): a worker that still holds its claim
// records a success in the done set alone. These tests pin the promises
// that rest on every other script dropping a claim when it changes a
// record, and on every reader telling "waiting state, out of the due set,
// in the done set" as succeeded.
func TestLeanSuccess(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb := r.Client(t)

	// fire1 schedules one task due a second ago and takes it: the take
	// (its lease names it for Settle) and the fired copy's generation
	fire1 := func(t *testing.T, s *Store, id string) (Taken, uint64) {
		t.Helper()
		schedule1(t, s, mk(id, time.Now().Add(-time.Second)))
		tk := mustTake(t, s, s.Shard(id), 1)
		if len(tk.Tasks) != 1 || tk.Tasks[0].ID != id {
			t.Fatalf("take: %+v", tk.Tasks)
		}
		return tk, tk.Tasks[0].Gen
	}
	claim := func(t *testing.T, s *Store, id string, gen uint64, owner string, ttl time.Duration) ClaimResult {
		t.Helper()
		res, err := s.ClaimMany(t.Context(), []Claim{{ID: id, Gen: gen, TTL: ttl, Owner: owner}})
		if err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	finish := func(t *testing.T, s *Store, f Finish) FinishResult {
		t.Helper()
		res, err := s.FinishMany(t.Context(), []Finish{f})
		if err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	state := func(t *testing.T, s *Store, id string) task.State {
		t.Helper()
		got, err := s.Get(t.Context(), id)
		if err != nil {
			t.Fatalf("get %s: %v", id, err)
		}
		return got.State
	}
	rawState := func(t *testing.T, s *Store, id string) byte {
		t.Helper()
		v, err := rdb.HGet(t.Context(), s.k.bucket(s.Shard(id), id), id).Result()
		if err != nil {
			t.Fatal(err)
		}
		return v[0]
	}
	listed := func(t *testing.T, s *Store, st task.State, id string) bool {
		t.Helper()
		page, err := s.List(t.Context(), ListQuery{State: st, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range page.Tasks {
			if l.Task.ID == id {
				return true
			}
		}
		return false
	}
	conflictState := func(err error) task.State {
		var se *StateError
		if errors.As(err, &se) {
			return se.State
		}
		return ""
	}

	t.Run("ReadAsSucceededEverywhere", func(t *testing.T) {
		s := newStore(t, rdb, Options{})
		_, gen := fire1(t, s, "a")
		if c := claim(t, s, "a", gen, "o:1", time.Minute); c.Code != Claimed {
			t.Fatalf("claim: %+v", c)
		}
		if r := finish(t, s, Finish{ID: "a", Gen: gen, Kind: Succeeded, Owner: "o:1"}); r.Err != nil || r.State != task.StateSucceeded {
			t.Fatalf("finish: %+v", r)
		}
		if b := rawState(t, s, "a"); b != 's' {
			t.Fatalf("the record was rewritten (state %q): not a lean success", b)
		}
		if st := state(t, s, "a"); st != task.StateSucceeded {
			t.Fatalf("get: %s", st)
		}
		if !listed(t, s, task.StateSucceeded, "a") || listed(t, s, task.StateFired, "a") {
			t.Fatal("listed as fired, or not as succeeded")
		}
		// a copy delivered again is refused, by claim and by finish
		if c := claim(t, s, "a", gen, "p:1", time.Minute); c.Code != ClaimFinished || c.State != task.StateSucceeded {
			t.Fatalf("claim after success: %+v", c)
		}
		if r := finish(t, s, Finish{ID: "a", Gen: gen, Kind: Retry, Due: time.Now()}); conflictState(r.Err) != task.StateSucceeded {
			t.Fatalf("a second outcome: %+v", r)
		}
		if err := s.Cancel(t.Context(), "a"); conflictState(err) != task.StateSucceeded {
			t.Fatalf("cancel: %v", err)
		}
		if _, err := s.Reschedule(t.Context(), "a", time.Now().Add(time.Hour), 0, false); conflictState(err) != task.StateSucceeded {
			t.Fatalf("reschedule: %v", err)
		}
		other := mk("a", time.Now().Add(time.Hour))
		other.Payload = []byte("other")
		if r := schedule1(t, s, other); r.State != task.StateSucceeded {
			t.Fatalf("re-submit: %+v", r)
		}
		if n, err := s.ParkMany(t.Context(), []Park{{ID: "a", Gen: gen, Type: "t", Shard: s.Shard("a")}}); err != nil || n != 0 {
			t.Fatalf("park: %d %v", n, err)
		}
		if st := state(t, s, "a"); st != task.StateSucceeded {
			t.Fatalf("get at the end: %s", st)
		}
	})

	t.Run("RetentionPurgesIt", func(t *testing.T) {
		s := newStore(t, rdb, Options{Retention: time.Millisecond})
		_, gen := fire1(t, s, "p")
		claim(t, s, "p", gen, "o:1", time.Minute)
		finish(t, s, Finish{ID: "p", Gen: gen, Kind: Succeeded, Owner: "o:1"})
		time.Sleep(5 * time.Millisecond)
		for range 2 * purgeEvery {
			mustTake(t, s, s.Shard("p"), 1)
		}
		if _, err := s.Get(t.Context(), "p"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("get after the retention: %v", err)
		}
	})

	t.Run("ARequeuedTaskItsWorkerRanIsNotFiredAgain", func(t *testing.T) {
		s := newStore(t, rdb, Options{})
		sh := s.Shard("q")
		tk, gen := fire1(t, s, "q")
		claim(t, s, "q", gen, "o:1", time.Minute)
		// Kafka did not confirm the produce, which still reached the topic:
		// the leader puts the task back, and the worker runs that copy
		if _, released, err := s.Settle(t.Context(), sh, 1, tk.Lease, tk.Fired()); err != nil || released != 1 {
			t.Fatalf("settle: %d %v", released, err)
		}
		if st := state(t, s, "q"); st != task.StateScheduled {
			t.Fatalf("requeued: %s", st)
		}
		if r := finish(t, s, Finish{ID: "q", Gen: gen, Kind: Succeeded, Owner: "o:1"}); r.Err != nil {
			t.Fatalf("finish: %+v", r)
		}
		if st := state(t, s, "q"); st != task.StateSucceeded {
			t.Fatalf("after the success: %s", st)
		}
		if again := mustTake(t, s, sh, 1); len(again.Tasks) != 0 {
			t.Fatalf("fired again: %+v", again.Tasks)
		}
	})

	t.Run("NeitherSettleNorAnExpiredLeasePutsItBack", func(t *testing.T) {
		s := newStore(t, rdb, Options{})
		sh := s.Shard("e")
		tk, gen := fire1(t, s, "e")
		claim(t, s, "e", gen, "o:1", time.Minute)
		finish(t, s, Finish{ID: "e", Gen: gen, Kind: Succeeded, Owner: "o:1"})
		// a settle that comes late, naming the task as unconfirmed
		if _, released, err := s.Settle(t.Context(), sh, 1, tk.Lease, tk.Fired()); err != nil || released != 0 {
			t.Fatalf("settle after the success released %d (%v)", released, err)
		}
		// and a take whose lease runs out without a settle
		schedule1(t, s, mk("e2", time.Now().Add(-time.Second)))
		sh2 := s.Shard("e2")
		t2, err := s.Take(t.Context(), sh2, 1, 100, 20*time.Millisecond)
		if err != nil || len(t2.Tasks) != 1 {
			t.Fatalf("take: %+v %v", t2, err)
		}
		g2 := t2.Tasks[0].Gen
		claim(t, s, "e2", g2, "o:2", time.Minute)
		finish(t, s, Finish{ID: "e2", Gen: g2, Kind: Succeeded, Owner: "o:2"})
		time.Sleep(40 * time.Millisecond)
		if again := mustTake(t, s, sh2, 1); len(again.Tasks) != 0 || again.Reclaimed != 0 {
			t.Fatalf("re-claimed after the success: %+v", again)
		}
		if st := state(t, s, "e2"); st != task.StateSucceeded {
			t.Fatalf("e2: %s", st)
		}
	})

	// a script that changes a record the claim covers drops the claim, so
	// that the holder's finish reads the record and is refused
	t.Run("ChangesWithoutTheClaimEndIt", func(t *testing.T) {
		s := newStore(t, rdb, Options{})
		requeued := func(t *testing.T, id string) uint64 {
			tk, gen := fire1(t, s, id)
			claim(t, s, id, gen, "o:"+id, time.Minute)
			if _, released, err := s.Settle(t.Context(), s.Shard(id), 1, tk.Lease, tk.Fired()); err != nil || released != 1 {
				t.Fatalf("settle: %d %v", released, err)
			}
			return gen
		}
		// reschedule after fire (the copy Kafka did not confirm ran)
		gen := requeued(t, "r")
		at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
		if _, err := s.Reschedule(t.Context(), "r", at, 0, false); err != nil {
			t.Fatal(err)
		}
		if r := finish(t, s, Finish{ID: "r", Gen: gen, Kind: Succeeded, Owner: "o:r"}); !errors.Is(r.Err, ErrStale) {
			t.Fatalf("finish after reschedule: %+v", r)
		}
		if got, err := s.Get(t.Context(), "r"); err != nil || got.State != task.StateScheduled || !got.DueAt.Equal(at) {
			t.Fatalf("rescheduled task: %+v %v", got, err)
		}
		// cancel
		gen = requeued(t, "c")
		if err := s.Cancel(t.Context(), "c"); err != nil {
			t.Fatal(err)
		}
		if r := finish(t, s, Finish{ID: "c", Gen: gen, Kind: Succeeded, Owner: "o:c"}); conflictState(r.Err) != task.StateCancelled {
			t.Fatalf("finish after cancel: %+v", r)
		}
		// an update by a re-submit with other content
		gen = requeued(t, "u")
		upd := mk("u", time.Now().Add(time.Hour))
		upd.Payload = []byte("new")
		if r := schedule1(t, s, upd); r.Outcome != Updated {
			t.Fatalf("update: %+v", r)
		}
		if r := finish(t, s, Finish{ID: "u", Gen: gen, Kind: Succeeded, Owner: "o:u"}); !errors.Is(r.Err, ErrStale) {
			t.Fatalf("finish after update: %+v", r)
		}
		if st := state(t, s, "u"); st != task.StateScheduled {
			t.Fatalf("updated task: %s", st)
		}
		// another worker's outcome (a retry) while the claim is held
		_, gen = fire1(t, s, "w")
		claim(t, s, "w", gen, "o:w", time.Minute)
		if r := finish(t, s, Finish{ID: "w", Gen: gen, Kind: Retry, Due: time.Now().Add(time.Hour), Error: "x"}); r.Err != nil {
			t.Fatal(r.Err)
		}
		if r := finish(t, s, Finish{ID: "w", Gen: gen, Kind: Succeeded, Owner: "o:w"}); !errors.Is(r.Err, ErrStale) {
			t.Fatalf("finish after another's retry: %+v", r)
		}
		if st := state(t, s, "w"); st != task.StateRetrying {
			t.Fatalf("retried task: %s", st)
		}
		if who := holder(t, s, "w", gen); who != "" {
			t.Fatalf("claim of w still held by %q", who)
		}
	})

	t.Run("ACrashedWorkersLateFinishIsRefused", func(t *testing.T) {
		s := newStore(t, rdb, Options{})
		_, gen := fire1(t, s, "k")
		// o:1 handles the task and crashes before its finish; its claim
		// runs out and the copy is delivered again (a rebalance)
		claim(t, s, "k", gen, "o:1", 20*time.Millisecond)
		if c := claim(t, s, "k", gen, "p:1", time.Minute); c.Code != ClaimHeld {
			t.Fatalf("claim while o:1 holds it: %+v", c)
		}
		time.Sleep(40 * time.Millisecond)
		if c := claim(t, s, "k", gen, "p:1", time.Minute); c.Code != Claimed {
			t.Fatalf("claim after o:1's ran out: %+v", c)
		}
		if r := finish(t, s, Finish{ID: "k", Gen: gen, Kind: Succeeded, Owner: "p:1"}); r.Err != nil {
			t.Fatal(r.Err)
		}
		// o:1 comes back (it was only slow) and reports a retry
		if r := finish(t, s, Finish{ID: "k", Gen: gen, Kind: Retry, Due: time.Now(), Owner: "o:1"}); conflictState(r.Err) != task.StateSucceeded {
			t.Fatalf("late finish: %+v", r)
		}
		if st := state(t, s, "k"); st != task.StateSucceeded {
			t.Fatalf("get: %s", st)
		}
	})

	t.Run("TwoCopiesOfOneClaimInOneCall", func(t *testing.T) {
		s := newStore(t, rdb, Options{})
		_, gen := fire1(t, s, "d")
		claim(t, s, "d", gen, "o:1", time.Minute)
		f := Finish{ID: "d", Gen: gen, Kind: Succeeded, Owner: "o:1"}
		res, err := s.FinishMany(t.Context(), []Finish{f, f})
		if err != nil || res[0].Err != nil || conflictState(res[1].Err) != task.StateSucceeded {
			t.Fatalf("finish twice: %+v %v", res, err)
		}
	})

	t.Run("RedriveOfATaskMadeDeadWhileAWorkerHeldItsClaim", func(t *testing.T) {
		s := newStore(t, rdb, Options{})
		sh := s.Shard("x")
		tk, gen := fire1(t, s, "x")
		claim(t, s, "x", gen, "o:1", time.Minute)
		// the leader gives up on it (Kafka refused it for good) while a
		// worker runs a copy an earlier produce left in the topic
		out, err := s.SettlePoison(t.Context(), sh, 1, tk.Lease, []Poison{{ID: "x", Gen: gen, DeadAfter: time.Now().Add(-time.Minute), Reason: "refused"}})
		if err != nil || out[0] != PoisonDead {
			t.Fatalf("poison: %v %v", out, err)
		}
		if r := finish(t, s, Finish{ID: "x", Gen: gen, Kind: Succeeded, Owner: "o:1"}); conflictState(r.Err) != task.StateDead {
			t.Fatalf("finish of a dead task: %+v", r)
		}
		if _, err := s.Redrive(t.Context(), "x"); err != nil {
			t.Fatal(err)
		}
		t2 := mustTake(t, s, sh, 1)
		if len(t2.Tasks) != 1 {
			t.Fatalf("redriven task not taken: %+v", t2)
		}
		if st := state(t, s, "x"); st != task.StateFired {
			t.Fatalf("redriven and fired: %s", st)
		}
		g2 := t2.Tasks[0].Gen
		claim(t, s, "x", g2, "o:2", time.Minute)
		finish(t, s, Finish{ID: "x", Gen: g2, Kind: Succeeded, Owner: "o:2"})
		if st := state(t, s, "x"); st != task.StateSucceeded {
			t.Fatalf("redriven and run: %s", st)
		}
	})
}

// ClaimMany sends one TTL per script call: claims with different TTLs in
// one batch each get their own deadline, and their results stay in order.
func TestClaimManyMixedTTLs(t *testing.T) {
	r := testenv.StartRedis(t)
	s := newStore(t, r.Client(t), Options{})
	ids, gen := fireN(t, s, "m", 6)
	cs := make([]Claim, len(ids))
	for i, id := range ids {
		ttl := time.Minute
		if i%2 == 1 {
			ttl = time.Hour
		}
		cs[i] = Claim{ID: id, Gen: gen[id], TTL: ttl, Owner: "o:" + id}
	}
	res, err := s.ClaimMany(t.Context(), cs)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cs {
		if res[i].Code != Claimed || res[i].Task == nil || res[i].Task.ID != c.ID {
			t.Fatalf("claim %d: %+v", i, res[i])
		}
		who, left, err := s.ClaimHolder(t.Context(), c.ID, c.Gen)
		if err != nil || who != c.Owner || left > c.TTL || left < c.TTL-10*time.Second {
			t.Fatalf("claim %d (TTL %s): held by %q for %s (%v)", i, c.TTL, who, left, err)
		}
	}
}

// schedule.lua takes an absolute due time as its due-set score, formatted
// in Go (dueScoreArg), and a relative one with its score's fraction
// (relScoreArg); each must make the very string due_score formats in
// Lua, ties of the fourth decimal (bucket 32: .03125) included.
func TestDueScoreArgMatchesTheScripts(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb := r.Client(t)
	sc := redis.NewScript(commonLua + "\nreturn due_score(tonumber(ARGV[1]), KEYS[1])")
	dues := []int64{0, 1, 999, 1_700_000_000_000, 1_799_999_999_999, 8_796_093_022_207} // up to 2^43 - 1
	for _, due := range dues {
		for b := range BucketsPerShard {
			want, err := sc.Run(t.Context(), rdb, []string{"dq:{x:0}:t:" + strconv.Itoa(b)}, due).Text()
			if err != nil {
				t.Fatal(err)
			}
			if got := dueScoreArg(due, b); got != want {
				t.Fatalf("due %d bucket %d: Go %q, Lua %q", due, b, got, want)
			}
			// a relative due time's score: the script adds the delay
			// to its clock and appends the fraction relScoreArg carries
			if got := strconv.FormatInt(due, 10) + relScoreArg(0, b)[2:]; got != want {
				t.Fatalf("due %d bucket %d: relative score %q, due_score %q", due, b, got, want)
			}
		}
	}
}

// TestNewRecordMatchesTheScripts: the record the store builds for a new
// task with an absolute due time (schedule.lua writes it as it comes) is
// the one record() of common.lua builds, which every script parses.
func TestNewRecordMatchesTheScripts(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb := r.Client(t)
	sc := redis.NewScript(commonLua + "\nreturn record('s', 0, 1, tonumber(ARGV[1]), ARGV[2])")
	tk := &task.Task{ID: "x", Type: "t", Payload: []byte(`{"a":1}`), PayloadJSON: true, Headers: map[string]string{"h": "v"}, MaxAttempts: 3}
	body := task.EncodeBody(tk)
	for _, due := range []int64{0, 1, 999, 1<<32 - 1, 1 << 32, 1_700_000_000_000, task.MaxDueMillis} {
		want, err := sc.Run(t.Context(), rdb, nil, due, body).Text()
		if err != nil {
			t.Fatal(err)
		}
		if got := string(newRecord(due, tk)); got != want {
			t.Fatalf("due %d: Go %x, Lua %x", due, got, want)
		}
	}
}
